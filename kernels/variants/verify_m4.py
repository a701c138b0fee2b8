"""verify_m4: the tuned M=4 verify kernel (half blocks; the M=4 path of DFlash2's verifier).

Contract: as scalar_kmajor (float32 operands and accumulation, K ``contiguous`` over the 32
lanes, ``simd_sum``), with a 4 x n_tile output tile: each dequantized weight serves 4 rows.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.variants import scalar_kmajor
from kernels.variants._portable import split_k

NAME = "verify_m4"
ROWS = 4
DEFAULTS = {"k_groups": 1, "n_tile": 16}
# The scalar K-major source, instantiated with M_ROWS = 4 (the template parameter).
METAL_SOURCE = scalar_kmajor.METAL_SOURCE
HEADER = scalar_kmajor.HEADER
METAL_TILING = scalar_kmajor.METAL_TILING
CUDA_SOURCE = scalar_kmajor.CUDA_SOURCE
CUDA_HEADER = scalar_kmajor.CUDA_HEADER
CUDA_LAYOUT = "contiguous"
CUDA_TILING = scalar_kmajor.CUDA_TILING


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="contiguous", k_groups=1)
