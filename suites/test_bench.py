"""bench: the M=8 / M=4 / M=16 / stock microbenchmark at small iteration counts per table shape.

Rows/s and latencies are recorded as measurements for the history (which judges drops against
a baseline's spread); nothing here asserts a speed. CPU hosts time a column slice (recorded).
"""

import math
import os

import pytest

from kernels.bench.verify_m8 import run
from suites import support

SHAPES = ["gate_up", "down", "out", "attn_q", "attn_kv", "router"]
DTYPES = ["bfloat16", "float16"]
ITERATIONS = int(os.environ.get("FARM_BENCH_ITERATIONS", "5"))


@pytest.mark.parametrize("op", SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_verify_microbench(op, dtype, measure):
    k, n = support.shape(op)
    dev = support.device()
    cols = support.measured_columns(n, dev)
    res = run(k, n, dtype, warmup=2, iterations=ITERATIONS,
              n_slice=cols if cols < n else None)
    measure.record("n_measured", float(res["n_measured"]), "columns")
    for path, p in res["paths"].items():
        measure.record(f"{path}_rows_per_s", p["rows_per_s"], "rows/s")
        measure.record(f"{path}_median_us", p["median_us"], "us")
        assert math.isfinite(p["rows_per_s"]) and p["rows_per_s"] > 0
    measure.record("rows_per_s", res["paths"]["m8"]["rows_per_s"], "rows/s")
    measure.record("m8_over_m4", res["m8_over_m4"], "ratio")
    measure.record("m8_over_stock", res["m8_over_stock"], "ratio")
    measure.record("m16_over_m8", res["m16_over_m8"], "ratio")
