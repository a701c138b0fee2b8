#!/usr/bin/env bash
# x_rot at M=16 (p1, p2 staged by the two calls before it; any sm_90 card): ready; the set
# bulk-m16-xrot (sweep_points.BULK_M16_XROT: bulk tiles with the next step's x loaded word by
# word into the registers this step's word leaves, beside their twins and the table's M=16
# tiles) checked bit for bit against its register twins at M=16 (the cold sweep's
# --check-only); then each tile alone under ncu, cold, at M = 8 and 16. Outputs packed in one
# tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCU_TIMEOUT=150
. bench/results/h200/ncu_set.sh
check_set bulk-m16-xrot 16
ncu_set bulk-m16-xrot gate_up
ncu_set bulk-m16-xrot down
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
