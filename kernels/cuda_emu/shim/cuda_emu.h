// The CUDA built-ins the mma variants' sources use, for the SIMT executor of the Metal emulator
// (kernels/metal_emu/runtime/runtime.cpp): freestanding, as the Metal shim is, so that a source
// using anything else fails to compile here instead of passing. A CUDA block is a threadgroup,
// a warp a SIMD group of 32 lanes; `__shared__` arrays live in the section the executor keeps
// per threadgroup. The inline-PTX helpers of the sources' headers (mma.sync, lop3) are not
// here: kernels/cuda_emu/build.py puts C++ of the same semantics in their place.
#pragma once

#include "metal_emu_hooks.h"

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef int int32_t;

#define __device__
#define __global__
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __shared__ static __attribute__((section("emu_tg")))
#define __launch_bounds__(...)

struct uint4 { unsigned x, y, z, w; };
struct uint2 { unsigned x, y; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }

struct __emu_dim3 { unsigned x, y, z; };
inline __emu_dim3 __emu_thread_idx() {
  const unsigned* p = __emu_hooks.lane()->thread_position_in_threadgroup;
  return {p[0], p[1], p[2]};
}
inline __emu_dim3 __emu_block_idx() {
  const unsigned* p = __emu_hooks.lane()->threadgroup_position_in_grid;
  return {p[0], p[1], p[2]};
}
inline __emu_dim3 __emu_block_dim() {
  const unsigned* p = __emu_hooks.lane()->threads_per_threadgroup;
  return {p[0], p[1], p[2]};
}
#define threadIdx (__emu_thread_idx())
#define blockIdx (__emu_block_idx())
#define blockDim (__emu_block_dim())

inline void __syncthreads(__EMU_SITE_PARAM) { __emu_hooks.threadgroup_barrier(__EMU_SITE()); }
inline void __syncwarp(unsigned = 0xffffffffu, __EMU_SITE_PARAM) {
  __emu_hooks.simdgroup_barrier(__EMU_SITE());
}

// Thread-block clusters along x (the executor runs a cluster's blocks together): the block's
// rank in its cluster (%cluster_ctarank), the cluster barrier (barrier.cluster.arrive.release +
// wait.acquire) and distributed shared memory: where block `rank` of the cluster holds the
// `__shared__` object at p in this one (mapa.shared::cluster; loads and stores through it are
// ld/st.shared::cluster).
inline unsigned __emu_cluster_rank() { return __emu_hooks.cluster_rank(); }
inline unsigned __emu_cluster_size() { return __emu_hooks.cluster_size(); }
inline void __emu_cluster_sync(__EMU_SITE_PARAM) { __emu_hooks.cluster_barrier(__EMU_SITE()); }
template <typename T>
inline T* __emu_cluster_map(T* p, unsigned rank) {
  return static_cast<T*>(__emu_hooks.cluster_map(p, rank));
}

// A streaming load is a load (the cache hint has no meaning here).
template <typename T>
inline T __ldcs(const T* p) { return *p; }

// PRMT: byte i of the result is byte (s >> 4i) & 7 of the 8 bytes {y, x} (x the low four).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = (static_cast<unsigned long long>(y) << 32) | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<unsigned>((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFFu) << (8 * i);
  return r;
}
inline float __uint_as_float(unsigned u) { return __builtin_bit_cast(float, u); }
inline unsigned __float_as_uint(float f) { return __builtin_bit_cast(unsigned, f); }
inline float fmaf(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// Half types: storage and the conversions to and from float, rounded to nearest even.
struct __half {
  _Float16 v;
  __half() = default;
  __half(float f) : v(static_cast<_Float16>(f)) {}
  operator float() const { return static_cast<float>(v); }
};
struct __nv_bfloat16 {
  __bf16 v;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : v(static_cast<__bf16>(f)) {}
  operator float() const { return __builtin_bit_cast(float, static_cast<unsigned>(__builtin_bit_cast(unsigned short, v)) << 16); }
};
struct __half2 { __half x, y; };
struct __nv_bfloat162 { __nv_bfloat16 x, y; };
inline float __low2float(__half2 h) { return static_cast<float>(h.x); }
inline float __high2float(__half2 h) { return static_cast<float>(h.y); }
inline __half2 __floats2half2_rn(float lo, float hi) { return {__half(lo), __half(hi)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return {__nv_bfloat16(lo), __nv_bfloat16(hi)};
}

// A double rounded once to a half type: round-to-odd to float32 (24 bits: two more than either
// half type needs), then to nearest even, which together round the double once.
inline float __emu_to_odd(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d) {
    unsigned u = __builtin_bit_cast(unsigned, f);
    const double af = f < 0 ? -static_cast<double>(f) : static_cast<double>(f);
    if (af > (d < 0 ? -d : d)) u -= 1;  // rounded away from zero: one step back
    f = __builtin_bit_cast(float, u | 1u);
  }
  return f;
}
// __hfma2 / __hmul2 / __hsub2: each half of a pair computed exactly (products and sums of two
// half-type values in double; the terms here lie within double's 53 bits) and rounded once.
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return {__half(__emu_to_odd(static_cast<double>(float(a.x)) * float(b.x) + float(c.x))),
          __half(__emu_to_odd(static_cast<double>(float(a.y)) * float(b.y) + float(c.y)))};
}
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
  return {__nv_bfloat16(__emu_to_odd(static_cast<double>(float(a.x)) * float(b.x) + float(c.x))),
          __nv_bfloat16(__emu_to_odd(static_cast<double>(float(a.y)) * float(b.y) + float(c.y)))};
}
inline __half2 __hmul2(__half2 a, __half2 b) {
  return {__half(__emu_to_odd(static_cast<double>(float(a.x)) * float(b.x))),
          __half(__emu_to_odd(static_cast<double>(float(a.y)) * float(b.y)))};
}
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) {
  return {__nv_bfloat16(__emu_to_odd(static_cast<double>(float(a.x)) * float(b.x))),
          __nv_bfloat16(__emu_to_odd(static_cast<double>(float(a.y)) * float(b.y)))};
}
inline __half2 __hsub2(__half2 a, __half2 b) {
  return {__half(__emu_to_odd(static_cast<double>(float(a.x)) - float(b.x))),
          __half(__emu_to_odd(static_cast<double>(float(a.y)) - float(b.y)))};
}
inline __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) {
  return {__nv_bfloat16(__emu_to_odd(static_cast<double>(float(a.x)) - float(b.x))),
          __nv_bfloat16(__emu_to_odd(static_cast<double>(float(a.y)) - float(b.y)))};
}
