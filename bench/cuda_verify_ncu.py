"""A few cold launches per path for ncu to time (kernel duration, DRAM throughput, occupancy).

    ncu --clock-control none --cache-control all -k regex:'qmm|qmv|dflash2' --csv \\
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python bench/cuda_verify_ncu.py [--cold-sweep DIR/cuda_verify_cold_sweep.json]

ncu flushes the caches before every kernel with --cache-control all, so each launch is cold.
Launches are evaluated one at a time, in the order printed, so the CSV's rows map onto them.
With --cold-sweep, the custom kernel runs at the tile the cold sweep
(bench/cuda_verify_cold_sweep.py) chose at M=8, beside the tile the committed results chose.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import json

import cuda_verify as cv
import mlx.core as mx

REPS = 3


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold-sweep", default=None)
    ap.add_argument("--dtypes", default=",".join(cv.DTYPES))
    ap.add_argument("--reps", type=int, default=REPS)
    args = ap.parse_args(argv)
    sweep = json.loads((cv.ROOT / "bench" / "results" / "h200" / "cuda_verify.json").read_text())
    cold = json.loads(Path(args.cold_sweep).read_text()) if args.cold_sweep else None
    for op, (k, n) in cv.SHAPES.items():
        for dt_name in args.dtypes.split(","):
            dt = cv.DTYPES[dt_name]
            (qw,) = cv.make_copies(k, n, dt, 1)
            name, params = cv.sweep_choice(sweep, op, dt_name)
            paths = [("stock", cv.stock), (f"custom {params}", cv.custom_fn(name, params))]
            best = ((cold or {}).get("shapes", {}).get(f"{op}/{dt_name}") or {}).get("best_m8")
            if best:
                p = {key: best[key] for key in ("n_tile", "k_groups", "unroll", "prefetch",
                                                "stages", "l2_prefetch")}
                paths.append((f"cold-best {p}", cv.custom_fn("mma_weights_a", p)))
            x = (mx.random.normal((8, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
            mx.eval(x)
            for path, fn in paths:
                for _ in range(args.reps):
                    mx.eval(fn(x, qw.wq, qw.scales, qw.biases))
                print(f"NCU_ORDER {op} {dt_name} M=8 {path} x{args.reps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
