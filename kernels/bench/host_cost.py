"""Host time per kernel launch: what building one launch's graph costs in Python, apart from
the device's time (the graph is evaluated afterwards, untimed). One measure for the bench, the
host-cost script and the launch-cache test, so their figures mean the same thing."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import mlx.core as mx


def host_us(make: Callable[[int], mx.array], n: int = 500, reps: int = 5) -> dict:
    """Median, min and max over ``reps`` of µs per ``make(i)`` call, ``n`` calls a rep."""
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        outs = [make(i) for i in range(n)]
        ts.append((time.perf_counter() - t0) / n * 1e6)
        mx.eval(outs)
        del outs
    return {"us": statistics.median(ts), "min_us": min(ts), "max_us": max(ts)}
