#!/usr/bin/env bash
# The H200 plan after ../../h100/xahead_f16_1604 (p1, p2 staged by the two calls before it):
# install; ncu alone, cold, on fp16's bulk tiles (gate/up, down) and down bf16's bulk-lag set;
# the cold sweeps that check them bit for bit and time them eager, compiled and in a chain;
# then `choose` on the committed table. Outputs packed in one tarball ($OUT/call3.tgz); the
# chosen table stays in /tmp/h200res for the suites and the bench of the calls after it.
set -u
bash scripts/h200.sh stage > /dev/null && bash scripts/h200.sh install > "$OUT/install.log" 2>&1 \
  || { tail -5 "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/h200res && touch /tmp/h200res/bulk_ok
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
T() { python3 bench/diagnostic_tiles.py "set:$1"; }
ncu() {  # tag dtypes shape tiles
  local start=$SECONDS
  NCU_LIGHT=1 NCU_TAG=$1 NCU_DTYPES=$2 NCU_TIMEOUT=${NCU_TIMEOUT:-110} \
    bash scripts/h200.sh ncucold --shapes "$3" --ms 8 --reps 2 --tiles "$4" > /dev/null 2>&1
  mv "$OUT/ncu_cold.md" "$OUT/ncu_cold$1.md" 2>/dev/null
  rm -f "$OUT/ncu_cold.csv" "$OUT/ncu_cold.err"
  echo "ncu$1: $((SECONDS - start)) s"; cut -d'|' -f2,6,11 "$OUT/ncu_cold$1.md" | tail -n +3
}
ncu _f16g float16 gate_up "$(T bulk-f16:gate_up)"
ncu _f16d float16 down "$(T bulk-f16:down)"
ncu _dl bfloat16 down "$(T bulk-lag:down)"
sweep() {  # folder points shapes dtypes
  local start=$SECONDS
  BENCH_TIMEOUT=150 SWEEP_OUT=/tmp/h200res/$1 bash scripts/h200.sh coldsweep --points "$2" \
    --shapes "$3" --ms 8 --dtypes "$4" --chain --final-top 4 --time-each --no-ring \
    --budget-s 100 > /dev/null 2>&1
  echo "sweep $1: $((SECONDS - start)) s"; grep -A12 "Every final candidate" "$OUT/$1/cuda_verify_cold_sweep.md"
}
sweep f16 bulk-f16 gate_up,down float16
sweep dl bulk-lag down bfloat16
CHOOSE_TABLE=kernels/selection_table.json \
  NCU_CSVS=/tmp/h200res/ncu_cold_f16g.csv,/tmp/h200res/ncu_cold_f16d.csv,/tmp/h200res/ncu_cold_dl.csv \
  COLD_SWEEPS=/tmp/h200res/f16/cuda_verify_cold_sweep.json,/tmp/h200res/dl/cuda_verify_cold_sweep.json \
  bash scripts/h200.sh choose > /dev/null 2>&1
cat "$OUT/choose.log"
cp /tmp/h200res/ncu_cold_*.csv /tmp/h200res/chosen_table.json /tmp/h200res/tile_choice.json "$OUT/" 2>/dev/null
rm -f "$OUT/ncu_cold.csv" "$OUT/ncu_cold.md"
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
