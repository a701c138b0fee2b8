"""fp16_matrix: tuned M=8 kernel on 8x8 simdgroup matrices of fp16 operands (G14, fp16 only).

Contract: activations and dequantized weights (``scale * q + bias`` in float32) rounded to fp16
and multiplied as 8x8 ``simdgroup_matrix<half>`` tiles, products accumulated in float32 tiles
(``simdgroup_matrix<float>``) sequentially along K; one rounding to the activation dtype. The fp16
rounding of the weights is the only extra error against stock, at most 2^-11 relative per weight.

CUDA: the same contract is ``mma_verify``'s at one K group (fp16 operands on m16n8k16 tensor-core
tiles, float32 accumulation sequentially along K), so that source serves both.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.tiling import Tiling
from kernels.variants import mma_verify
from kernels.variants._metal_common import DEQUANT_HEADER
from kernels.variants._portable import split_k

NAME = "fp16_matrix"
ROWS = 8
DEFAULTS = {"n_tile": 8}
FIXED_PARAMS = {"n_tile": 8, "k_groups": 1}  # one 8x8 tile per SIMD group, K never split

# Template parameters: T, K, N, GS. One SIMD group computes one 8 x 8 output tile.
METAL_SOURCE = r"""
  threadgroup half wt[8][8];
  const uint lane = thread_index_in_simdgroup;
  const uint n0 = threadgroup_position_in_grid.x * 8;
  simdgroup_matrix<float, 8, 8> acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
  for (uint k = 0; k < K; k += 8) {
    if (lane < 8) {
      float wv[8];
      dequant_word<GS>(w, scales, biases, n0 + lane, k, K, wv);
      for (uint j = 0; j < 8; ++j) wt[j][lane] = half(wv[j]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_matrix<half, 8, 8> a;
    simdgroup_matrix<half, 8, 8> b;
    simdgroup_load(a, (const device half*)x + k, K);
    simdgroup_load(b, &wt[0][0], 8);
    simdgroup_multiply_accumulate(acc, a, b, acc);
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  threadgroup float out[8][8];
  simdgroup_store(acc, &out[0][0], 8);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (uint i = lane; i < 64; i += 32) y[(i / 8) * N + n0 + (i % 8)] = static_cast<T>(out[i / 8][i % 8]);
"""
HEADER = DEQUANT_HEADER
# x is loaded as `device half*` whatever T is, and every tile loads 8 rows of it: float16
# activations at exactly M = 8; K in steps of 8, N in 8-column tiles.
METAL_TILING = Tiling(rows=(8, 8), dtypes=("float16",), k_multiple=(8,), n_multiple=(8,))


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="sequential", k_groups=1, operand_dtype=mx.float16)


CUDA_SOURCE = mma_verify.CUDA_SOURCE
CUDA_HEADER = mma_verify.CUDA_HEADER
CUDA_LAYOUT = "mma"
# mma_verify's tiling, with fp16 operands only: bf16 activations would run bf16 tiles, which is
# not this contract (its portable form rounds the operands to fp16).
CUDA_TILING = replace(mma_verify.CUDA_TILING, dtypes=("float16",))
