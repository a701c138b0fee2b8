#!/usr/bin/env bash
# The H200 plan after ../../h100/xahead_f16_1604 (p1, p2 staged by the two calls before it):
# ready (stage, install); ncu alone, cold, on fp16's bulk tiles (gate/up, down) and down bf16's
# bulk-lag set, each run in a folder of $OUT (as h200_recipes.sh runs them); the cold sweeps
# that check those tiles bit for bit and time them eager, compiled and in a chain; then
# `choose` on the committed table. Outputs packed in one tarball ($OUT/call3.tgz); the chosen
# table stays in /tmp/h200res for the bench of the call after it.
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for run in "f16g float16 gate_up bulk-f16" "f16d float16 down bulk-f16" "dl bfloat16 down bulk-lag"; do
  set -- $run
  mkdir -p "$OUT/ncu_$1"
  NCU_LIGHT=1 NCU_TAG=_$1 NCU_DTYPES=$2 NCU_TIMEOUT=110 OUT=$OUT/ncu_$1 bash scripts/h200.sh ncucold \
    --shapes "$3" --ms 8 --reps 2 --tiles "$(python3 bench/diagnostic_tiles.py "set:$4:$3")" \
    > /dev/null 2>&1 || echo "ncu $1 rc $?"
  cut -d'|' -f2,6,11 "$OUT/ncu_$1/ncu_cold.md" | tail -n +3
done
for run in "f16 bulk-f16 gate_up,down float16" "dl bulk-lag down bfloat16"; do
  set -- $run
  BENCH_TIMEOUT=150 SWEEP_OUT=/tmp/h200res/$1 bash scripts/h200.sh coldsweep --points "$2" \
    --shapes "$3" --ms 8 --dtypes "$4" --chain --final-top 4 --time-each --no-ring \
    --budget-s 100 > /dev/null 2>&1 || echo "sweep $1 rc $?"
  grep -A12 "Every final candidate" "$OUT/$1/cuda_verify_cold_sweep.md"
done
CHOOSE_TABLE=kernels/selection_table.json \
  NCU_CSVS=/tmp/h200res/ncu_cold_f16g.csv,/tmp/h200res/ncu_cold_f16d.csv,/tmp/h200res/ncu_cold_dl.csv \
  COLD_SWEEPS=/tmp/h200res/f16/cuda_verify_cold_sweep.json,/tmp/h200res/dl/cuda_verify_cold_sweep.json \
  bash scripts/h200.sh choose > /dev/null 2>&1 || echo "choose rc $?"
cat "$OUT/choose.log"
cp /tmp/h200res/chosen_table.json /tmp/h200res/tile_choice.json "$OUT/" 2>/dev/null
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
