#!/usr/bin/env bash
# wgmma with x three K steps ahead in registers (x_ahead) and with each step's wgmma left in
# flight (wgmma 2) (p1, p2 staged by the two calls before it; any sm_90 card): ready; the
# wgmma-next set checked bit for bit against its register twins at M=16 and at M=8 (the cold
# sweep's --check-only); then each shape timed alone, cold, by ncu at M = 8 and 16, each tile
# beside its twin and the table's tiles, bf16; then wgmma-ablate (ablate 3 and 4 beside the
# whole tile) under ncu. Outputs packed in one tarball ($OUT/call3.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for m in 16 8; do
  mkdir -p "$OUT/check$m"
  timeout 150 python3 bench/cuda_verify_cold_sweep.py --out "$OUT/check$m" --check-only \
    --points wgmma-next --shapes gate_up,down --ms $m --point-m $m --dtypes bfloat16 \
    > "$OUT/check$m.log" 2>&1 || echo "check $m rc $?"
  grep -i "bit-exact\|differ\|error" "$OUT/check$m.log" | tail -3
done
export NCU_TIMEOUT=120
. bench/results/h200/ncu_set.sh
ncu_set wgmma-next gate_up
ncu_set wgmma-next down
# what staging x costs them (ablate 3: no x loaded or staged, no barrier a step; 4: the weights
# made up too): a time, not a result
OUT=$OUT/ablate ncu_set wgmma-ablate gate_up
cd "$OUT" && tar czf call3.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
