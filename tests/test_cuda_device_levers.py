"""On an NVIDIA GPU only (``scripts/h200.sh devtests``): each lever of ``mma_weights_a`` (and of
``mma_group_sums``, which is also held to the half-output bound) gives
the plain register pipeline's output bit for bit, so a tile may change the time and never the
numbers. CI compiles these tiles (tests/test_cuda_sweep_points.py), reads their machine code
(tests/test_cuda_cpu_side.py) and runs their bodies on the CUDA emulator, whose mma rounds as
no tensor core does (tests/test_cuda_emulated.py); here they meet the device's own.

- ``hi_in_place`` (fp16): the same q reaches the same FMA by another shift;
- ``prefetch``: the two batches take turns, the mma sequence unchanged, with an odd count of
  K steps a group (down's 17 at 8 K groups) ending on the first batch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from kernels import cuda
from kernels.qweights import QWeights

HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()
pytestmark = pytest.mark.skipif(not HAS_CUDA, reason="needs MLX's CUDA backend (an NVIDIA GPU)")
NAME, GS = "mma_weights_a", 64


def _case(k: int, n: int, dtype):
    w = mx.random.normal((n, k), key=mx.random.key(3)) / k ** 0.5
    return QWeights.quantize(w, GS, 4, dtype)


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
@pytest.mark.parametrize("k,n,tile", [(5120, 2048, (32, 4)), (17408, 512, (16, 8))])
def test_every_lever_equals_the_plain_register_pipeline_bit_for_bit(dtype, k, n, tile):
    import sweep_points as sp

    qw = _case(k, n, dtype)
    levers = [{"prefetch": 1, "unroll": 1}, {"prefetch": 1, "unroll": 2}]
    if dtype == mx.float16:
        levers += [{"hi_in_place": 1}, {"prefetch": 1, "unroll": 1, "hi_in_place": 1}]
    base = {"n_tile": tile[0], "k_groups": tile[1]}
    for m in (1, 8, 16):
        x = (mx.random.normal((m, k), key=mx.random.key(m)) / k ** 0.25).astype(dtype)
        y0 = cuda.launch(NAME, x, qw, sp.register_twin(base))
        for lever in levers:
            y = cuda.launch(NAME, x, qw, {**sp.register_twin(base), **lever})
            assert mx.array_equal(y, y0).item(), (m, lever)


GROUP_SUMS = "mma_group_sums"


@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
@pytest.mark.parametrize("k,n,tile", [(5120, 2048, (32, 4)), (17408, 512, (16, 8))])
def test_group_sums_levers_equal_its_plain_pipeline_and_it_holds_the_bounds(dtype, k, n, tile):
    """``mma_group_sums``: each lever equals its own plain register pipeline bit for bit (a
    wrong lane layout would be wrong on both sides: so the plain pipeline is also held to the
    half-output bound against float64, and to twice it against its portable form, the bench's
    ``check`` on 256 columns, at M=1, 8 and 16). The levers at M=8 and 16 (one and two
    activation tiles): prefetch ending on either batch, unroll, x_early and late scales; few, since each
    tile is one more NVRTC compile of the device's time."""
    import sweep_points as sp
    from cuda_verify_sweep import check

    qw = _case(k, n, dtype)
    twin = sp.register_twin({sp.VARIANT: GROUP_SUMS, "n_tile": tile[0], "k_groups": tile[1]})
    levers = [{"prefetch": 1, "unroll": 1}, {"prefetch": 1, "unroll": 2},
              {"unroll": 2, "x_early": 1}, {"prefetch": 1, "unroll": 1, "late_scales": 1}]
    for m in (1, 8, 16):
        x = (mx.random.normal((m, k), key=mx.random.key(m)) / k ** 0.25).astype(dtype)
        y0 = sp.launch(x, qw, twin)
        for lever in levers if m > 1 else []:
            assert mx.array_equal(sp.launch(x, qw, {**twin, **lever}), y0).item(), (m, lever)
        name, plain = sp.launch_of(twin)
        r = check(name, x, qw, plain)
        assert r["finite"] and r["ulps_vs_f64"] <= 1.0 and r["ulps_vs_portable"] <= 2.0, (m, r)


@pytest.mark.parametrize("gs", [32, 128])
def test_group_sums_at_every_group_size_it_takes_holds_the_bound(gs):
    """Group sizes 32 and 128 lay a lane's words otherwise (four 4-byte loads, one 16-byte
    load) and apply a scale four times or once a K step: each within the half-output bound
    against float64, bf16 and fp16, M=8."""
    import numpy as np

    from kernels import arith
    from kernels.ulps import scaled_ulps

    k, n = 5120, 512
    w = mx.random.normal((n, k), key=mx.random.key(5)) / k ** 0.5
    for dtype in (mx.bfloat16, mx.float16):
        qw = QWeights.quantize(w, gs, 4, dtype)
        x = (mx.random.normal((8, k), key=mx.random.key(8)) / k ** 0.25).astype(dtype)
        y = cuda.launch(GROUP_SUMS, x, qw, {"n_tile": 32, "k_groups": 4})
        wd = np.array(arith.dequantize_f32(qw.wq, qw.scales, qw.biases, gs, 4), np.float64)
        xd = np.array(x.astype(mx.float32), np.float64)
        yd = np.array(y.astype(mx.float32), np.float64)
        name = "bfloat16" if dtype == mx.bfloat16 else "float16"
        err = scaled_ulps(yd, xd @ wd.T, np.abs(xd) @ np.abs(wd).T, name).max()
        assert np.isfinite(yd).all() and err <= 1.0, (gs, name, err)
