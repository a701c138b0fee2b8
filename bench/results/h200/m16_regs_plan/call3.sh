#!/usr/bin/env bash
# M=16's registers (p1, p2 staged by the two calls before it; any sm_90 card): ready; the set
# bulk-m16-regs (bulk tiles that fit more warps an SM at M=16: sweep_points.BULK_M16_REGS)
# checked bit for bit against its register twins at M=16 (the cold sweep's --check-only); each
# tile alone under ncu, cold, at M = 8 and 16, beside the table's tiles; then bulk-m16-floors
# (the same tiles without x's loads, ablate 3: a time, not a result). Outputs packed in one
# tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
export NCU_TIMEOUT=120
. bench/results/h200/ncu_set.sh
check_set bulk-m16-regs 16
ncu_set bulk-m16-regs gate_up
ncu_set bulk-m16-regs down
OUT=$OUT/floors ncu_set bulk-m16-floors gate_up
OUT=$OUT/floors ncu_set bulk-m16-floors down
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
