"""A few cold launches per path for ncu to time (kernel duration, DRAM throughput, occupancy).

    ncu --clock-control none --cache-control all -k regex:'qmm|qmv|dflash2' --csv \\
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python bench/cuda_verify_ncu.py

ncu flushes the caches before every kernel with --cache-control all, so each launch is cold.
Launches are evaluated one at a time, in the order printed, so the CSV's rows map onto them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import json

import cuda_verify as cv
import mlx.core as mx

REPS = 3


def main() -> int:
    sweep = json.loads((cv.ROOT / "bench" / "results" / "h200" / "cuda_verify.json").read_text())
    for op, (k, n) in cv.SHAPES.items():
        for dt_name, dt in cv.DTYPES.items():
            (qw,) = cv.make_copies(k, n, dt, 1)
            name, params = cv.sweep_choice(sweep, op, dt_name)
            x = (mx.random.normal((8, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
            mx.eval(x)
            for path, fn in (("stock", cv.stock), ("custom", cv.custom_fn(name, params))):
                for _ in range(REPS):
                    mx.eval(fn(x, qw.wq, qw.scales, qw.biases))
                print(f"NCU_ORDER {op} {dt_name} M=8 {path} x{REPS}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
