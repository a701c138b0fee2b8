#!/usr/bin/env bash
# The short form of call3.sh for a call with under ~450 s of device time left: no check (the
# tiles are bit for bit their twins on the CUDA emulator, not yet on a device, so nothing timed
# here may enter the table), gate/up alone, four tiles of bulk-m16-xrot (the bulk tile without
# and with x_rot, 16 x 4 with x_rot, the table's M=16 tile) under ncu, cold, at M = 8 and 16,
# 2 launches each. Outputs in one tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
tiles=$(python3 bench/diagnostic_tiles.py set:bulk-m16-xrot:gate_up \
  | python3 -c 'import json, sys; t = json.load(sys.stdin); print(json.dumps([t[i] for i in (0, 1, 3, 6)]))')
mkdir -p "$OUT/ncu_gate_up"
NCU_LIGHT=1 NCU_TIMEOUT=110 OUT=$OUT/ncu_gate_up bash scripts/h200.sh ncucold --shapes gate_up \
  --ms 8,16 --reps 2 --tiles "$tiles" > /dev/null 2>&1 || echo "ncu rc $?"
cut -d'|' -f2,6,11 "$OUT/ncu_gate_up/ncu_cold.md" | tail -n +3
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
