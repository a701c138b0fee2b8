"""bench/cuda_verify.py's selection-table rows (``--table-rows``): every sm_90 entry of the table,
its custom candidate against stock as the runtime runs them, cold. What
``scripts/regen_sm90_table.py`` keeps or drops each entry by."""

from __future__ import annotations

import json
import math
from types import MappingProxyType

import device_state
import mlx.core as mx
from cuda_timing import BITS, COLD_TARGET_BYTES, GS, device_us, make_copies, qbytes, wall_us

from kernels import cuda
from kernels.variants import stock as stock_variant


def measure_candidate(c: dict, ceiling: float, batch: int, reps: int) -> dict:
    """Cold only: stock as the runtime runs it (``stock.native``) against the candidate through
    ``cuda.launch``, device time and wall per launch, each with its per-batch figures. Float32
    activations (the W4A32 draft path) read weights whose scales are in bfloat16, the model's
    dtype, as at run time."""
    row = dict(c)
    if c["group_size"] != GS or c["bits"] != BITS:
        row["error"] = f"bench quantizes gs {GS}, {BITS}-bit only"
        return row
    dt = getattr(mx, c["dtype"])
    wdt = dt if dt in (mx.bfloat16, mx.float16) else mx.bfloat16
    k, n, m = c["K"], c["N"], c["M"]
    one = make_copies(k, n, wdt, 1)[0]
    count = max(3, math.ceil(COLD_TARGET_BYTES / qbytes(one)))
    copies = [one] + make_copies(k, n, wdt, count - 1, seed=1000)
    x = (mx.random.normal((m, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
    mx.eval(x)
    snap = device_state.snapshot(x, one)  # held against the same once timed
    moved = qbytes(one) + x.nbytes + m * n * x.itemsize
    row.update({"bytes": moved, "floor_us": moved / ceiling * 1e6, "cold_copies": count})
    paths = {"stock_eager": lambda x, q: stock_variant.native(x, q, {}),
             "custom_eager": lambda x, q, c=c, p=MappingProxyType(dict(c["params"])):
             cuda.launch(c["variant"], x, q, p)}
    try:
        ys, yc = paths["stock_eager"](x, one), paths["custom_eager"](x, one)
        ys, yc = ys.astype(mx.float32), yc.astype(mx.float32)
        row["custom_vs_stock_rel_max"] = (mx.abs(ys - yc).max() / mx.abs(ys).max()).item()
    except (ValueError, RuntimeError) as e:
        row["error"] = str(e)[:300]
        return row
    for path, fn in paths.items():
        def make(i, fn=fn, ws=copies):
            return fn(x, ws[i % len(ws)])
        t, w = device_us(make, batch, reps), wall_us(make, batch, reps)
        row[f"cold_{path}_us"] = t["us"]
        row[f"cold_{path}_batches_us"] = t["batches_us"]
        row[f"cold_{path}_wall_us"] = w["us"]
        row[f"cold_{path}_wall_batches_us"] = w["batches_us"]
    row["cold_wall_speedup_vs_stock"] = row["cold_stock_eager_wall_us"] / row[
        "cold_custom_eager_wall_us"]
    if broken := device_state.problems(snap, x, one):  # regen takes no figure from it
        row["state_broken"] = broken
    print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v) for k, v in row.items()
                      if "batches" not in k}), flush=True)
    del copies, one
    mx.clear_cache()
    return row
