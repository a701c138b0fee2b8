#!/usr/bin/env bash
# The third device call of 2026-12-07 ~16:00 UTC (p1, p2 staged by the two before it): the
# install, then ncu alone, cold, each tile twice: x-ahead (gate/up), down's bulk-lag and
# x-ahead tiles, and bulk-f16 in fp16 (gate/up, down). Outputs packed in one tarball.
set -u
bash scripts/h200.sh stage > /dev/null && bash scripts/h200.sh install > "$OUT/install.log" 2>&1 \
  || { tail -5 "$OUT/install.log"; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
mkdir -p /tmp/h200res && touch /tmp/h200res/bulk_ok
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv | tee "$OUT/nvidia-smi.txt"
T() { python3 bench/diagnostic_tiles.py "set:$1"; }
merge() { python3 -c 'import json,sys; a=json.loads(sys.argv[1]); b=json.loads(sys.argv[2]); print(json.dumps(a+[t for t in b if t not in a]))' "$1" "$2"; }
ncu() {  # tag dtypes shape tiles
  local start=$SECONDS
  NCU_LIGHT=1 NCU_TAG=$1 NCU_DTYPES=$2 NCU_TIMEOUT=${NCU_TIMEOUT:-130} \
    bash scripts/h200.sh ncucold --shapes "$3" --ms 8 --reps 2 --tiles "$4" > "$OUT/ncu$1.log" 2>&1
  cp "$OUT/ncu_cold.md" "$OUT/ncu_cold$1.md" 2>/dev/null
  cp "$OUT/ncu_cold.err" "$OUT/ncu_cold$1.err" 2>/dev/null
  echo "ncu$1: $((SECONDS - start)) s"; cut -d'|' -f2,6,9,11 "$OUT/ncu_cold$1.md" | tail -n +3
}
ncu _xa bfloat16 gate_up "$(T x-ahead:gate_up)"
ncu _dl bfloat16 down "$(merge "$(T bulk-lag:down)" "$(T x-ahead:down)")"
ncu _f16g float16 gate_up "$(T bulk-f16:gate_up)"
ncu _f16d float16 down "$(T bulk-f16:down)"
cp /tmp/h200res/ncu_cold_*.csv "$OUT/" 2>/dev/null
cd "$OUT" && tar czf call3.tgz --remove-files ./*.md ./*.csv ./*.log ./*.err ./*.txt 2>/dev/null; ls -la "$OUT"
