"""Did a run leave the device's state as it found it? Copies of a launch's inputs and of
stock's output, taken before, held against the same after.

Why: on 2026-12-07 (bench/results/h100/xshare_0830) a sweep's clustered launches, under MLX's
CUDA graphs, overwrote their own inputs and left stock QMM running at the launch floor with
wrong output. The sweep went on to time and report figures that could not be true (stock at
3.6 us). A run that checks its state at the end says so itself instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from kernels.variants import stock as stock_variant


def host(a: mx.array) -> np.ndarray:
    """A host copy (bfloat16, which numpy lacks, as float32: exact)."""
    return np.array(a.astype(mx.float32) if a.dtype == mx.bfloat16 else a)


def changed(now: np.ndarray, before: np.ndarray) -> dict | None:
    """None where nothing changed (NaN where NaN was), else how much and where: a write past
    an output's end leaves values of that output's kind at the places it reached."""
    same = (now == before) | (np.isnan(now) & np.isnan(before))
    if same.all():
        return None
    where = np.flatnonzero(~same)
    return {"count": int(where.size), "of": int(now.size), "first": int(where[0]),
            "last": int(where[-1]), "shape": list(now.shape),
            "sample": [[int(i), float(before.flat[i]), float(now.flat[i])] for i in where[:6]]}


def stock(x: mx.array, qw) -> mx.array:
    """Stock QMM as the runtime runs it (kernels.variants.stock)."""
    return stock_variant.native(x, qw, {})


@dataclass
class Snapshot:
    """The arrays by name as they were, and stock's output on them: copies kept on the device,
    so that a check is one exact comparison there (the bench checks every row, vocab's 636 MB
    of weights included); only what differs comes to the host, to say where."""

    arrays: dict[str, mx.array]
    stock_out: mx.array


def _named(x: mx.array, qw) -> dict[str, mx.array]:
    return {"x": x, "wq": qw.wq, "scales": qw.scales, "biases": qw.biases}


def _copy(a: mx.array) -> mx.array:
    """A copy in a buffer of its own (an op's output; ``mx.array(a)`` would share a's)."""
    return a + mx.zeros((), dtype=a.dtype)


def snapshot(x: mx.array, qw) -> Snapshot:
    y = stock(x, qw)
    arrays = {k: _copy(a) for k, a in _named(x, qw).items()}
    mx.eval(y, *arrays.values())
    return Snapshot(arrays, y)


def _differs(now: mx.array, before: mx.array) -> dict | None:
    if mx.array_equal(now, before, equal_nan=True).item():
        return None
    return changed(host(now), host(before))


def problems(snap: Snapshot, x: mx.array, qw) -> dict:
    """What differs now: each input that changed, and stock's output if it is no longer the
    same bit for bit (``stock``). Empty where the state is as it was."""
    y = stock(x, qw)
    mx.eval(y)
    found = {k: d for k, a in _named(x, qw).items()
             if (d := _differs(a, snap.arrays[k])) is not None}
    if (d := _differs(y, snap.stock_out)) is not None:
        found["stock"] = d
    return found
