"""The warpgroup mma of the mma variants on sm_90a (``wgmma.mma_async`` with A from registers and
B from shared memory), its fences and waits.

Kept apart from ``_cuda_common`` because it is one lever's instruction set (mma_weights_a's
``wgmma`` tile key) with its own layout of B, which the CUDA emulator models from the same
offsets (kernels/cuda_emu/build.py: EMULATED_WGMMA).
"""


def _wgmma_asm(nw: int, ab: str) -> str:
    """One m64nNk16 wgmma with A from registers (a0-a3), B by descriptor ``desc`` and D in
    ``d``: scale-d is a predicate (set: D = A B + D), A and B scaled by 1, B not transposed."""
    nd = nw // 2
    regs = ",".join(f"%{i}" for i in range(nd))
    a = ",".join(f"%{nd + i}" for i in range(4))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nd))
    return (f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nd + 5}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.m64n{nw}k16.f32.{ab}.{ab} "\n'
            f'                 "{{{regs}}}, {{{a}}}, %{nd + 4}, p, 1, 1, 0;\\n}}\\n"\n'
            f'                 : {outs}\n'
            f'                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(one));')


# The warpgroup mma (sm_90a: MLX's NVRTC builds for it) with the weights' dequantized A fragment
# from registers and the activations, B, from shared memory: wgmma.mma_async.m64nNk16 (N = NW,
# 8 or 16 activation rows), the 4 warps of a warpgroup each giving 16 rows of A in
# mma.sync.m16n8k16's A layout and getting its 16 rows of D in that of C (one C tile per 8
# columns of B), so that M=16 is one instruction as M=8 is. B is K-major without swizzle: 8 x 16
# byte core matrices (8 activation rows, 8 K values each, rows 16 B apart), the two along K
# WG_LBO bytes apart, along N WG_SBO bytes apart (``wgmma_b_offset``). The descriptor: the
# shared address, LBO and SBO, each in 16-byte units (bits 0-13, 16-29, 32-45; swizzle 0).
WGMMA_HEADER = r"""
constexpr int WG_LBO = 128, WG_SBO = 256;
// The byte offset of B's element (k, n) in a k16 block of the layout above.
__device__ __forceinline__ int dflash2_wgmma_b_offset(int k, int n) {
  return (k >> 3) * WG_LBO + (n >> 3) * WG_SBO + (n & 7) * 16 + (k & 7) * 2;
}
template <bool BF16, int NW>
__device__ __forceinline__ void dflash2_wgmma(float (&d)[NW / 2], uint32_t a0, uint32_t a1,
                                              uint32_t a2, uint32_t a3, const void* b) {
  static_assert(NW == 8 || NW == 16, "B is 8 or 16 activation rows wide");
  const uint64_t addr = static_cast<uint64_t>(__cvta_generic_to_shared(b));
  const uint64_t desc = ((addr & 0x3FFFF) >> 4) | (uint64_t(WG_LBO >> 4) << 16) |
                        (uint64_t(WG_SBO >> 4) << 32);
  const uint32_t one = 1;
  if constexpr (NW == 8 && BF16) {
""" + _wgmma_asm(8, "bf16") + r"""
  } else if constexpr (NW == 8) {
""" + _wgmma_asm(8, "f16") + r"""
  } else if constexpr (BF16) {
""" + _wgmma_asm(16, "bf16") + r"""
  } else {
""" + _wgmma_asm(16, "f16") + r"""
  }
}
// (p: scale-d, a predicate, true: D = A B + D)
// Registers written by other instructions are ordered before the wgmma that reads them.
__device__ __forceinline__ void dflash2_wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void dflash2_wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int PENDING>
__device__ __forceinline__ void dflash2_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(PENDING) : "memory");
}
// The generic proxy's shared-memory writes (the staged activations) made visible to the async
// proxy, which wgmma reads B through.
__device__ __forceinline__ void dflash2_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
"""

# One K step of mma_weights_a as the warpgroup's (its body's ``wg_math``: the variant's
# ``dequant`` and ``odd_scales``, and wg_base, wg_slot, WG_SLOT, WG_KBLOCK and NW, are in scope).
WG_MATH = r"""  // WGMMA: the same step as one warpgroup's: the same A fragments, each pair of mma one wgmma
  // over all NW rows, B from the step's slot (wg_stage), D in ``wacc`` (acc[mt][c] after the
  // K loop: C tile mt is D's columns 8 mt on). A word's fragments are written, fenced, then read
  // by its wgmma. WGMMA 1: the step's wgmma are waited for before the next step's (its slot is
  // written again two steps on, behind the barrier of the step between); 2: all but this
  // step's (its slot is written again three steps on), and the last once after the K loop.
  [[maybe_unused]] float wacc[COL_TILES][NW / 2] = {};
  auto wg_math = [&](const uint4 (&wq)[COL_TILES][2], const uint32_t (&sc)[COL_TILES][2],
                     const uint32_t (&bi)[COL_TILES][2], int step) {
    if constexpr (WGMMA) {
      const unsigned char* slot = wg_base + wg_slot(step) * WG_SLOT;
      uint32_t so[COL_TILES][2];
      odd_scales(sc, so);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t a[COL_TILES][2][4];
#pragma unroll
        for (int c = 0; c < COL_TILES; ++c) dequant(wq[c], sc[c], bi[c], so[c], i, a[c]);
        dflash2_wgmma_fence();
#pragma unroll
        for (int c = 0; c < COL_TILES; ++c) {
          dflash2_wgmma<IS_BF16, NW>(wacc[c], a[c][0][0], a[c][1][0], a[c][0][1], a[c][1][1],
                                     slot + (2 * i) * WG_KBLOCK);
          dflash2_wgmma<IS_BF16, NW>(wacc[c], a[c][0][2], a[c][1][2], a[c][0][3], a[c][1][3],
                                     slot + (2 * i + 1) * WG_KBLOCK);
        }
      }
      dflash2_wgmma_commit();
      dflash2_wgmma_wait<WGMMA == 2 ? 1 : 0>();  // (2: this step's left in flight)
    }
  };
"""
