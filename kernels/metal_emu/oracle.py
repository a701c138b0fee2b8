"""Holding a Metal-emulated result against the variant's portable form (the oracle).

Both compute the same arithmetic contract; they may differ only in the order of float32
additions inside one lane's share of K (the portable form hands that to BLAS). So the bound is
stated in ulps of the output dtype at the dot product's own scale ``sum_k |x_k w_k|`` -- the
scale float32 reordering errs at -- per variant (``ORACLE_ULPS`` in its module, default 1;
docs/KERNELS.md lists them). NaN where the oracle is finite, or the reverse, always fails.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from kernels import arith, ulps
from kernels.qweights import QWeights

DEFAULT_BOUND = 1.0


class KernelMismatch(AssertionError):
    """The Metal source computed something its contract does not allow: one line, with where."""


def worst(got: mx.array, ref: mx.array, x: mx.array, qw: QWeights,
          dtype: str) -> tuple[float, tuple[int, int], float, float]:
    """(max error in ulps at the dot product's scale, its index, got, expected) over elements
    finite in both; an element finite in one only counts as infinitely wrong."""
    g = np.array(got.astype(mx.float32), dtype=np.float64)
    r = np.array(ref.astype(mx.float32), dtype=np.float64)
    w32 = arith.dequantize_f32(qw.wq, qw.scales, qw.biases, qw.group_size, qw.bits)
    scale = np.array(mx.abs(x.astype(mx.float32)) @ mx.abs(w32).T, dtype=np.float64)
    err = ulps.scaled_ulps(g, r, np.maximum(scale, np.abs(r)), dtype)
    both_nan = np.isnan(g) & np.isnan(r)
    err = np.where(both_nan, 0.0, err)
    err = np.where(np.isnan(g) != np.isnan(r), np.inf, err)
    err = np.where(np.isinf(g) | np.isinf(r), np.where(g == r, 0.0, np.inf), err)
    idx = np.unravel_index(int(np.argmax(err)), err.shape)
    return float(err[idx]), (int(idx[0]), int(idx[1])), float(g[idx]), float(r[idx])


def check(variant: str, got: mx.array, ref: mx.array, x: mx.array, qw: QWeights, dtype: str,
          bound: float) -> float:
    """The worst error in ulps; raises KernelMismatch beyond ``bound``."""
    e, (i, j), g, r = worst(got, ref, x, qw, dtype)
    if e > bound:
        m, k = x.shape
        raise KernelMismatch(
            f"{variant} {dtype} ({m}, {k}) x ({k}, {qw.n}): metal-emulated differs from its "
            f"portable form at y[{i}, {j}]: {g!r} vs {r!r} ({e:.3g} ulps at the dot product's "
            f"scale, bound {bound:g})")
    return e
