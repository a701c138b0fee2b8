"""Each tuned portable implementation against stock's portable form and a float64 reference.

Every table shape at full K over a slice of output columns (columns are independent, so each
column's K reduction is the production one); fresh random inputs every run, the seed printed.
"""

import os

import mlx.core as mx
import numpy as np
import pytest

from kernels import arith
from kernels.qweights import QWeights
from kernels.selection import load_table
from kernels.ulps import scaled_ulps, ulps
from kernels.variants import VARIANTS

TABLE = load_table()
# The table's tuned variants (an entry the measurements sent to stock is no tuned variant: stock
# is this test's reference, and its CPU float32 QMM is not held to a tuned contract).
COMBOS = sorted({(v, k[2], k[1]) for k, (v, _) in TABLE.index.items() if v != "stock"})
SHAPES = sorted(set(TABLE.shapes.values()))
COLS = 24
# Contracts with float32 operands and accumulation, rounded once to a half dtype: the result is
# the correctly rounded one except where float32 error meets a rounding boundary.
OWN_ULPS = 1.0
# Elements whose sum |x w| is at most this many times |y|: their float32 error (~sqrt(K) 2^-24
# sum |x w|) stays far below half an ulp of the output, so own-magnitude ulps are meaningful.
WELL_CONDITIONED = 16.0
# Every half-output contract, at the dot product's scale sum |x w| (see kernels/ulps.py).
SCALED_ULPS_HALF = 1.0
# float32 outputs (w4a32): split-K float32 sums of up to 25600 terms.
SCALED_ULPS_F32 = 8.0


def _seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.mark.parametrize("k,n", SHAPES, ids=[f"{k}x{n}" for k, n in SHAPES])
def test_tuned_variants_against_stock_and_float64(k, n):
    seed = _seed()
    rng = np.random.default_rng(seed)
    cols = min(n, COLS)
    w = mx.array((rng.standard_normal((cols, k)) / np.sqrt(k)).astype(np.float32))
    for variant, m, dt in COMBOS:
        dtype = getattr(mx, dt)
        qw = QWeights.quantize(w, 64, 4, mx.bfloat16 if dtype == mx.float32 else dtype)
        rows = mx.array(rng.integers(0, cols, m))
        noise = mx.array((0.3 * rng.standard_normal((m, k)) / np.sqrt(k)).astype(np.float32))
        x = (w[rows] + noise).astype(dtype)
        assert float(mx.abs(x.astype(mx.float32)).max()) > 0
        v = VARIANTS[variant]
        y = np.array(v.portable(x, qw, dict(v.DEFAULTS)).astype(mx.float32), dtype=np.float64)
        s = np.array(VARIANTS["stock"].portable(x, qw, {}).astype(mx.float32), dtype=np.float64)
        wd = np.array(arith.dequantize_f32(qw.wq, qw.scales, qw.biases, 64, 4), np.float64)
        xd = np.array(x.astype(mx.float32), np.float64)
        ref = xd @ wd.T
        scale = np.abs(xd) @ np.abs(wd).T
        out = "float32" if variant == "w4a32" else dt
        where = f"{variant} M={m} {dt} K={k} N={n} seed={seed}"
        assert np.all(np.isfinite(y)), where
        bound = SCALED_ULPS_F32 if out == "float32" else SCALED_ULPS_HALF
        assert scaled_ulps(y, ref, scale, out).max() <= bound, where
        assert scaled_ulps(y, s, scale, out).max() <= 2 * bound, where
        if variant not in ("fp16_matrix", "mma_verify", "mma_weights_a", "w4a32"):  # rounding
            # At each element's own magnitude only where the sum does not cancel: float32
            # error scales with sum |x w|, so a near-zero output (seen: |y| ~ 0.01 with
            # sum |x w| ~ 0.8) may differ by 2 ulps of its own, within the scaled bound above.
            ok = scale <= WELL_CONDITIONED * np.abs(ref)
            assert ok.any(), where
            assert ulps(y, ref, out)[ok].max() <= OWN_ULPS, where
            assert ulps(y, s, out)[ok].max() <= OWN_ULPS, where


def test_ulp_is_the_dtype_spacing():
    from kernels.ulps import ulp

    assert ulp(np.array([1.5]), "bfloat16")[0] == 2 ** -7
    assert ulp(np.array([1.5]), "float16")[0] == 2 ** -10
    assert ulp(np.array([0.75]), "bfloat16")[0] == 2 ** -8
