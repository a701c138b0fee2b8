"""The CUDA source of ``mma_group_sums`` (its contract, params and tiling: mma_group_sums.py).

Kept apart because the source is most of the variant's lines; the register pipeline's batches
and the K groups' sums are ``mma_weights_a``'s (``BATCH_DRIVER``, ``C_TILE_SUMS``).
"""

from kernels.variants._cuda_common import (
    ABLATE_WORD,
    C_TILE_ADD,
    C_TILE_STORE,
    CLUSTER_HEADER,
    MMA_HEADER,
    MMA_TILE_CONSTANTS,
    batch_driver,
    cluster_add,
    mma_lanes,
)
from kernels.variants._cuda_common import CUDA_HEADER as _CUDA_HEADER
from kernels.variants._dequant_cuda import NIBBLE_HEADER

# Constants: M_ROWS (<= 16), COL_TILES (16-column tiles a warp owns: n_tile / 16), K_GROUPS,
# UNROLL (K steps of 128 whose loads go out together), PREFETCH (the next batch's loads before
# this batch's math), X_EARLY (activations loaded with the weights), LATE_SCALES (a step's scales
# and biases loaded at its math, not with the batch), CLUSTER (blocks sharing a column tile, its
# K groups split among them), K, N, GS (32, 64 or 128), IS_BF16; type T.
# Lane (g = lane / 4, t = lane % 4) holds 4 packed words (32 K values) of each K step of the rows
# n0 + g and n0 + g + 8, as in mma_weights_a, but laid so that every mma's 16 K values lie in ONE
# quantization group: word i covers K [GS (i / WPG) + 8 (t WPG + i % WPG), +8) of the step, WPG
# = GS / 32 words of a group a lane holds (at GS = 128 that is mma_weights_a's [32 t + 8 i]). In
# each of word i's two mma the lane's k-slots (2t, 2t+1, 2t+8, 2t+9) hold nibbles (0, 4, 1, 5)
# and then (2, 6, 3, 7), the activations paired the same way with PRMT.
CUDA_SOURCE = MMA_TILE_CONSTANTS + r"""
  constexpr int WPG = GS / 32;          // words of one group a lane holds in a K step
  constexpr int GPS = 128 / GS;         // groups a K step spans
  constexpr int SW = GPS == 4 ? 2 : 1;  // 32-bit words holding a row's GPS 16-bit scales
  constexpr int BLOCK_GROUPS = K_GROUPS / CLUSTER;  // a block's K groups: one warp each
  __shared__ __align__(16) float partial[BLOCK_GROUPS][PROWS][COLS];
  // acc (mma_lanes): the running float32 sums, each group's scaled sum and bias term in K order
""" + mma_lanes("blockIdx.x / CLUSTER") + r"""
  // The warp's K group: the cluster's blocks take the tile's K groups in rank order.
  int rank = 0;
  if constexpr (CLUSTER > 1) rank = int(dflash2_cluster_rank());
  const int kgroup = rank * BLOCK_GROUPS + warp;
  const T* x_lane = x + g * K + 8 * WPG * t;
  const uint32_t* w_lane = w32 + (n_base + g) * WORDS + WPG * t;
  const uint16_t* s_lane = s16 + (n_base + g) * ROW_GROUPS;
  const uint16_t* b_lane = b16 + (n_base + g) * ROW_GROUPS;
  // The lane's activations of one K step (row g, + 8; zeros past M), word i's 8 values each.
  auto load_x = [&](uint4 (&xa)[M_TILES][4], int step) {
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
      const int row = 8 * mt + g;
      const T* xp = x_lane + 8 * mt * K + step * 128;
#pragma unroll
      for (int i = 0; i < 4; ++i)
        xa[mt][i] = row < M_ROWS
            ? *reinterpret_cast<const uint4*>(xp + GS * (i / WPG) + 8 * (i % WPG))
            : make_uint4(0, 0, 0, 0);
    }
  };
  // A row's 4 words of one step: one 16-byte load (GS 128), two 8-byte loads (64), four words.
  auto load_w = [&](uint32_t (&q)[4], const uint32_t* p) {
    if constexpr (WPG == 4) {
      const uint4 v = __ldcs(reinterpret_cast<const uint4*>(p));
      q[0] = v.x; q[1] = v.y; q[2] = v.z; q[3] = v.w;
    } else if constexpr (WPG == 2) {
      const uint2 lo = __ldcs(reinterpret_cast<const uint2*>(p));
      const uint2 hi = __ldcs(reinterpret_cast<const uint2*>(p + 8));
      q[0] = lo.x; q[1] = lo.y; q[2] = hi.x; q[3] = hi.y;
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) q[i] = __ldcs(p + 4 * i);
    }
  };
  // A row's scales (or biases) of the step's GPS groups, 16 bits each, packed in SW words.
  auto load_sb = [&](uint32_t (&out)[SW], const uint16_t* p) {
    if constexpr (GPS == 4) {
      const uint2 v = *reinterpret_cast<const uint2*>(p);
      out[0] = v.x; out[1] = v.y;
    } else if constexpr (GPS == 2) {
      out[0] = *reinterpret_cast<const uint32_t*>(p);
    } else {
      out[0] = *p;
    }
  };
  // One K step. Per word: the group's sums of (MAGIC + q) x (A: the LOP3 alone) and of x (A:
  // ones), one mma pair each per activation tile; after a group's last word, per output value,
  // acc += s * sum (MAGIC + q) x, then acc += (b - MAGIC s) * sum x, each one float32 FMA.
  auto mma_math = [&](const uint32_t (&wq)[COL_TILES][2][4], const uint32_t (&sc)[COL_TILES][2][SW],
                      const uint32_t (&bi)[COL_TILES][2][SW], const uint4 (&xa)[M_TILES][4]) {
    constexpr uint32_t MAGIC = IS_BF16 ? 0x43004300u : 0x64006400u;  // 128 / 1024, twice
    constexpr float MAGIC_F = IS_BF16 ? 128.f : 1024.f;
    const uint32_t ones = IS_BF16 ? 0x3F803F80u : 0x3C003C00u;
    uint32_t magic = MAGIC;
    float gq[M_TILES][COL_TILES][4], gx[M_TILES][4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (i % WPG == 0) {  // a group starts
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
          for (int r = 0; r < 4; ++r) gx[mt][r] = 0.f;
#pragma unroll
          for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
            for (int r = 0; r < 4; ++r) gq[mt][c][r] = 0.f;
        }
      }
      uint32_t bx[M_TILES][4];  // activation pairs (0,4), (1,5), (2,6), (3,7) of word i
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        dflash2_activation_pairs(xa[mt][i], bx[mt]);
        dflash2_mma<IS_BF16>(gx[mt][0], gx[mt][1], gx[mt][2], gx[mt][3], ones, ones, ones,
                             ones, bx[mt][0], bx[mt][1]);
        dflash2_mma<IS_BF16>(gx[mt][0], gx[mt][1], gx[mt][2], gx[mt][3], ones, ones, ones,
                             ones, bx[mt][2], bx[mt][3]);
      }
#pragma unroll
      for (int c = 0; c < COL_TILES; ++c) {
        uint32_t a[2][4];  // [column lo/hi][nibble pair]: MAGIC + q, exactly
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int j = 0; j < 4; ++j) a[h][j] = dflash2_or_magic<0x000F000Fu>(wq[c][h][i] >> (4 * j), magic);
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          dflash2_mma<IS_BF16>(gq[mt][c][0], gq[mt][c][1], gq[mt][c][2], gq[mt][c][3],
                               a[0][0], a[1][0], a[0][1], a[1][1], bx[mt][0], bx[mt][1]);
          dflash2_mma<IS_BF16>(gq[mt][c][0], gq[mt][c][1], gq[mt][c][2], gq[mt][c][3],
                               a[0][2], a[1][2], a[0][3], a[1][3], bx[mt][2], bx[mt][3]);
        }
      }
      if (i % WPG == WPG - 1) {  // the group's last word: its scale and bias, once
        const int j = i / WPG;    // the group's place in the step
#pragma unroll
        for (int c = 0; c < COL_TILES; ++c) {
          const float s0 = dflash2_half_f32<IS_BF16>(sc[c][0][j / 2], j % 2);
          const float s1 = dflash2_half_f32<IS_BF16>(sc[c][1][j / 2], j % 2);
          const float b0 = fmaf(-MAGIC_F, s0, dflash2_half_f32<IS_BF16>(bi[c][0][j / 2], j % 2));
          const float b1 = fmaf(-MAGIC_F, s1, dflash2_half_f32<IS_BF16>(bi[c][1][j / 2], j % 2));
#pragma unroll
          for (int mt = 0; mt < M_TILES; ++mt) {
            // C rows: output columns g (0, 1) and g + 8 (2, 3); C columns: activation rows 2t
            // (0, 2) and 2t + 1 (1, 3); the ones-mma's sums of x are the same in every row.
            acc[mt][c][0] = fmaf(b0, gx[mt][0], fmaf(s0, gq[mt][c][0], acc[mt][c][0]));
            acc[mt][c][1] = fmaf(b0, gx[mt][1], fmaf(s0, gq[mt][c][1], acc[mt][c][1]));
            acc[mt][c][2] = fmaf(b1, gx[mt][0], fmaf(s1, gq[mt][c][2], acc[mt][c][2]));
            acc[mt][c][3] = fmaf(b1, gx[mt][1], fmaf(s1, gq[mt][c][3], acc[mt][c][3]));
          }
        }
      }
    }
  };

  // One batch: the weight loads of UNROLL K steps, all issued before any is used.
  // X_EARLY: the batch's activations are loaded with its weights, not step by step.
  // LATE_SCALES: a step's scales and biases are loaded just before its math, not with the
  // batch (they are L1 hits: one 32-byte sector holds 16 groups of a row), so a prefetched batch
  // holds the weights alone: gate/up's prefetched unroll-1 tile takes 84 registers, not 130.
  constexpr int SB_STEPS = LATE_SCALES ? 1 : UNROLL;
  struct Batch {
    uint32_t wq[UNROLL][COL_TILES][2][4];
    uint32_t sc[SB_STEPS][COL_TILES][2][SW], bi[SB_STEPS][COL_TILES][2][SW];
    uint4 xa[X_EARLY ? UNROLL : 1][M_TILES][4];
  };
  auto load_scales = [&](uint32_t (&sc)[COL_TILES][2][SW], uint32_t (&bi)[COL_TILES][2][SW],
                         int step) {
#pragma unroll
    for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * c + 8 * h;  // the row's offset from the lane's first
        load_sb(sc[c][h], s_lane + r * ROW_GROUPS + step * GPS);
        load_sb(bi[c][h], b_lane + r * ROW_GROUPS + step * GPS);
      }
  };
  auto batch_math = [&](const Batch& b, int u, int step, const uint4 (&xa)[M_TILES][4]) {
    if constexpr (LATE_SCALES) {
      uint32_t sc[COL_TILES][2][SW], bi[COL_TILES][2][SW];
      load_scales(sc, bi, step);
      mma_math(b.wq[u], sc, bi, xa);
    } else {
      mma_math(b.wq[u], b.sc[u], b.bi[u], xa);
    }
  };
  auto load = [&](Batch& b, int s0) {
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      const int step = kgroup * GROUP_STEPS + s0 + u;
      const uint32_t* wp = w_lane + step * 16;
#pragma unroll
      for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if constexpr (ABLATE == 2) {
#pragma unroll
            for (int i = 0; i < 4; ++i) b.wq[u][c][h][i] = (""" + ABLATE_WORD + r""") ^ i;
          } else {
            load_w(b.wq[u][c][h], wp + (16 * c + 8 * h) * WORDS);
          }
      if constexpr (!LATE_SCALES) load_scales(b.sc[u], b.bi[u], step);
      if constexpr (X_EARLY) load_x(b.xa[u], step);
    }
  };
  {
""" + batch_driver("kgroup") + r"""  }

""" + C_TILE_STORE + r"""  if constexpr (CLUSTER == 1) {
    __syncthreads();
""" + C_TILE_ADD + r"""  } else {
    dflash2_cluster_sync();  // every block's partial sums written
""" + cluster_add() + r"""    dflash2_cluster_sync();  // no block leaves while another still reads its shared memory
  }
"""

CUDA_HEADER = _CUDA_HEADER + MMA_HEADER + NIBBLE_HEADER + CLUSTER_HEADER + r"""
// Half HI (0: bits 0-15, 1: bits 16-31) of ``word``, a bf16 or fp16 value, as float32 (exact).
template <bool BF16>
__device__ __forceinline__ float dflash2_half_f32(uint32_t word, int hi) {
  if constexpr (BF16) {
    return __uint_as_float(hi ? word & 0xFFFF0000u : word << 16);
  } else {
    const __half2 v = *reinterpret_cast<const __half2*>(&word);
    return hi ? __high2float(v) : __low2float(v);
  }
}
"""
