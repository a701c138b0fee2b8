"""One launch's translation unit for the SIMT executor, and its shared library.

The body is the variant's ``CUDA_SOURCE`` as it is; its header is the variant's ``CUDA_HEADER``
with each inline-PTX block swapped for C++ of the same semantics (``EMULATED``). A header with
inline PTX left over is refused with one line: the executor cannot run what it cannot compile.
"""

from __future__ import annotations

from pathlib import Path

from kernels import cuda_offline
from kernels.metal_emu import glue, toolchain
from kernels.variants import VARIANTS
from kernels.variants import _cuda_common as common
from kernels.variants import _dequant_cuda as dequant
from kernels.variants import _wgmma_cuda as wgmma

SHIM = Path(__file__).resolve().parent / "shim"
C_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half"}

# mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}: each lane's fragments in PTX's layout (g =
# lane / 4, t = lane % 4; A row-major 16 x 16, B column-major 16 x 8, C 16 x 8):
#   a0 A[g][2t, 2t+1], a1 A[g+8][2t, 2t+1], a2 A[g][2t+8, 2t+9], a3 A[g+8][2t+8, 2t+9];
#   b0 B[2t, 2t+1][g], b1 B[2t+8, 2t+9][g]; c0 C[g][2t], c1 C[g][2t+1], c2 C[g+8][2t],
#   c3 C[g+8][2t+1].
# The products of two half-precision values are exact in double, and so is their sum with c
# here; rounded once to float32 (the tensor core's own order of adds is not modelled).
EMULATED_MMA = r"""
struct __emu_mma_frag { uint32_t a[4], b[2]; float c[4]; };
template <bool BF16>
inline double __emu_half(uint32_t word, int hi) {
  const uint16_t h = static_cast<uint16_t>(hi ? word >> 16 : word);
  if constexpr (BF16) return __builtin_bit_cast(float, static_cast<uint32_t>(h) << 16);
  else return static_cast<float>(__builtin_bit_cast(_Float16, h));
}
// Lane l's A fragment (a0-a3, the layout above) into the 16 x 16 A tile: mma.sync's, and each
// warp's share of a wgmma's (EMULATED_WGMMA).
template <bool BF16>
inline void __emu_a_fragment(const uint32_t (&f)[4], int l, double (&a)[16][16]) {
  const int g = l >> 2, t = l & 3;
  for (int h = 0; h < 2; ++h) {
    a[g][2 * t + h] = __emu_half<BF16>(f[0], h);
    a[g + 8][2 * t + h] = __emu_half<BF16>(f[1], h);
    a[g][2 * t + 8 + h] = __emu_half<BF16>(f[2], h);
    a[g + 8][2 * t + 8 + h] = __emu_half<BF16>(f[3], h);
  }
}
template <bool BF16>
void __emu_mma_combine(const void* in_all, void* out_all, const unsigned*, unsigned active,
                       unsigned long) {
  const __emu_mma_frag* in = static_cast<const __emu_mma_frag*>(in_all);
  __emu_mma_frag* out = static_cast<__emu_mma_frag*>(out_all);
  double a[16][16], b[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    __emu_a_fragment<BF16>(in[l].a, l, a);
    for (int h = 0; h < 2; ++h) {
      b[2 * t + h][g] = __emu_half<BF16>(in[l].b[0], h);
      b[2 * t + 8 + h][g] = __emu_half<BF16>(in[l].b[1], h);
    }
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    const int rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      double s = in[l].c[i];
      for (int k = 0; k < 16; ++k) s += a[rows[i]][k] * b[k][cols[i]];
      // mma.sync needs the whole warp: a partial one leaves NaN, which every check reports
      out[l].c[i] = active == 0xFFFFFFFFu ? static_cast<float>(s) : __builtin_nanf("");
    }
  }
}
template <bool BF16>
__device__ __forceinline__ void dflash2_mma(float& c0, float& c1, float& c2, float& c3,
                                            uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                            uint32_t b0, uint32_t b1, __EMU_SITE_PARAM) {
  __emu_mma_frag f{{a0, a1, a2, a3}, {b0, b1}, {c0, c1, c2, c3}}, r;
  __emu_hooks.simd_collective(&f, &r, sizeof f, 0, __emu_mma_combine<BF16>, __EMU_SITE());
  c0 = r.c[0]; c1 = r.c[1]; c2 = r.c[2]; c3 = r.c[3];
}
"""
# wgmma.mma_async.m64nNk16 with A from registers, per warp: warp w of the warpgroup gives A's rows
# 16 w to + 16 (mma.sync's A fragment) and gets those rows of D (C's layout, a C tile per 8
# columns), so each warp's share is its own 16 x 16 by 16 x N product, run as the warp's
# collective with the same one rounding as EMULATED_MMA. B is read from the block's shared
# memory through the layout its descriptor names (dflash2_wgmma_b_offset), at the wgmma: the
# emulator runs it at once, so it does not model its asynchrony (a wait too early, or B written
# before the wait): the device's check against the mma.sync twin does. The fences and the
# group's commit and wait change no value here.
EMULATED_WGMMA = wgmma.WGMMA_HEADER[:wgmma.WGMMA_HEADER.index("template <bool BF16, int NW>")] + r"""
template <int NW> struct __emu_wgmma_frag { uint32_t a[4]; float d[NW / 2]; const unsigned char* b; };
template <bool BF16, int NW>
void __emu_wgmma_combine(const void* in_all, void* out_all, const unsigned*, unsigned active,
                         unsigned long) {
  const __emu_wgmma_frag<NW>* in = static_cast<const __emu_wgmma_frag<NW>*>(in_all);
  __emu_wgmma_frag<NW>* out = static_cast<__emu_wgmma_frag<NW>*>(out_all);
  double a[16][16], b[16][NW];
  bool same = true;
  for (int l = 0; l < 32; ++l) {
    same = same && in[l].b == in[0].b;
    __emu_a_fragment<BF16>(in[l].a, l, a);
  }
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < NW; ++n) {
      uint16_t h;
      __builtin_memcpy(&h, in[0].b + dflash2_wgmma_b_offset(k, n), 2);
      b[k][n] = __emu_half<BF16>(h, 0);
    }
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < NW / 2; ++i) {
      const int row = (i & 2) ? g + 8 : g, col = 8 * (i >> 2) + 2 * t + (i & 1);
      double s = in[l].d[i];
      for (int k = 0; k < 16; ++k) s += a[row][k] * b[k][col];
      // the whole warp, one B: else NaN, which every check reports
      out[l].d[i] = active == 0xFFFFFFFFu && same ? static_cast<float>(s) : __builtin_nanf("");
    }
  }
}
template <bool BF16, int NW>
__device__ __forceinline__ void dflash2_wgmma(float (&d)[NW / 2], uint32_t a0, uint32_t a1,
                                              uint32_t a2, uint32_t a3, const void* b,
                                              __EMU_SITE_PARAM) {
  const unsigned char* p = static_cast<const unsigned char*>(b);
  char *lo, *hi;
  __emu_tg_bounds(&lo, &hi);
  if (reinterpret_cast<unsigned long>(p) % 16 || p < reinterpret_cast<unsigned char*>(lo) ||
      p + NW * 32 > reinterpret_cast<unsigned char*>(hi))
    __emu_hooks.fail("a wgmma's B outside the block's shared memory, or not 16-byte aligned");
  __emu_wgmma_frag<NW> f{{a0, a1, a2, a3}, {}, p}, r;
  for (int i = 0; i < NW / 2; ++i) f.d[i] = d[i];
  __emu_hooks.simd_collective(&f, &r, sizeof f, 0, __emu_wgmma_combine<BF16, NW>, __EMU_SITE());
  for (int i = 0; i < NW / 2; ++i) d[i] = r.d[i];
}
__device__ __forceinline__ void dflash2_wgmma_fence() {}
__device__ __forceinline__ void dflash2_wgmma_commit() {}
template <int PENDING>
__device__ __forceinline__ void dflash2_wgmma_wait() {}
__device__ __forceinline__ void dflash2_fence_proxy_async() {}
"""
_LOP3 = ('asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(v) : "r"(bits), "n"(MASK), '
         '"r"(magic));')
# cp.async as a plain copy: a lane reads back only what it copied itself (the ring's contract,
# _mma_weights_a_cuda.py), so a copy that lands at once is one that landed by the wait. A
# prefetch changes no value: read, so that one outside its buffer is refused as a load would be.
EMULATED_CP_ASYNC = r"""
template <int L2_BYTES>
__device__ __forceinline__ void dflash2_cp_async16(void* dst, const void* src) {
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
}
__device__ __forceinline__ void dflash2_cp_async16_ca(void* dst, const void* src) {
  *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
}
__device__ __forceinline__ void dflash2_cp_async4(void* dst, const void* src) {
  *static_cast<uint32_t*>(dst) = *static_cast<const uint32_t*>(src);
}
__device__ __forceinline__ void dflash2_cp_async_commit() {}
__device__ __forceinline__ void dflash2_prefetch_l1(const void* p) {
  (void)*static_cast<const volatile unsigned char*>(p);  // in bounds, or the guard page says so
}
template <int PENDING>
__device__ __forceinline__ void dflash2_cp_async_wait() {}
__device__ __forceinline__ int dflash2_opaque(int v) { return v; }
"""
# The bulk pipeline's mbarriers and bulk copies on the executor's (metal_emu_hooks.h), which
# keeps each barrier's state in its 8 bytes and checks every copy's size, alignment and source
# buffer; here each copy's destination and barrier must lie in the launch's dynamic shared
# memory (``__emu_dsmem``: the size the launch asks for, not the section around it).
EMULATED_BULK = r"""
__device__ __forceinline__ void __emu_in_dsmem(const void* p, unsigned bytes, const char* what) {
  const unsigned char* c = static_cast<const unsigned char*>(p);
  if (c < __emu_dsmem || c + bytes > __emu_dsmem + sizeof __emu_dsmem) __emu_hooks.fail(what);
}
__device__ __forceinline__ void dflash2_mbar_init(void* bar, unsigned count) {
  __emu_in_dsmem(bar, 8, "an mbarrier outside the launch's dynamic shared memory");
  __emu_hooks.mbar_init(bar, count);
}
__device__ __forceinline__ void dflash2_mbar_fence_init() {}
__device__ __forceinline__ void dflash2_mbar_expect_tx(void* bar, unsigned bytes) {
  __emu_hooks.mbar_arrive(bar, bytes);
}
__device__ __forceinline__ void dflash2_mbar_arrive(void* bar) { __emu_hooks.mbar_arrive(bar, 0); }
__device__ __forceinline__ void dflash2_mbar_wait(void* bar, unsigned parity) {
  __emu_hooks.mbar_wait(bar, parity);
}
__device__ __forceinline__ void dflash2_bulk_g2s(void* dst, const void* src, unsigned bytes,
                                                 void* bar) {
  __emu_in_dsmem(dst, bytes, "a bulk copy past the end of the launch's dynamic shared memory");
  __emu_hooks.bulk_copy(dst, src, bytes, bar);
}
"""
# Thread-block clusters on the executor's clusters (kernels/metal_emu/runtime): the rank, the
# cluster's barrier, and a read of another block's shared memory at the place p has in this one.
EMULATED_CLUSTER = r"""
__device__ __forceinline__ unsigned dflash2_cluster_rank() { return __emu_cluster_rank(); }
__device__ __forceinline__ void dflash2_cluster_sync(__EMU_SITE_PARAM) {
  __emu_cluster_sync(__emu_line, __emu_col);
}
__device__ __forceinline__ float dflash2_cluster_load(const float* p, unsigned rank) {
  return *__emu_cluster_map(p, rank);
}
"""
# The one line of a body the emulator changes: mma_weights_a's dynamic shared memory, which
# only the bulk pipeline uses (C++ has no array of a size given at launch), becomes an array of
# the launch's size (``translation_unit``), in threadgroup memory as the body's other arrays.
DYNAMIC_SMEM = ("extern __shared__ __align__(128) unsigned char dsmem[];",
                "unsigned char* const dsmem = __emu_dsmem;  // (emulator: the launch's size)")
# (the source's helpers, with their inline PTX) -> the same functions in C++
EMULATED = {
    common.CUDA_HEADER: "",  # the split-K helpers: no mma variant calls them
    common.MMA_SYNC_HEADER: EMULATED_MMA,
    dequant.NIBBLE_HEADER: dequant.NIBBLE_HEADER.replace(_LOP3, "v = (bits & MASK) | magic;"),
    common.CP_ASYNC_HEADER: EMULATED_CP_ASYNC,
    common.BULK_HEADER: EMULATED_BULK,
    common.CLUSTER_HEADER: EMULATED_CLUSTER,
    wgmma.WGMMA_HEADER: EMULATED_WGMMA,
}


class NotEmulated(ValueError):
    """A source or launch the executor cannot run (one line)."""


def header(name: str) -> str:
    text = VARIANTS[name].CUDA_HEADER
    for source, emulated in EMULATED.items():
        text = text.replace(source, emulated)
    if "asm" in text:
        raise NotEmulated(f"{name}: its CUDA header keeps inline PTX the emulator has no C++ for")
    return text


def translation_unit(name: str, dtype: str, template: dict, dynamic_smem: int = 0) -> str:
    """The shim, the header, the body with its constants, and the executor's entry;
    ``dynamic_smem`` bytes of dynamic shared memory (the launch config's)."""
    t = C_TYPES[dtype]
    consts = "\n".join(cuda_offline.constant_lines(template))
    return "\n".join([
        '#include "cuda_emu.h"',
        'extern "C" {',
        "struct __emu_hooks_t __emu_hooks;",
        glue.TRUNCSFBF2,
        "extern char __start_emu_tg[] __attribute__((weak));",
        "extern char __stop_emu_tg[] __attribute__((weak));",
        "void __emu_tg_bounds(char** lo, char** hi) { *lo = __start_emu_tg; *hi = __stop_emu_tg; }",
        "}",
        f"__shared__ __align__(128) unsigned char __emu_dsmem[{max(int(dynamic_smem), 16)}];",
        header(name),
        (f"static void dflash2_{name}(const {t}* x, const uint32_t* w, const {t}* scales, "
         f"const {t}* biases, {t}* y) {{"),
        f"  using T = {t};",
        consts,
        VARIANTS[name].CUDA_SOURCE.replace(*DYNAMIC_SMEM),
        "}",
        'extern "C" void __emu_entry(void* const* b) {',
        (f"  dflash2_{name}(static_cast<const {t}*>(b[0]), static_cast<const uint32_t*>(b[1]), "
         f"static_cast<const {t}*>(b[2]), static_cast<const {t}*>(b[3]), "
         f"static_cast<{t}*>(b[4]));"),
        "}",
    ]) + "\n"


def library(name: str, dtype: str, template: dict, dynamic_smem: int = 0) -> Path:
    """The launch's shared library, built once per translation unit (cached by content)."""
    return toolchain.build_library(translation_unit(name, dtype, template, dynamic_smem),
                                   f"cuda-{name}", (SHIM,))
