"""narrow_output: tuned M=8 kernel for narrow N (e.g. the 48-wide router), n_tile 1 or 2.

Contract: float32 operands and accumulation; with too few output columns to fill the GPU, K is
split into ``k_groups`` contiguous groups (one SIMD group each, default 4); inside a group K is
laid ``interleaved`` over the lanes as in stock and combined by ``simd_sum``; the group sums are
added in group order through threadgroup memory. One rounding to the activation dtype.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.variants._cuda_common import CUDA_HEADER as _CUDA_HEADER
from kernels.variants._cuda_common import SPLIT_K_BODY
from kernels.variants._metal_common import DEQUANT_HEADER
from kernels.variants._portable import split_k

NAME = "narrow_output"
ROWS = 8
DEFAULTS = {"n_tile": 2, "k_groups": 4}

# Template parameters: T, M_ROWS, N_TILE, K_GROUPS, K, N, GS.
# Grid: (N / N_TILE) threadgroups of K_GROUPS SIMD groups (32 * K_GROUPS threads).
METAL_SOURCE = r"""
  threadgroup float partial[K_GROUPS][M_ROWS][N_TILE];
  const uint lane = thread_index_in_simdgroup;
  const uint g = simdgroup_index_in_threadgroup;
  const uint n0 = threadgroup_position_in_grid.x * N_TILE;
  const uint kg = K / K_GROUPS;
  float acc[M_ROWS][N_TILE];
  for (uint m = 0; m < M_ROWS; ++m)
    for (uint t = 0; t < N_TILE; ++t) acc[m][t] = 0.0f;
  for (uint k = g * kg + lane * 8; k < (g + 1) * kg; k += 256) {
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
  if (g == 0 && lane < M_ROWS * N_TILE) {
    const uint m = lane / N_TILE, t = lane % N_TILE;
    float s = 0.0f;
    for (uint i = 0; i < K_GROUPS; ++i) s += partial[i][m][t];
    y[m * N + n0 + t] = static_cast<T>(s);
  }
"""
HEADER = DEQUANT_HEADER

# CUDA (sm_90): the same contract with K interleaved over the lanes (LAYOUT_CONTIGUOUS = false).
CUDA_SOURCE = SPLIT_K_BODY
CUDA_HEADER = _CUDA_HEADER
CUDA_LAYOUT = "interleaved"


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="interleaved", k_groups=int(params["k_groups"]))
