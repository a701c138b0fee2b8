#!/usr/bin/env bash
# The shortest look at the wgmma ring tiles, for a session with ~80 s of device time left after
# a machine's start (p1, p2 staged by the two calls before it): ready; gate/up bf16 alone under
# ncu at M=8 and 16, one launch each, on the two ring tiles and the table's M=8 bulk tile (the
# baseline of the same run). Not a bit-for-bit check: call3_ring.sh is the full run.
set -u
bash scripts/h200.sh ready > /dev/null || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
tiles=$(python3 - <<'PY'
import json, sys
sys.path.insert(0, "bench")
import sweep_points as sp
pts = [sp.WGMMA_RING["gate_up"][i] for i in (0, 3)] + [sp.WGMMA["gate_up"][-2]]
print(json.dumps([sp.as_params(pt) for pt in pts]))
PY
)
NCU_LIGHT=1 NCU_TIMEOUT=70 bash scripts/h200.sh ncucold --shapes gate_up --ms 8,16 --reps 1 \
  --tiles "$tiles" > /dev/null 2>&1 || echo "ncu rc $?"
cut -d'|' -f2,6,7,10,11 "$OUT/ncu_cold.md" | tail -n +3 \
  | sed 's/.l2_prefetch.: 128, //; s/.x_early.: 0, .min_blocks.: 0, .bulk.: 0, //'
