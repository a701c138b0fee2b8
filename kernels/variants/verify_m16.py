"""verify_m16: the tuned M=16 verify kernel (two blocks verified in one pass).

Contract: float32 operands and accumulation; 16 rows need twice the registers, so K is split
into ``k_groups`` = 2 contiguous halves, one SIMD group each, K ``contiguous`` over the lanes
inside a half, ``simd_sum``, and the two half sums added (first + second) through threadgroup
memory. One rounding to the activation dtype.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.tiling import Tiling
from kernels.variants import scalar_kmajor
from kernels.variants._metal_common import DEQUANT_HEADER
from kernels.variants._metal_common import SPLIT_K_BODY as METAL_SPLIT_K_BODY
from kernels.variants._portable import split_k

NAME = "verify_m16"
ROWS = 16
DEFAULTS = {"n_tile": 4, "k_groups": 2}

# Template parameters: T, M_ROWS (16), N_TILE, K_GROUPS (2), K, N, GS.
METAL_SOURCE = METAL_SPLIT_K_BODY  # with LAYOUT_CONTIGUOUS = true
METAL_LAYOUT = "contiguous"
HEADER = DEQUANT_HEADER
# The split-K body's rules: each lane walks K / k_groups / 32 values 8 at a time
# (K % (256 * k_groups)); whole N_TILE tiles; partial[K_GROUPS][M_ROWS][N_TILE] floats of
# threadgroup memory.
METAL_TILING = Tiling(shared_floats=("k_groups", "M", "n_tile"))
# CUDA: the scalar K-major source with M_ROWS = 16 and K_GROUPS = 2 (this contract's split).
CUDA_SOURCE = scalar_kmajor.CUDA_SOURCE
CUDA_HEADER = scalar_kmajor.CUDA_HEADER
CUDA_LAYOUT = "contiguous"
CUDA_TILING = scalar_kmajor.CUDA_TILING


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="contiguous", k_groups=int(params["k_groups"]))
