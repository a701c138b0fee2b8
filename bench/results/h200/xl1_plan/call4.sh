#!/usr/bin/env bash
# After wgmma_next_plan/call3.sh, on the same warm machine (installed there): is what M=16
# pays for x the wait on L2? The table's mma_weights_a tiles of gate/up and down (bf16; those
# whose x loads ablate takes out: gate/up's M=8 bulk tile and M=16 register tile, down's M=16
# tile) each alone under ncu, cold, at M = 8 and 16: whole (ablate 0), without x's loads (3:
# the words made up) and with every x load from its K group's first step (5: the same loads,
# L1 hits after that step). Near 3 at M=16 puts the cost in L2's latency; near 0, in the loads
# themselves. ablate_legs.py tabulates them. Outputs packed in one tarball ($OUT/call4.tgz).
set -u
bash scripts/h200.sh ready || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
for shape in gate_up down; do
  mkdir -p "$OUT/xl1_$shape"
  NCU_LIGHT=1 NCU_TAG=_xl1_$shape NCU_DTYPES=bfloat16 NCU_TIMEOUT=150 OUT=$OUT/xl1_$shape \
    bash scripts/h200.sh ncucold --shapes $shape --ms 8,16 --reps 2 \
    --tiles "$(python3 bench/diagnostic_tiles.py xl1_$shape)" > /dev/null 2>&1 \
    || echo "ncu $shape rc $?"
done
python3 bench/ablate_legs.py "$OUT"/xl1_*/ncu_cold.csv --out "$OUT/xl1_legs" 2>&1 | tail -20
cd "$OUT" && tar czf call4.tgz --remove-files ./* 2>/dev/null; ls -la "$OUT"
