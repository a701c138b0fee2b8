"""verify_m16: the tuned M=16 verify kernel (two blocks verified in one pass).

Contract: float32 operands and accumulation; 16 rows need twice the registers, so K is split
into ``k_groups`` = 2 contiguous halves, one SIMD group each, K ``contiguous`` over the lanes
inside a half, ``simd_sum``, and the two half sums added (first + second) through threadgroup
memory. One rounding to the activation dtype.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.variants import scalar_kmajor
from kernels.variants._metal_common import DEQUANT_HEADER
from kernels.variants._portable import split_k

NAME = "verify_m16"
ROWS = 16
DEFAULTS = {"n_tile": 4, "k_groups": 2}

# Template parameters: T, M_ROWS (16), N_TILE, K_GROUPS (2), K, N, GS.
METAL_SOURCE = r"""
  threadgroup float partial[K_GROUPS][M_ROWS][N_TILE];
  const uint lane = thread_index_in_simdgroup;
  const uint g = simdgroup_index_in_threadgroup;
  const uint n0 = threadgroup_position_in_grid.x * N_TILE;
  const uint kg = K / K_GROUPS;
  const uint kl = kg / 32;
  const uint k_begin = g * kg + lane * kl;
  float acc[M_ROWS][N_TILE];
  for (uint m = 0; m < M_ROWS; ++m)
    for (uint t = 0; t < N_TILE; ++t) acc[m][t] = 0.0f;
  for (uint k = k_begin; k < k_begin + kl; k += 8) {
    for (uint t = 0; t < N_TILE; ++t) {
      float wv[8];
      dequant_word(w, scales, biases, n0 + t, k, K, wv);
      for (uint m = 0; m < M_ROWS; ++m)
        for (uint j = 0; j < 8; ++j) acc[m][t] = fma(float(x[m * K + k + j]), wv[j], acc[m][t]);
    }
  }
  for (uint m = 0; m < M_ROWS; ++m)
    for (uint t = 0; t < N_TILE; ++t) {
      const float v = simd_sum(acc[m][t]);
      if (lane == 0) partial[g][m][t] = v;
    }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = g * 32 + lane; i < M_ROWS * N_TILE; i += 32 * K_GROUPS) {
    const uint m = i / N_TILE, t = i % N_TILE;
    float s = 0.0f;
    for (uint h = 0; h < K_GROUPS; ++h) s += partial[h][m][t];
    y[m * N + n0 + t] = static_cast<T>(s);
  }
"""
HEADER = DEQUANT_HEADER
# CUDA: the scalar K-major source with M_ROWS = 16 and K_GROUPS = 2 (this contract's split).
CUDA_SOURCE = scalar_kmajor.CUDA_SOURCE
CUDA_HEADER = scalar_kmajor.CUDA_HEADER
CUDA_LAYOUT = "contiguous"


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="contiguous", k_groups=int(params["k_groups"]))
