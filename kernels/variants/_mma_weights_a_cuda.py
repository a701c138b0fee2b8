"""The CUDA source of ``mma_weights_a`` (its contract, params and tiling: mma_weights_a.py).

Kept apart because the source is most of the variant's lines; ``mma_weights_a`` takes
``CUDA_SOURCE`` and ``CUDA_HEADER`` from here.
"""

from kernels.variants._cuda_common import (
    ABLATE_WORD,
    BULK_HEADER,
    C_TILE_SUMS,
    CLUSTER_HEADER,
    CP_ASYNC_HEADER,
    MMA_HEADER,
    MMA_TILE_CONSTANTS,
    batch_driver,
    cluster_add,
    mma_lanes,
    tile_add,
)
from kernels.variants._cuda_common import CUDA_HEADER as _CUDA_HEADER
from kernels.variants._dequant_cuda import DEQUANT_HEADER, NIBBLE_HEADER
from kernels.variants._mma_weights_a_bulk_cuda import BULK_PIPELINE
from kernels.variants._mma_weights_a_x_cuda import LOAD_X
from kernels.variants._wgmma_cuda import WG_MATH, WGMMA_HEADER

# Constants: M_ROWS (<= 16), COL_TILES (16-column tiles a warp owns: n_tile / 16), K_GROUPS,
# UNROLL (K steps of 128 whose loads go out together), PREFETCH, STAGES (0: the register
# pipeline of UNROLL / PREFETCH; >= 2: the cp.async ring), L2_PREFETCH (the ring's L2
# prefetch hint, 128 or 256 bytes), X_EARLY (activations loaded with the weights: in the
# register batch, or through the ring; else step by step before the math), HI_IN_PLACE (fp16:
# one shift a word, dflash2_dequant_pair's HIGH), DENORM (q as a subnormal: no subtraction,
# dflash2_dequant_denorm; 2: also one shift a word), BULK (the producer
# warp's ring of STAGES stages of UNROLL steps in dynamic shared memory), PACKED (with BULK: w
# packed so that a block's stage is one contiguous copy), LEADER (with PACKED: no producer warp,
# warp 0's lane 0 issues each stage's one copy), COL_WARPS (register pipeline: warps of a block
# on COL_WARPS column tiles side by side over the same K group, so they read the same activations
# at once), CLUSTER (register pipeline: a cluster of CLUSTER blocks takes a column tile's K
# groups in rank order, adding their sums in order through distributed shared memory), K, N, GS,
# IS_BF16, X_SHARE (with one K group a block: x through shared memory, loaded by the block's
# threads together one K step ahead), ROW_WARPS (register pipeline: a warp per 8 activation rows
# of each K group, M_ROWS being a warp's 8 rows), X_PREFETCH (x's lines that many K steps on
# brought into L1 as each step's are loaded: load_x), LAG (bulk 3: the slot its leader refills,
# LAG stages back), X_AHEAD (bulk without X_EARLY: x loaded two K steps ahead, not one; with
# WGMMA three), WGMMA (register pipeline, COL_WARPS 4: each K group's 4 warps a warpgroup, its
# mma a wgmma with x staged in shared memory, ``wg_stage``, not in each lane's registers; 2:
# each step's wgmma left in flight through the next step), X_ROT (bulk's plain load_x path:
# the next step's x word by word into the registers this step's word has left); type T.
# Lane (g = lane / 4, t = lane % 4) owns K values [128 s + 32 t, +32) of every step s: for
# columns n0 + g and n0 + g + 8 one 16-byte load each (4 packed words), and the same 32
# activations of row g (and g + 8 for a second B tile). Word i of those 4 feeds two mma steps;
# in each, the lane's k-slots (2t, 2t+1, 2t+8, 2t+9) hold the word's nibbles (0, 4, 1, 5) and
# then (2, 6, 3, 7), and the activations are paired the same way with PRMT, so A and B agree
# on every k and the dot products are those of the contract.
# The sums of a block whose warps sit on COL_WARPS column tiles side by side (warp w: tile
# w % COL_WARPS, the block's K group row w / COL_WARPS) and whose cluster's blocks split K: each
# warp's C tile into ``part[row][m][tile's columns]``, then every output summed over the K
# groups in order (across the cluster, through distributed shared memory: block 0's rows first),
# which are the float adds of the plain K_GROUPS tile of the same n_tile, bit for bit.
C_TILE_SUMS_SHARED = r"""    auto part = reinterpret_cast<float (*)[PROWS][BCOLS]>(smem);
    const int cw = (warp % COL_WARPS) * COLS;
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
      for (int c = 0; c < COL_TILES; ++c) {
        part[warp / COL_WARPS][8 * mt + 2 * t][cw + 16 * c + g] = acc[mt][c][0];
        part[warp / COL_WARPS][8 * mt + 2 * t + 1][cw + 16 * c + g] = acc[mt][c][1];
        part[warp / COL_WARPS][8 * mt + 2 * t][cw + 16 * c + g + 8] = acc[mt][c][2];
        part[warp / COL_WARPS][8 * mt + 2 * t + 1][cw + 16 * c + g + 8] = acc[mt][c][3];
      }
    const int y_base = (blockIdx.x / CLUSTER) * BCOLS;
    if constexpr (CLUSTER == 1) {
      __syncthreads();
""" + tile_add("part", "BCOLS", "y_base") + r"""    } else {
      dflash2_cluster_sync();  // every block's partial sums written
""" + cluster_add("part", "BCOLS", "y_base") + r"""      dflash2_cluster_sync();  // no block leaves while another still reads its shared memory
    }
"""
# The sums of a block whose warps take ROW_WARPS row tiles of 8 (warp w: rows 8 (w % ROW_WARPS)
# on, K group w / ROW_WARPS; one activation tile each, M_TILES = 1): each warp's C tile into
# ``part[K group][its rows][columns]``, then every output summed over the K groups in order,
# the plain tile's float adds, bit for bit.
C_TILE_SUMS_ROWS = r"""    auto part = reinterpret_cast<float (*)[ROW_WARPS * PROWS][COLS]>(smem);
#pragma unroll
    for (int c = 0; c < COL_TILES; ++c) {
      part[warp / ROW_WARPS][8 * rw + 2 * t][16 * c + g] = acc[0][c][0];
      part[warp / ROW_WARPS][8 * rw + 2 * t + 1][16 * c + g] = acc[0][c][1];
      part[warp / ROW_WARPS][8 * rw + 2 * t][16 * c + g + 8] = acc[0][c][2];
      part[warp / ROW_WARPS][8 * rw + 2 * t + 1][16 * c + g + 8] = acc[0][c][3];
    }
    __syncthreads();
""" + tile_add("part", rows="ROW_WARPS * M_ROWS")
CUDA_SOURCE = MMA_TILE_CONSTANTS + r"""
  constexpr int CT2 = 2 * COL_TILES;  // weight rows a lane loads per K step
  // Shared memory: the cp.async ring (STAGES > 0) and, after the K loop, the K groups' partial
  // sums, in one buffer.
  constexpr int RING_STAGES = STAGES > 0 ? STAGES : 1;  // slot arithmetic (no % 0 when off)
  constexpr int XQ = X_EARLY ? 4 * M_TILES : 0;         // 16-byte activation chunks a step
  // a ring a warp: K_GROUPS warps, or with WGMMA the block's warpgroups' (one K group each)
  constexpr int RING_WARPS = WGMMA ? 4 * K_GROUPS : K_GROUPS;
  constexpr int RING_W = STAGES * RING_WARPS * CT2 * 32;  // 16-byte weight chunks
  constexpr int RING_X = STAGES * RING_WARPS * XQ * 32;   // 16-byte activation chunks
  constexpr int RING_S = RING_W;                        // 4-byte scale (and bias) words
  constexpr int RING_BYTES = (RING_W + RING_X) * 16 + 2 * RING_S * 4;
  constexpr int BLOCK_GROUPS = K_GROUPS / CLUSTER;  // a block's K groups (a warp row each)
  constexpr int BCOLS = COL_WARPS * COLS;          // a block's columns
  constexpr int PARTIAL_BYTES = BLOCK_GROUPS * ROW_WARPS * PROWS * BCOLS * 4;
  // X_SHARE: two slots of one K step's activations (rows XS_PITCH bytes apart: 256 and 16, so
  // that rows g and g + 1 of a quarter warp's 16-byte reads fall on other banks), after the
  // partial sums, which the last step's readers may still overlap
  constexpr int XS_PITCH = 272;
  constexpr int XS_SLOT = M_ROWS * XS_PITCH;
  constexpr int XS_BYTES = X_SHARE ? 2 * XS_SLOT : 0;
  // X_EARLY 3 (register pipeline): each lane's activations through a ring of X_DEPTH K steps
  // of its own, after the partial sums (a warp may still read its last step while another
  // writes its sums); kernels.cuda_config checks that it fits
  // (BULK with X_EARLY 1 rings them the same way, after its weights' stages:
  // kernels.cuda_config.BULK_X_DEPTH sizes that ring)
  constexpr int X_DEPTH = 2;
  constexpr int XR_BYTES = X_EARLY == 3 ? X_DEPTH * K_GROUPS * ROW_WARPS * XQ * 32 * 16 : 0;
  // WGMMA: two slots (three with WGMMA 2) a K group of one K step's activations in wgmma's B
  // layout (WGMMA_HEADER): 8 k16 blocks (word i, then its pairs' half h) of NW rows, 2 x NW / 8
  // core matrices of 128 B each, after the partial sums (the last step's wgmma may still read
  // them)
  constexpr int NW = M_ROWS > 8 ? 16 : 8;
  constexpr int WG_KBLOCK = NW * 32;
  constexpr int WG_SLOT = 8 * WG_KBLOCK;
  // (and, with a cp.async ring, after the ring's stages, which the K loop is still filling)
  constexpr int WG_OFF = STAGES > 0 && RING_BYTES > PARTIAL_BYTES ? RING_BYTES : PARTIAL_BYTES;
  // WGMMA 2: a step's wgmma left in flight through the next step (wait_group 1), so x takes
  // three slots: the one a step writes was read three steps before, whose wgmma every warp
  // has waited for before the barrier of the step between
  constexpr int WG_SLOTS = WGMMA == 2 ? 3 : 2;
  auto wg_slot = [](int step) { return WGMMA == 2 ? step % 3 : step & 1; };
  constexpr int WG_BYTES = WGMMA ? BLOCK_GROUPS * WG_SLOTS * WG_SLOT : 0;
  constexpr int STATIC_BYTES = WGMMA ? WG_OFF + WG_BYTES : PARTIAL_BYTES + XS_BYTES + XR_BYTES;
  constexpr int SMEM_BYTES = BULK ? 16 : (RING_BYTES > STATIC_BYTES ? RING_BYTES : STATIC_BYTES);
  __shared__ __align__(16) unsigned char smem[SMEM_BYTES];
  // BULK: the ring lives in dynamic shared memory (kernels.cuda sizes it: bulk_smem_bytes):
  // [mbarriers, 128 B][scales of the block's rows][biases][STAGES stages of weights].
  constexpr int SPS = UNROLL;  // K steps a stage holds (any divisor of GROUP_STEPS with BULK)
  // a row's bytes in a stage: padded for the banks when each row is its own copy; PACKED
  // weights land as one copy a stage, rows back to back (odd SPS keep the banks apart)
  constexpr int PITCH = SPS * 64 + (SPS % 2 == 0 && !PACKED ? 64 : 0);
  // X_EARLY 2 (with LEADER): a stage holds its K steps' activations after the weights, each
  // K group's row (SPS * 256 B, one copy) XP bytes after the last: 16 B over a multiple of
  // 128, so that rows g and g + 1 of a quarter warp's 16-byte reads fall on other banks
  constexpr int W_STAGE = K_GROUPS * COLS * PITCH;
  constexpr int XP = SPS * 256 + 16;
  constexpr int STAGE_BYTES = W_STAGE + (X_EARLY == 2 ? K_GROUPS * M_ROWS * XP : 0);
  constexpr int SB_BYTES = COLS * ROW_GROUPS * 2;
  extern __shared__ __align__(128) unsigned char dsmem[];
""" + mma_lanes("(blockIdx.x / CLUSTER) * COL_WARPS + (threadIdx.x >> 5) % COL_WARPS") + r"""
  // The warp's K group: its row of the block's warps, after the K groups of the cluster's
  // blocks of lower rank (COL_WARPS = CLUSTER = 1: the warp itself).
  int rank = 0;
  if constexpr (CLUSTER > 1) rank = int(dflash2_cluster_rank());
  const int kgroup = rank * BLOCK_GROUPS + warp / (COL_WARPS * ROW_WARPS);
  // ROW_WARPS: the warp's 8 activation rows, the row tile warp % ROW_WARPS (else 0).
  const int rw = warp % ROW_WARPS;
  // Lane bases: the lane's first row (g) and K offset; other rows and steps are offsets from
  // them, so a step's addresses are one add and immediates (indexing from the row each time
  // cost ~35 integer instructions a K step: 64-bit products and sign extensions per row).
  const T* x_lane = x + (8 * rw + g) * K + 32 * t;
  const uint32_t* w_lane = w32 + (n_base + g) * WORDS + 4 * t;
  const uint16_t* s_lane = s16 + (n_base + g) * ROW_GROUPS;
  const uint16_t* b_lane = b16 + (n_base + g) * ROW_GROUPS;
  // A row's 16-bit scale as the pair every FMA of its K step takes; with DENORM times 2^133
  // (bf16) or 2^20 (fp16; 2^24 with DENORM 2) for the subnormal q of dflash2_dequant_denorm
  // (exact: a power of two, and the launch keeps weights whose scales would overflow off this
  // path: kernels.cuda).
  // Made where the scale is loaded, so the batch holds the scaled pair alone (gate/up's
  // shipped tile: 80 registers, the plain tile's, against 94 when made at each step's math).
  auto scale_pair = [](uint32_t sv) -> uint32_t {
    const uint32_t s2 = sv | (sv << 16);
    return DENORM ? dflash2_denorm_scale<IS_BF16, DENORM>(s2) : s2;
  };
""" + LOAD_X + r"""  // DENORM 2: the scale pairs of the nibbles at bits 4-7, a step's, from those at bits 0-3.
  auto odd_scales = [&](const uint32_t (&sc)[COL_TILES][2], uint32_t (&so)[COL_TILES][2]) {
#pragma unroll
    for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        so[c][h] = DENORM == 2 ? dflash2_denorm_odd<IS_BF16>(sc[c][h]) : 0u;
  };
  // Word i of column tile c's two loads as its 2 x 4 dequantized pairs: a[column lo/hi][nibble
  // pair], the A fragments of the word's two mma.
  auto dequant = [&](const uint4 (&wq)[2], const uint32_t (&sc)[2], const uint32_t (&bi)[2],
                     const uint32_t (&so)[2], int i, uint32_t (&a)[2][4]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint4 v = wq[h];
      const uint32_t q = i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
      if constexpr (DENORM) {  // q as a subnormal: the LOP3 and the FMA, no subtraction
#pragma unroll
        for (int j = 0; j < 4; ++j)
          a[h][j] = dflash2_dequant_denorm<IS_BF16, DENORM>(
              q, j, DENORM == 2 && (j & 1) ? so[h] : sc[h], bi[h]);
      } else if constexpr (HI_IN_PLACE) {  // fp16: the high nibble of each byte where it lies
        const uint32_t q8 = q >> 8;
        a[h][0] = dflash2_dequant_pair<IS_BF16, false>(q, sc[h], bi[h]);
        a[h][1] = dflash2_dequant_pair<IS_BF16, true>(q, sc[h], bi[h]);
        a[h][2] = dflash2_dequant_pair<IS_BF16, false>(q8, sc[h], bi[h]);
        a[h][3] = dflash2_dequant_pair<IS_BF16, true>(q8, sc[h], bi[h]);
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j)
          a[h][j] = dflash2_dequant_pair<IS_BF16, false>(q >> (4 * j), sc[h], bi[h]);
      }
    }
  };
  // One K step's math: per word 2 dequantized A tiles per column tile and 2 mma per activation
  // tile. ``taken(i)`` runs once word i's activations are in pairs, so that X_ROT can load the
  // next step's word i into the registers they leave.
  auto mma_math_then = [&](const uint4 (&wq)[COL_TILES][2], const uint32_t (&sc)[COL_TILES][2],
                           const uint32_t (&bi)[COL_TILES][2], const uint4 (&xa)[M_TILES][4],
                           auto&& taken) {
    uint32_t so[COL_TILES][2];
    odd_scales(sc, so);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t bx[M_TILES][4];  // activation pairs (0,4), (1,5), (2,6), (3,7) of word i
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        dflash2_activation_pairs(xa[mt][i], bx[mt]);
      }
      taken(i);
#pragma unroll
      for (int c = 0; c < COL_TILES; ++c) {
        uint32_t a[2][4];  // [column lo/hi][nibble pair]
        dequant(wq[c], sc[c], bi[c], so[c], i, a);
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          dflash2_mma<IS_BF16>(acc[mt][c][0], acc[mt][c][1], acc[mt][c][2], acc[mt][c][3],
                               a[0][0], a[1][0], a[0][1], a[1][1], bx[mt][0], bx[mt][1]);
          dflash2_mma<IS_BF16>(acc[mt][c][0], acc[mt][c][1], acc[mt][c][2], acc[mt][c][3],
                               a[0][2], a[1][2], a[0][3], a[1][3], bx[mt][2], bx[mt][3]);
        }
      }
    }
  };
  auto mma_math = [&](const uint4 (&wq)[COL_TILES][2], const uint32_t (&sc)[COL_TILES][2],
                      const uint32_t (&bi)[COL_TILES][2], const uint4 (&xa)[M_TILES][4]) {
    mma_math_then(wq, sc, bi, xa, [](int) {});
  };
""" + WG_MATH + r"""
""" + BULK_PIPELINE + r"""
  } else if constexpr (STAGES > 0) {
    // The cp.async ring: slot [stage][row c * 2 + h][lane] of this warp's region. A lane reads
    // back only what it copied, so cp.async.wait_group alone orders the ring.
    uint4* ring_w = reinterpret_cast<uint4*>(smem) + warp * (STAGES * CT2 * 32);
    uint4* ring_x = reinterpret_cast<uint4*>(smem + RING_W * 16) +
                    warp * (STAGES * XQ * 32);
    uint32_t* ring_s = reinterpret_cast<uint32_t*>(smem + (RING_W + RING_X) * 16) +
                       warp * (STAGES * CT2 * 32);
    uint32_t* ring_b = ring_s + RING_S;
    auto issue = [&](int s) {
      if (s < GROUP_STEPS) {
        const int slot = (s % RING_STAGES) * CT2 * 32 + lane;
        const int step = kgroup * GROUP_STEPS + s;
        const int word = step * 16 + 4 * t;
        const int grp = (step * 128 + 32 * t) / GS;
#pragma unroll
        for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int n = n_base + 16 * c + g + 8 * h;
            const int at = slot + (2 * c + h) * 32;
            const int si = (n * ROW_GROUPS + grp) & ~1;  // the aligned word holding it
            dflash2_cp_async16<L2_PREFETCH>(ring_w + at, w32 + n * WORDS + word);
            dflash2_cp_async4(ring_s + at, s16 + si);
            dflash2_cp_async4(ring_b + at, b16 + si);
          }
        if constexpr (X_EARLY) {  // the step's activations too (rows past M stay unread)
          const int xslot = (s % RING_STAGES) * XQ * 32 + lane;
#pragma unroll
          for (int mt = 0; mt < M_TILES; ++mt) {
            const int row = 8 * mt + g;
            if (row < M_ROWS) {
              const T* xp = x + row * K + step * 128 + 32 * t;
#pragma unroll
              for (int i = 0; i < 4; ++i)
                dflash2_cp_async16_ca(ring_x + xslot + (4 * mt + i) * 32, xp + 8 * i);
            }
          }
        }
      }
      dflash2_cp_async_commit();  // empty groups past the end keep the count uniform
    };
    if constexpr (WGMMA) wg_start(kgroup * GROUP_STEPS);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) issue(s);
#pragma unroll 1
    for (int s = 0; s < GROUP_STEPS; ++s) {
      dflash2_cp_async_wait<(STAGES > 1 ? STAGES - 2 : 0)>();  // step s has landed
      const int slot = (s % RING_STAGES) * CT2 * 32 + lane;
      const int step = kgroup * GROUP_STEPS + s;
      const int grp = (step * 128 + 32 * t) / GS;
      uint4 wq[COL_TILES][2];
      uint32_t sc[COL_TILES][2], bi[COL_TILES][2];
#pragma unroll
      for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int at = slot + (2 * c + h) * 32;
          const int n = n_base + 16 * c + g + 8 * h;
          const int shift = 16 * ((n * ROW_GROUPS + grp) & 1);
          wq[c][h] = ring_w[at];
          const uint32_t sv = (ring_s[at] >> shift) & 0xFFFFu;
          const uint32_t bv = (ring_b[at] >> shift) & 0xFFFFu;
          sc[c][h] = scale_pair(sv);
          bi[c][h] = bv | (bv << 16);
        }
      uint4 xa[M_TILES][4];
      if constexpr (X_EARLY) {
        const int xslot = (s % RING_STAGES) * XQ * 32 + lane;
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            xa[mt][i] = 8 * mt + g < M_ROWS ? ring_x[xslot + (4 * mt + i) * 32]
                                            : make_uint4(0, 0, 0, 0);
      }
      issue(s + STAGES - 1);  // into the slot step s - 1 used: already read back
      if constexpr (!X_EARLY) load_x(xa, step);  // WGMMA: x staged for the warpgroup
      if constexpr (WGMMA) wg_math(wq, sc, bi, step);
      else mma_math(wq, sc, bi, xa);
    }
    dflash2_cp_async_wait<0>();
    __syncthreads();  // the partial sums below reuse the ring's memory
  } else {
    // One batch: the weight loads of UNROLL K steps, all issued before any is used.
    // X_EARLY: the batch's activations are loaded with its weights, not step by step.
    struct Batch {
      uint4 wq[UNROLL][COL_TILES][2];
      uint32_t sc[UNROLL][COL_TILES][2], bi[UNROLL][COL_TILES][2];
      uint4 xa[X_EARLY == 1 ? UNROLL : 1][M_TILES][4];
    };
    auto batch_math = [&](const Batch& b, int u, int step, const uint4 (&xa)[M_TILES][4]) {
      if constexpr (WGMMA) wg_math(b.wq[u], b.sc[u], b.bi[u], step);
      else mma_math(b.wq[u], b.sc[u], b.bi[u], xa);
    };
    auto load = [&](Batch& b, int s0) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int step = kgroup * GROUP_STEPS + s0 + u;
        const int grp = (step * 128 + 32 * t) / GS;
        const uint32_t* wp = w_lane + step * 16;
#pragma unroll
        for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * c + 8 * h;  // the row's offset from the lane's first
            if constexpr (ABLATE == 2 || ABLATE == 4) {
              const uint32_t v = """ + ABLATE_WORD + r""";
              b.wq[u][c][h] = make_uint4(v, v ^ 1u, v ^ 2u, v ^ 3u);
            } else {
              b.wq[u][c][h] = __ldcs(reinterpret_cast<const uint4*>(wp + r * WORDS));
            }
            const uint32_t sv = s_lane[r * ROW_GROUPS + grp], bv = b_lane[r * ROW_GROUPS + grp];
            b.sc[u][c][h] = scale_pair(sv);
            b.bi[u][c][h] = bv | (bv << 16);
          }
        if constexpr (X_EARLY == 1) load_x(b.xa[u], step);
      }
    };
    if constexpr (X_SHARE) xs_issue(kgroup * GROUP_STEPS);  // the first step's share
    if constexpr (WGMMA) wg_start(kgroup * GROUP_STEPS);
    if constexpr (X_EARLY == 3) {  // the ring's first X_DEPTH - 1 steps
#pragma unroll
      for (int d = 0; d < X_DEPTH - 1; ++d) issue_x3(kgroup * GROUP_STEPS + d);
    }
""" + batch_driver("kgroup") + r"""    if constexpr (X_EARLY == 3) dflash2_cp_async_wait<0>();  // none left in flight at exit
  }

  if constexpr (WGMMA) {  // D into the C tiles (every wgmma waited for: wg_math, and here)
    if constexpr (WGMMA == 2) dflash2_wgmma_wait<0>();
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
      for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mt][c][r] = wacc[c][4 * mt + r];
  }
  // C tile: rows are output columns (g, g + 8), columns are activation rows (2t, 2t + 1).
  if constexpr (ROW_WARPS > 1) {
""" + C_TILE_SUMS_ROWS + r"""  } else if constexpr (COL_WARPS == 1 && CLUSTER == 1) {
    auto partial = reinterpret_cast<float (*)[PROWS][COLS]>(
        BULK ? dsmem + 128 + 2 * SB_BYTES : smem);
""" + C_TILE_SUMS + r"""  } else {
""" + C_TILE_SUMS_SHARED + "  }\n"
CUDA_HEADER = (_CUDA_HEADER + MMA_HEADER + NIBBLE_HEADER + CP_ASYNC_HEADER + BULK_HEADER
               + DEQUANT_HEADER + CLUSTER_HEADER + WGMMA_HEADER)
