#!/usr/bin/env bash
# The wgmma tiles on the cp.async ring (p1, p2 staged by the two calls before it; any sm_90
# card): ready; the wgmma-ring set checked bit for bit against its register twins at M=16 (the
# cold sweep's --check-only, called directly: h200.sh's coldsweep would smoke-test the ring
# first); then each shape timed alone, cold, by ncu at M = 8 and 16 beside the
# table's tiles, bf16. Outputs packed in one tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for m in 16; do  # (the ring feeds M=8's wgmma as M=16's; the register tiles were checked at both)
  mkdir -p "$OUT/check$m"
  timeout 150 python3 bench/cuda_verify_cold_sweep.py --out "$OUT/check$m" --check-only \
    --points wgmma-ring --shapes gate_up,down --ms $m --point-m $m --dtypes bfloat16 \
    > "$OUT/check$m.log" 2>&1 || echo "check $m rc $?"
  grep -i "bit-exact\|differ\|error" "$OUT/check$m.log" | tail -5
done
for shape in gate_up down; do
  mkdir -p "$OUT/ncu_$shape"
  NCU_LIGHT=1 NCU_TIMEOUT=150 OUT=$OUT/ncu_$shape bash scripts/h200.sh ncucold \
    --shapes $shape --ms 8,16 --reps 2 \
    --tiles "$(python3 bench/diagnostic_tiles.py set:wgmma-ring:$shape)" > /dev/null 2>&1 \
    || echo "ncu $shape rc $?"
  cut -d'|' -f2,6,11 "$OUT/ncu_$shape/ncu_cold.md" | tail -n +3 | sed 's/.l2_prefetch.: 128, //; s/.x_early.: 0, .min_blocks.: 0, .bulk.: 0, //'
done
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
