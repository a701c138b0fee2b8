"""CUDA helpers every variant's CUDA source includes (built by ``mx.fast.cuda_kernel``).

MLX writes the kernel signature itself (``const <type>* name`` per input, in each array's own
dtype) and turns template arguments into ``constexpr int`` / ``using`` lines at the top of the
body, so the sources below only name inputs (x, w, scales, biases), the output (y) and the
template constants.
"""

CUDA_HEADER = r"""
// Eight consecutive activations as float32: one 16-byte load for 2-byte types, two for float.
template <typename T>
__device__ __forceinline__ void dflash2_load8(const T* p, float out[8]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = static_cast<float>(h[j]);
  } else {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    out[0] = a.x; out[1] = a.y; out[2] = a.z; out[3] = a.w;
    out[4] = b.x; out[5] = b.y; out[6] = b.z; out[7] = b.w;
  }
}

// VEC packed words (8 four-bit values each) of one weight row, in one load.
template <int VEC>
__device__ __forceinline__ void dflash2_load_words(const uint32_t* p, uint32_t out[VEC]) {
  if constexpr (VEC == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
  } else if constexpr (VEC == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    out[0] = v.x; out[1] = v.y;
  } else {
    out[0] = p[0];
  }
}

// The butterfly simd_sum of the contract: offsets 16, 8, 4, 2, 1, then lane 0's value (the
// association order of the portable form) broadcast to the warp.
__device__ __forceinline__ float dflash2_lane0_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return __shfl_sync(0xffffffffu, v, 0);
}
"""

# The tensor-core helpers of the mma variants: float32 pairs packed to the activation type, and
# one m16n8k16 multiply-accumulate (row-major A, column-major B, float32 C).
PACK2_HEADER = r"""
// Two float32 values rounded to the activation type, packed low/high in one 32-bit register.
template <bool BF16>
__device__ __forceinline__ uint32_t dflash2_pack2(float lo, float hi) {
  if constexpr (BF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

"""
# The mma itself (inline PTX: the CUDA emulator, kernels/cuda_emu, puts C++ in its place).
MMA_SYNC_HEADER = r"""template <bool BF16>
__device__ __forceinline__ void dflash2_mma(float& c0, float& c1, float& c2, float& c3,
                                            uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1) {
  if constexpr (BF16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}
"""
MMA_HEADER = PACK2_HEADER + MMA_SYNC_HEADER

# Asynchronous global -> shared copies (sm_80+): 16-byte chunks that skip L1 (streamed weights;
# L2 fetches 128 or 256 bytes of the row, so the next K steps of the row are L2 hits), 4-byte words
# through L1 (scales and biases: one 32-byte sector serves 8 K steps of a row).
CP_ASYNC_HEADER = r"""
// A shared-memory address for cp.async (PTX, so nothing depends on NVRTC's implicit headers).
__device__ __forceinline__ unsigned dflash2_smem_addr(const void* p) {
  unsigned a;
  asm("{ .reg .u64 u; cvta.to.shared.u64 u, %1; cvt.u32.u64 %0, u; }" : "=r"(a) : "l"(p));
  return a;
}
// L2_BYTES: the L2 prefetch size hint (128 or 256): how much of the row around the chunk L2
// fetches from DRAM at once.
template <int L2_BYTES>
__device__ __forceinline__ void dflash2_cp_async16(void* dst, const void* src) {
  const unsigned d = dflash2_smem_addr(dst);
  if constexpr (L2_BYTES == 256) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" :: "r"(d), "l"(src)
                 : "memory");
  } else {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" :: "r"(d), "l"(src)
                 : "memory");
  }
}
// 16 bytes through L1 (activations: read by every warp of the SM).
__device__ __forceinline__ void dflash2_cp_async16_ca(void* dst, const void* src) {
  const unsigned d = dflash2_smem_addr(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;\n" :: "r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void dflash2_cp_async4(void* dst, const void* src) {
  const unsigned d = dflash2_smem_addr(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void dflash2_cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
// The 128-byte line at p brought into L1 (CCTL.E.PF1): no register, no wait (x_prefetch).
__device__ __forceinline__ void dflash2_prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];\n" :: "l"(p));
}
template <int PENDING>
__device__ __forceinline__ void dflash2_cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" :: "n"(PENDING) : "memory");
}
// v, through a move the compiler cannot see through (not volatile: it schedules freely):
// ablate 5's loads of one step's x stay one load a step, as the whole kernel's, rather than
// one hoisted load for every step.
__device__ __forceinline__ int dflash2_opaque(int v) {
  int r;
  asm("mov.b32 %0, %1;\n" : "=r"(r) : "r"(v));
  return r;
}
"""
# sm_90 bulk copies (the TMA's 1-D form) into shared memory, completed on an mbarrier, and the
# mbarrier operations a producer warp and its consumer warps synchronise a ring with (PTX only;
# after CP_ASYNC_HEADER, whose dflash2_smem_addr it uses).
BULK_HEADER = r"""
__device__ __forceinline__ void dflash2_mbar_init(void* bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(dflash2_smem_addr(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void dflash2_mbar_fence_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void dflash2_mbar_expect_tx(void* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
               :: "r"(dflash2_smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void dflash2_mbar_arrive(void* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(dflash2_smem_addr(bar))
               : "memory");
}
// Spin until the barrier's phase with this parity has completed.
__device__ __forceinline__ void dflash2_mbar_wait(void* bar, unsigned parity) {
  asm volatile("{\n .reg .pred P1;\n WAIT:\n"
               " mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               " @!P1 bra WAIT;\n}\n" :: "r"(dflash2_smem_addr(bar)), "r"(parity) : "memory");
}
// BYTES (a multiple of 16, both addresses 16-byte aligned) from global to shared memory; the
// barrier's transaction count drops by BYTES when they have landed.
__device__ __forceinline__ void dflash2_bulk_g2s(void* dst, const void* src, unsigned bytes,
                                                 void* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
               "[%0], [%1], %2, [%3];\n"
               :: "r"(dflash2_smem_addr(dst)), "l"(src), "r"(bytes), "r"(dflash2_smem_addr(bar))
               : "memory");
}
"""


# Thread-block clusters (sm_90): the block's rank in its 1-D cluster, the cluster's barrier (every
# thread of every block of the cluster; its release and acquire order shared-memory writes
# before it against reads after it, across the cluster), and a float32 read from the shared
# memory of the cluster's block ``rank`` at the place ``p`` has in this block's (distributed
# shared memory).
CLUSTER_HEADER = r"""
__device__ __forceinline__ unsigned dflash2_cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void dflash2_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\t"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ float dflash2_cluster_load(const float* p, unsigned rank) {
  const unsigned local = static_cast<unsigned>(__cvta_generic_to_shared(p));
  unsigned remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
"""


# The mma variants' tile constants (constants: K, K_GROUPS, GS, M_ROWS, COL_TILES): K steps of
# 128, a warp's K group of them, quantization groups a row, activation tiles of 8 rows, a
# block's columns and its partial sums' rows.
MMA_TILE_CONSTANTS = r"""
  constexpr int WORDS = K / 8;
  constexpr int STEPS = K / 128;
  constexpr int GROUP_STEPS = STEPS / K_GROUPS;
  constexpr int ROW_GROUPS = K / GS;
  constexpr int M_TILES = (M_ROWS + 7) / 8;
  constexpr int COLS = 16 * COL_TILES;
  constexpr int PROWS = 8 * M_TILES;
"""

# A lane's place in its mma tile (g: the rows g and g + 8 of A, t: its k-slots) and block, the
# arrays as words, and the running float32 C tiles acc[M_TILES][COL_TILES][4], zeroed. The
# block's column tile is @TILE@ (``mma_lanes``): blockIdx.x, or where a cluster of blocks
# shares a tile, blockIdx.x over the cluster's size.
_MMA_LANES = r"""
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int n_base = (@TILE@) * COLS;
  const uint32_t* w32 = reinterpret_cast<const uint32_t*>(w);
  const uint16_t* s16 = reinterpret_cast<const uint16_t*>(scales);
  const uint16_t* b16 = reinterpret_cast<const uint16_t*>(biases);
  float acc[M_TILES][COL_TILES][4];
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
    for (int c = 0; c < COL_TILES; ++c)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mt][c][r] = 0.f;
"""


def mma_lanes(tile: str = "blockIdx.x") -> str:
    return _MMA_LANES.replace("@TILE@", tile)


MMA_LANES = mma_lanes()

# The register pipeline's batches, shared by the mma variants that keep their loads in
# registers: the body defines ``Batch`` (UNROLL K steps of loads, with X_EARLY their
# activations ``xa``), ``load(batch, first step)``, ``load_x(xa, step)`` and
# ``batch_math(batch, u, step, xa)``, the math of the batch's u-th step; GROUP_STEPS, UNROLL,
# PREFETCH and X_EARLY are its constants. ABLATE (a measurement of the kernel, never a tile a
# table may take: its output is wrong by design) takes a part out: 1, the math (each batch's
# weight words are folded into one register, so their loads stay: loads alone); 2, the weight
# loads (the body's ``load`` makes the words up from the step: the math alone, with the scales
# and activations still loaded); with mma_weights_a's register pipeline also 3, the activation
# loads (``load_x`` makes the words up: the whole but x's traffic) and 4, both (the math with
# the scales alone loaded). 0 compiles the kernel unchanged.
_BATCH_DRIVER = r"""
    [[maybe_unused]] uint32_t sink = 0;  // ABLATE == 1: the loaded weight words, folded
    auto compute = [&](const Batch& b, int s0) {
      if constexpr (ABLATE == 1) {
        const uint32_t* words = reinterpret_cast<const uint32_t*>(&b.wq);
#pragma unroll
        for (int i = 0; i < int(sizeof(b.wq) / 4); ++i) sink ^= words[i];
      } else {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          if constexpr (X_EARLY == 1) {
            batch_math(b, u, (@GROUP@) * GROUP_STEPS + s0 + u, b.xa[u]);
          } else {
            uint4 xa[M_TILES][4];
            load_x(xa, (@GROUP@) * GROUP_STEPS + s0 + u);
            batch_math(b, u, (@GROUP@) * GROUP_STEPS + s0 + u, xa);
          }
        }
      }
    };
    // PREFETCH: the next batch's loads go out before this batch's math (two batches of
    // registers), so a warp never waits on memory with nothing to do. The two batches take
    // turns (a, b, a, ...) rather than the next being copied into the current: the copy was
    // ~37 moves a K step at unroll 1 (bench/results/sass_static.md, 2026-12-04).
    Batch a;
    load(a, 0);
    if constexpr (PREFETCH) {
      Batch b;
      for (int s0 = 0; s0 < GROUP_STEPS; s0 += 2 * UNROLL) {
        if (s0 + UNROLL < GROUP_STEPS) load(b, s0 + UNROLL);
        compute(a, s0);
        if (s0 + UNROLL >= GROUP_STEPS) break;
        if (s0 + 2 * UNROLL < GROUP_STEPS) load(a, s0 + 2 * UNROLL);
        compute(b, s0 + UNROLL);
      }
    } else {
      for (int s0 = 0; s0 < GROUP_STEPS; s0 += UNROLL) {
        if (s0) load(a, s0);
        compute(a, s0);
      }
    }
    if constexpr (ABLATE == 1) {
      if (sink == 0x9E3779B9u) acc[0][0][0] = 1.f;  // keeps the fold, and so the loads, live
    }
"""


def batch_driver(group: str = "warp") -> str:
    """The driver with the warp's K group ``group``: its warp in the block, or with a cluster
    of blocks its place among the cluster's warps."""
    return _BATCH_DRIVER.replace("@GROUP@", group)


BATCH_DRIVER = batch_driver()

# ABLATE == 2: the weight words a load would bring, made up from the step and the lane's place
# (not constants, or the compiler would fold the math away).
ABLATE_WORD = "(uint32_t(step) * 0x9E3779B9u) ^ uint32_t(threadIdx.x * 8 + c * 2 + h)"

# The warps' float32 C tiles (acc[M_TILES][COL_TILES][4]: rows are output columns g and g + 8,
# columns activation rows 2t and 2t + 1) through shared memory ``partial[K_GROUPS][PROWS][COLS]``,
# the K groups' sums added in order and rounded once to T: stored (C_TILE_STORE), a barrier,
# added (C_TILE_ADD). A tile shared by a cluster of blocks puts the cluster's barrier between
# the two and adds across the cluster (mma_group_sums).
C_TILE_STORE = r"""  if (warp < K_GROUPS)  // with BULK, warp K_GROUPS is the producer: no sums of its own
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
    for (int c = 0; c < COL_TILES; ++c) {
      partial[warp][8 * mt + 2 * t][16 * c + g] = acc[mt][c][0];
      partial[warp][8 * mt + 2 * t + 1][16 * c + g] = acc[mt][c][1];
      partial[warp][8 * mt + 2 * t][16 * c + g + 8] = acc[mt][c][2];
      partial[warp][8 * mt + 2 * t + 1][16 * c + g + 8] = acc[mt][c][3];
    }
"""
_TILE_ADD = r"""  for (int e = threadIdx.x; e < @ROWS@ * @COLS@; e += blockDim.x) {
    const int m = e / @COLS@, col = e % @COLS@;
    float total = @PART@[0][m][col];
#pragma unroll
    for (int h = 1; h < K_GROUPS; ++h) total += @PART@[h][m][col];  // groups in order
    y[m * N + @BASE@ + col] = static_cast<T>(total);
  }
"""
# The same across a cluster's blocks: the tile's outputs shared among them, each summing every
# K group in order from every block's ``part[BLOCK_GROUPS][PROWS][cols]`` through distributed
# shared memory, block 0's groups first: the unclustered tile's float adds, bit for bit,
# whichever block finished first (after the cluster's barrier; another before leaving).
_CLUSTER_ADD = r"""    for (int e = rank * blockDim.x + threadIdx.x; e < M_ROWS * @COLS@; e += CLUSTER * blockDim.x) {
      const int m = e / @COLS@, col = e % @COLS@;
      float total = dflash2_cluster_load(&@PART@[0][m][col], 0);
#pragma unroll
      for (int h = 1; h < K_GROUPS; ++h)
        total += dflash2_cluster_load(&@PART@[h % BLOCK_GROUPS][m][col], h / BLOCK_GROUPS);
      y[m * N + @BASE@ + col] = static_cast<T>(total);
    }
"""


def _named(text: str, part: str, cols: str, base: str, rows: str = "M_ROWS") -> str:
    return (text.replace("@PART@", part).replace("@COLS@", cols).replace("@BASE@", base)
            .replace("@ROWS@", rows))


def tile_add(part: str = "partial", cols: str = "COLS", base: str = "n_base",
             rows: str = "M_ROWS") -> str:
    """The block's K groups' sums of ``part`` added in order into y's ``rows`` rows (a warp's
    M_ROWS but with row warps) and ``cols`` columns from ``base``."""
    return _named(_TILE_ADD, part, cols, base, rows)


def cluster_add(part: str = "partial", cols: str = "COLS", base: str = "n_base") -> str:
    """``tile_add`` across a cluster's blocks, in rank order (needs ``rank``, BLOCK_GROUPS)."""
    return _named(_CLUSTER_ADD, part, cols, base)


C_TILE_ADD = tile_add()
C_TILE_SUMS = C_TILE_STORE + "  __syncthreads();\n" + C_TILE_ADD


def launch_bounds_header(threads: int, min_blocks: int, cluster: int = 1) -> str:
    """Header text that gives the kernel ``__launch_bounds__(threads, min_blocks)`` and, with
    ``cluster`` > 1, ``__cluster_dims__(cluster, 1, 1)``.

    Why through the header: MLX writes the kernel's signature itself (``__global__ void
    custom_kernel_<name>...(``, after the header, with no place for attributes), and in CUDA's own
    headers ``__global__`` is a macro (``__location__(global)``). Redefined here, after MLX's
    includes and before the signature, it applies to this kernel alone. The bound makes ptxas cap
    registers so that ``min_blocks`` blocks of ``threads`` fit one SM; nothing else changes, so the
    arithmetic (and the output, bit for bit) is that of the unbounded kernel. A cluster size
    given at compile time is the one the launch takes: MLX launches a custom kernel without a
    cluster attribute of its own, so the kernel's is the only one."""
    attributes = []
    if min_blocks > 0:
        attributes.append(f"__launch_bounds__({int(threads)}, {int(min_blocks)})")
    if cluster > 1:
        attributes.append(f"__cluster_dims__({int(cluster)}, 1, 1)")
    if not attributes:
        return ""
    return (f"\n#undef __global__\n#define __global__ __location__(global) "
            f"{' '.join(attributes)}\n")
