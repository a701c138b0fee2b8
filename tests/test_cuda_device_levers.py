"""On an NVIDIA GPU only (``scripts/h200.sh devtests``): each lever of ``mma_weights_a`` gives
the plain register pipeline's output bit for bit, so a tile may change the time and never the
numbers. CI compiles these tiles (tests/test_cuda_ncu.py) and reads their machine code
(tests/test_cuda_cpu_side.py); only a device runs them.

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
