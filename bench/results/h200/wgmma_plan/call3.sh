#!/usr/bin/env bash
# The wgmma tiles' first device run (p1, p2 staged by the two calls before it; any sm_90 card):
# ready (stage, install); each shape's wgmma set checked bit for bit against its register twins
# at M=8 and at M=16 (a cold sweep's --check-only, the emulator's claim put to the tensor core),
# then timed alone, cold, by ncu at M = 1, 8 and 16 beside the table's tiles, bf16; then fp16's
# check at M=16. Outputs packed in one tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for m in 8 16; do
  pm=""; [ "$m" = 16 ] && pm="--point-m 16"
  # shellcheck disable=SC2086
  BENCH_TIMEOUT=150 SWEEP_OUT=/tmp/h200res/check$m bash scripts/h200.sh coldsweep --check-only \
    --points wgmma --shapes gate_up,down --ms $m $pm --dtypes bfloat16 --no-ring --no-bulk \
    > "$OUT/check$m.log" 2>&1 || echo "check $m rc $?"
  grep -i "bit-exact\|differ\|error" "$OUT/check$m.log" | tail -5
done
for shape in gate_up down; do
  mkdir -p "$OUT/ncu_$shape"
  NCU_LIGHT=1 NCU_TIMEOUT=170 OUT=$OUT/ncu_$shape bash scripts/h200.sh ncucold \
    --shapes $shape --ms 1,8,16 --reps 2 \
    --tiles "$(python3 bench/diagnostic_tiles.py set:wgmma:$shape)" > /dev/null 2>&1 \
    || echo "ncu $shape rc $?"
  cut -d'|' -f2-6,11 "$OUT/ncu_$shape/ncu_cold.md" | tail -n +3
done
BENCH_TIMEOUT=100 SWEEP_OUT=/tmp/h200res/check16h bash scripts/h200.sh coldsweep --check-only \
  --points wgmma --shapes gate_up --ms 16 --point-m 16 --dtypes float16 --no-ring --no-bulk \
  > "$OUT/check16h.log" 2>&1 || echo "check 16 fp16 rc $?"
grep -i "bit-exact\|differ\|error" "$OUT/check16h.log" | tail -3
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
