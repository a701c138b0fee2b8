# Sourced by the plan scripts (wgmma_plan/call3_ring.sh, wgmma_next_plan/call3.sh), with OUT and
# PYTHONPATH set as there. check_set SET M: every tile of sweep_points' SET (bf16, gate/up and
# down) checked bit for bit against its register twin at M by the cold sweep's --check-only
# (150 s at most), into $OUT/check<M>, and its verdict's last lines. ncu_set SET SHAPE: each tile of sweep_points' SET for SHAPE alone under
# ncu, cold, at M = 8 and 16, 2 launches each (NCU_TIMEOUT, default 150 s), into $OUT/ncu_SHAPE;
# then one line a launch: label | µs | registers.
ncu_set() {
  local dir=$OUT/ncu_$2 tiles
  tiles=$(python3 bench/diagnostic_tiles.py "set:$1:$2")
  mkdir -p "$dir"
  NCU_LIGHT=1 NCU_TIMEOUT=${NCU_TIMEOUT:-150} OUT=$dir bash scripts/h200.sh ncucold --shapes "$2" \
    --ms 8,16 --reps 2 --tiles "$tiles" > /dev/null 2>&1 || echo "ncu $2 rc $?"
  cut -d'|' -f2,6,11 "$dir/ncu_cold.md" | tail -n +3 \
    | sed 's/.l2_prefetch.: 128, //; s/.x_early.: 0, .min_blocks.: 0, .bulk.: 0, //'
}
check_set() {
  mkdir -p "$OUT/check$2"
  timeout 150 python3 bench/cuda_verify_cold_sweep.py --out "$OUT/check$2" --check-only \
    --points "$1" --shapes gate_up,down --ms "$2" --point-m "$2" --dtypes bfloat16 \
    > "$OUT/check$2.log" 2>&1 || echo "check rc $?"
  grep -i "bit-exact\|differ\|error" "$OUT/check$2.log" | tail -3
}
