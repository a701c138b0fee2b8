"""w4a32: the draft's M=8 kernel with float32 activations (W4A16 gives non-finite logits on G13).

Contract: float32 activations (the draft's bf16 hidden states widened once, before the kernel),
weights ``scale * q + bias`` in float32, float32 accumulation with K ``contiguous`` over the 32
lanes and ``simd_sum``, output float32. Same split as scalar_kmajor; only the activation dtype
differs, which is what keeps G13's draft logits finite.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.variants import scalar_kmajor
from kernels.variants._portable import split_k

NAME = "w4a32"
ROWS = 8
ACTIVATION_DTYPE = mx.float32  # the kernel widens activations once, before it runs
DEFAULTS = {"k_groups": 1, "n_tile": 8}
# The scalar K-major source instantiated with T = float.
METAL_SOURCE = scalar_kmajor.METAL_SOURCE
HEADER = scalar_kmajor.HEADER
METAL_TILING = scalar_kmajor.METAL_TILING
CUDA_SOURCE = scalar_kmajor.CUDA_SOURCE
CUDA_HEADER = scalar_kmajor.CUDA_HEADER
CUDA_LAYOUT = "contiguous"
CUDA_TILING = scalar_kmajor.CUDA_TILING


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x.astype(ACTIVATION_DTYPE), qw, layout="contiguous", k_groups=1)
