"""mma_verify: the verify kernel on NVIDIA tensor cores (sm_80+), for M = 4, 8 or 16 rows.

Contract: activations as given (bf16 or fp16) and the dequantized weights (``scale * q + bias``
in float32) rounded to the activation dtype, multiplied on ``mma.sync.m16n8k16`` tiles with
float32 accumulation, sequentially along K inside each of ``k_groups`` contiguous K groups (one
warp each), group sums added in order; one rounding to the activation dtype. Rows beyond M are
zero in the 16-row tile. The weight rounding is the only extra error against stock: at most half
an ulp of the activation dtype per weight (2^-9 relative in bf16), averaging out over K.

The scalar float32-FMA kernels are compute-bound on an H200 at M=8 (8 FMAs per 4-bit weight);
tensor cores take the multiply-adds, leaving dequantization on the CUDA cores. No Metal source:
Apple GPUs use the scalar and simdgroup-matrix variants.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.tiling import Tiling
from kernels.variants._cuda_common import CUDA_HEADER as _CUDA_HEADER
from kernels.variants._cuda_common import MMA_HEADER
from kernels.variants._portable import split_k

NAME = "mma_verify"
ROWS = None  # 4, 8 or 16
DEFAULTS = {"n_tile": 8, "k_groups": 1}
METAL_SOURCE = None
HEADER = ""

# Constants: M_ROWS (<= 16), K_GROUPS, K, N, GS, IS_BF16; type T. One warp per (8 columns,
# K group); a block is the K_GROUPS warps of one 8-column tile. Per 128 values of K a lane
# (g = lane / 4, t = lane % 4) loads 4 packed words of column n0 + g and the same 32 activations
# of rows g and g + 8, and issues 8 mma steps. K is permuted identically in A and B (lane t's
# 32 values feed mma k-slots 2t, 2t+1, 2t+8, 2t+9), so the dot products are unchanged.
CUDA_SOURCE = r"""
  constexpr int WORDS = K / 8;
  constexpr int GROUP_WORDS = WORDS / K_GROUPS;
  constexpr int ROW_GROUPS = K / GS;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n0 = blockIdx.x * 8;
  const int n = n0 + g;
  float c0 = 0.f, c1 = 0.f, c2 = 0.f, c3 = 0.f;
  const bool lo_row = g < M_ROWS, hi_row = g + 8 < M_ROWS;
  for (int blk = 0; blk < GROUP_WORDS; blk += 16) {
    const int word = warp * GROUP_WORDS + blk + 4 * t;
    uint32_t wv[4];
    dflash2_load_words<4>(w + n * WORDS + word, wv);
    const float sc = static_cast<float>(scales[n * ROW_GROUPS + (word * 8) / GS]);
    const float bi = static_cast<float>(biases[n * ROW_GROUPS + (word * 8) / GS]);
    uint32_t xl[16], xh[16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint4 a = lo_row ? reinterpret_cast<const uint4*>(x + g * K + word * 8)[i]
                             : make_uint4(0, 0, 0, 0);
      const uint4 b = hi_row ? reinterpret_cast<const uint4*>(x + (g + 8) * K + word * 8)[i]
                             : make_uint4(0, 0, 0, 0);
      xl[4 * i] = a.x; xl[4 * i + 1] = a.y; xl[4 * i + 2] = a.z; xl[4 * i + 3] = a.w;
      xh[4 * i] = b.x; xh[4 * i + 1] = b.y; xh[4 * i + 2] = b.z; xh[4 * i + 3] = b.w;
    }
#pragma unroll
    for (int s = 0; s < 8; ++s) {
      const uint32_t q = wv[s >> 1] >> (16 * (s & 1));
      float f[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) f[j] = fmaf(sc, static_cast<float>((q >> (4 * j)) & 0xFu), bi);
      const uint32_t b0 = dflash2_pack2<IS_BF16>(f[0], f[1]);
      const uint32_t b1 = dflash2_pack2<IS_BF16>(f[2], f[3]);
      dflash2_mma<IS_BF16>(c0, c1, c2, c3, xl[2 * s], xh[2 * s], xl[2 * s + 1], xh[2 * s + 1],
                           b0, b1);
    }
  }
  __shared__ float partial[K_GROUPS][16][8];
  partial[warp][g][2 * t] = c0;
  partial[warp][g][2 * t + 1] = c1;
  partial[warp][g + 8][2 * t] = c2;
  partial[warp][g + 8][2 * t + 1] = c3;
  __syncthreads();
  for (int i = threadIdx.x; i < M_ROWS * 8; i += blockDim.x) {
    const int m = i / 8, col = i % 8;
    float total = partial[0][m][col];
#pragma unroll
    for (int h = 1; h < K_GROUPS; ++h) total += partial[h][m][col];  // groups in order
    y[m * N + n0 + col] = static_cast<T>(total);
  }
"""
CUDA_HEADER = _CUDA_HEADER + MMA_HEADER
CUDA_LAYOUT = "mma"
# Half-precision mma operands only; whole 128-value steps per K group; blocks of 8 columns; a
# lane's 32 consecutive values share one scale (group_size % 32); partial[K_GROUPS][16][8].
CUDA_TILING = Tiling(dtypes=("bfloat16", "float16"), k_multiple=(128, "k_groups"),
                     n_multiple=(8,), group_multiple=32, shared_floats=("k_groups", 16, 8))


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="sequential", k_groups=int(params.get("k_groups", 1)),
                   operand_dtype=x.dtype)
