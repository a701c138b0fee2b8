#!/usr/bin/env bash
# The wgmma tiles on the cp.async ring (p1, p2 staged by the two calls before it; any sm_90
# card): ready; the wgmma-ring set checked bit for bit against its register twins at M=16 (the
# cold sweep's --check-only, called directly: h200.sh's coldsweep would smoke-test the ring
# first); then each shape timed alone, cold, by ncu at M = 8 and 16 beside the
# table's tiles, bf16. Outputs packed in one tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
# (at M=16 alone: the ring feeds M=8's wgmma as it feeds M=16's, and the register tiles were
# checked at both)
mkdir -p "$OUT/check16"
timeout 150 python3 bench/cuda_verify_cold_sweep.py --out "$OUT/check16" --check-only \
  --points wgmma-ring --shapes gate_up,down --ms 16 --point-m 16 --dtypes bfloat16 \
  > "$OUT/check16.log" 2>&1 || echo "check 16 rc $?"
grep -i "bit-exact\|differ\|error" "$OUT/check16.log" | tail -5
# each shape's set alone under ncu, then its times (one line a launch)
. bench/results/h200/ncu_set.sh
ncu_set wgmma-ring gate_up
ncu_set wgmma-ring down
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
