"""scalar_kmajor: the tuned M=8 verify kernel (G13/G14, bf16 and fp16 activations).

Contract: operands read as float32 (weights ``scale * q + bias``), float32 accumulation; K laid
``contiguous`` over the 32 lanes (lane l walks ``[l*K/32, (l+1)*K/32)`` K-major, loading all 8
activation rows of each K step once), lanes combined by ``simd_sum``; each SIMD group owns an
8 x n_tile output tile, so every dequantized weight is reused for 8 rows. One rounding to the
activation dtype. It differs from stock only in which lane owns which K: the same float32
accuracy, a different rounding of the partial sums (a deviation of at most a few ulps).
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.tiling import Tiling
from kernels.variants._cuda_common import CUDA_HEADER as _CUDA_HEADER
from kernels.variants._metal_common import DEQUANT_HEADER
from kernels.variants._portable import split_k
from kernels.variants._split_k_cuda import SPLIT_K_BODY, SPLIT_K_TILING

NAME = "scalar_kmajor"
ROWS = 8
DEFAULTS = {"n_tile": 8, "k_groups": 1}

# Template parameters: T (activation type), M_ROWS, N_TILE, K, N, GS.
# Grid: (N / N_TILE) SIMD groups of 32 threads; threadgroup = one SIMD group.
METAL_SOURCE = r"""
  const uint lane = thread_index_in_simdgroup;
  const uint n0 = threadgroup_position_in_grid.x * N_TILE;
  const uint kl = K / 32;
  const uint k_begin = lane * kl;
  float acc[M_ROWS][N_TILE];
  for (uint m = 0; m < M_ROWS; ++m)
    for (uint t = 0; t < N_TILE; ++t) acc[m][t] = 0.0f;
  for (uint k = k_begin; k < k_begin + kl; k += 8) {
    float xv[M_ROWS][8];
    for (uint m = 0; m < M_ROWS; ++m)
      for (uint j = 0; j < 8; ++j) xv[m][j] = float(x[m * K + k + j]);
    for (uint t = 0; t < N_TILE; ++t) {
      float wv[8];
      dequant_word<GS>(w, scales, biases, n0 + t, k, K, wv);
      for (uint j = 0; j < 8; ++j)
        for (uint m = 0; m < M_ROWS; ++m) acc[m][t] = fma(xv[m][j], wv[j], acc[m][t]);
    }
  }
  for (uint m = 0; m < M_ROWS; ++m)
    for (uint t = 0; t < N_TILE; ++t) {
      const float v = simd_sum(acc[m][t]);
      if (lane == 0) y[m * N + n0 + t] = static_cast<T>(v);
    }
"""
HEADER = DEQUANT_HEADER
# Lane l walks K/32 values 8 at a time: K % 256. The source has no K groups (K_GROUPS would
# only widen the threadgroup, and every extra SIMD group would recompute the same outputs).
METAL_TILING = Tiling(param_choices=(("k_groups", (1,)),))

# CUDA (sm_90): the same contract, K contiguous over the lanes of each warp; the table may add
# k_groups > 1 (contiguous K groups, one warp each, summed in order) where N is too narrow to
# fill the GPU. Built by kernels/cuda.py with LAYOUT_CONTIGUOUS = true.
CUDA_SOURCE = SPLIT_K_BODY
CUDA_HEADER = _CUDA_HEADER
CUDA_LAYOUT = "contiguous"
CUDA_TILING = SPLIT_K_TILING


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="contiguous", k_groups=1)
