"""narrow_output: tuned M=8 kernel for narrow N (e.g. the 48-wide router), n_tile 1 or 2.

Contract: float32 operands and accumulation; with too few output columns to fill the GPU, K is
split into ``k_groups`` contiguous groups (one SIMD group each, default 4); inside a group K is
laid ``interleaved`` over the lanes as in stock and combined by ``simd_sum``; the group sums are
added in group order through threadgroup memory. One rounding to the activation dtype.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.tiling import Tiling
from kernels.variants._cuda_common import CUDA_HEADER as _CUDA_HEADER
from kernels.variants._metal_common import DEQUANT_HEADER
from kernels.variants._metal_common import SPLIT_K_BODY as METAL_SPLIT_K_BODY
from kernels.variants._portable import split_k
from kernels.variants._split_k_cuda import SPLIT_K_BODY, SPLIT_K_TILING

NAME = "narrow_output"
ROWS = 8
DEFAULTS = {"n_tile": 2, "k_groups": 4}

# Template parameters: T, M_ROWS, N_TILE, K_GROUPS, K, N, GS.
# Grid: (N / N_TILE) threadgroups of K_GROUPS SIMD groups (32 * K_GROUPS threads).
METAL_SOURCE = METAL_SPLIT_K_BODY  # with LAYOUT_CONTIGUOUS = false
METAL_LAYOUT = "interleaved"
HEADER = DEQUANT_HEADER
# The split-K body's rules: each lane walks word `lane` of every 256-value block of its K group
# (K % (256 * k_groups)); whole N_TILE tiles; partial[K_GROUPS][M_ROWS][N_TILE] floats of
# threadgroup memory.
METAL_TILING = Tiling(shared_floats=("k_groups", "M", "n_tile"))

# CUDA (sm_90): the same contract with K interleaved over the lanes (LAYOUT_CONTIGUOUS = false).
CUDA_SOURCE = SPLIT_K_BODY
CUDA_HEADER = _CUDA_HEADER
CUDA_LAYOUT = "interleaved"
CUDA_TILING = SPLIT_K_TILING


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="interleaved", k_groups=int(params["k_groups"]))
