"""Host time per kernel launch: what building one launch's graph costs in Python, apart from
the device's time (the graph is evaluated afterwards, untimed). One measure for the bench, the
host-cost script and the launch-cache test, so their figures mean the same thing.

Paths are compared PAIRED (``host_paired_us``): the host of the lent GPU machine drifts by 1.5x
between minutes (clocks, neighbours), so two paths timed a minute apart differ by more than the
gap being measured; timed in turns, rep by rep, each rep's difference sees the same drift.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import mlx.core as mx


def _rep(make: Callable[[int], mx.array], n: int) -> float:
    t0 = time.perf_counter()
    outs = [make(i) for i in range(n)]
    us = (time.perf_counter() - t0) / n * 1e6
    mx.eval(outs)
    return us


def host_us(make: Callable[[int], mx.array], n: int = 500, reps: int = 5) -> dict:
    """Median, min and max over ``reps`` of µs per ``make(i)`` call, ``n`` calls a rep."""
    ts = [_rep(make, n) for _ in range(reps)]
    return {"us": statistics.median(ts), "min_us": min(ts), "max_us": max(ts)}


def host_paired_us(makes: dict[str, Callable[[int], mx.array]], baseline: str, n: int = 500,
                   reps: int = 9, warmup: int = 2) -> dict[str, dict]:
    """Each path's µs per call as ``host_us`` gives it, the paths timed in turns (the order
    rotated every rep, after ``warmup`` untimed rounds), plus ``minus_baseline_us``: the median
    over reps of (path - ``baseline``) within the same rep."""
    names = list(makes)
    ts: dict[str, list[float]] = {k: [] for k in names}
    for r in range(warmup + reps):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            us = _rep(makes[k], n)
            if r >= warmup:
                ts[k].append(us)
    out = {}
    for k in names:
        out[k] = {"us": statistics.median(ts[k]), "min_us": min(ts[k]), "max_us": max(ts[k]),
                  "reps_us": ts[k],
                  "minus_baseline_us": statistics.median(
                      a - b for a, b in zip(ts[k], ts[baseline], strict=True))}
    return out
