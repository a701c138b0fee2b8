#!/usr/bin/env bash
# wgmma with x three K steps ahead in registers (x_ahead; p1, p2 staged by the two calls before
# it; any sm_90 card): ready; the wgmma-ahead set checked bit for bit against its register
# twins at M=16 and at M=8 (the cold sweep's --check-only); then each shape timed alone, cold,
# by ncu at M = 8 and 16, each x_ahead tile beside its twin without it and the table's tiles,
# bf16. Outputs packed in one tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for m in 16 8; do
  mkdir -p "$OUT/check$m"
  timeout 120 python3 bench/cuda_verify_cold_sweep.py --out "$OUT/check$m" --check-only \
    --points wgmma-ahead --shapes gate_up,down --ms $m --point-m $m --dtypes bfloat16 \
    > "$OUT/check$m.log" 2>&1 || echo "check $m rc $?"
  grep -i "bit-exact\|differ\|error" "$OUT/check$m.log" | tail -3
done
ncu_set() {
  local dir=$OUT/ncu_$1 tiles
  tiles=$(python3 bench/diagnostic_tiles.py "set:wgmma-ahead:$1")
  mkdir -p "$dir"
  NCU_LIGHT=1 NCU_TIMEOUT=120 OUT=$dir bash scripts/h200.sh ncucold --shapes "$1" --ms 8,16 \
    --reps 2 --tiles "$tiles" > /dev/null 2>&1 || echo "ncu $1 rc $?"
  cut -d'|' -f2,6,11 "$dir/ncu_cold.md" | tail -n +3 \
    | sed 's/.l2_prefetch.: 128, //; s/.x_early.: 0, .min_blocks.: 0, .bulk.: 0, //'
}
ncu_set gate_up
ncu_set down
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
