#!/usr/bin/env bash
# The short form of call3.sh for a call with under ~450 s of device time left: no check (the
# tiles are bit for bit their twins on the CUDA emulator, not yet on a device, so nothing timed
# here may enter the table), gate/up alone: bulk-m16-xrot under ncu, cold, at M = 8 and 16.
# Outputs in one tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NCU_TIMEOUT=130
. bench/results/h200/ncu_set.sh
ncu_set bulk-m16-xrot gate_up
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
