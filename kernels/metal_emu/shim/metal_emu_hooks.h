// The ABI between a kernel translation unit (MLX's source compiled against the shim) and the
// SIMT executor (runtime/runtime.cpp). Deliberately free of system headers: the kernel TU must see only
// what the Metal standard library offers, or a kernel using libc would compile here and not on
// a Mac. The kernel TU reaches the executor only through the table `__emu_hooks`, which the
// executor fills before a launch: no link-time dependency between the two libraries.
#pragma once

extern "C" {

// The position of the running thread, as Metal's thread-position attributes report it.
struct __emu_lane_info {
  unsigned thread_position_in_grid[3];
  unsigned thread_position_in_threadgroup[3];
  unsigned threadgroup_position_in_grid[3];
  unsigned threads_per_grid[3];
  unsigned threads_per_threadgroup[3];
  unsigned threadgroups_per_grid[3];
  unsigned thread_index_in_threadgroup;
  unsigned thread_index_in_simdgroup;
  unsigned simdgroup_index_in_threadgroup;
  unsigned simdgroups_per_threadgroup;
  unsigned threads_per_simdgroup;
  unsigned thread_index_in_quadgroup;
  unsigned quadgroup_index_in_threadgroup;
  unsigned quadgroups_per_threadgroup;
};

// A SIMD-group collective. Every participating lane passes `size` bytes at `in` and one
// 32-bit argument (a lane index, a delta, a mask); when every live lane of the SIMD group has
// reached a collective, `combine` runs once over the lanes that wait at the same call site
// (`site`: lanes in divergent branches form their own group, as the active mask does on
// hardware) and each lane's `out` receives its slot.
//   in_all/out_all: 32 slots of `size` bytes, indexed by lane; active: bit l set for lane l.
typedef void (*__emu_combine_fn)(const void* in_all, void* out_all, const unsigned* args,
                                 unsigned active, unsigned long size);

struct __emu_hooks_t {
  const struct __emu_lane_info* (*lane)(void);
  void (*simd_collective)(const void* in, void* out, unsigned long size, unsigned arg,
                          __emu_combine_fn combine, const void* site);
  // A threadgroup barrier releases when every live thread of the threadgroup has reached one;
  // a SIMD-group barrier when every live lane of the SIMD group has.
  void (*threadgroup_barrier)(const void* site);
  void (*simdgroup_barrier)(const void* site);
  void (*fail)(const char* message);
  // CUDA thread-block clusters (S consecutive threadgroups along x, run together). The rank is
  // the threadgroup's place in its cluster; a cluster barrier releases when every live thread
  // of the cluster has reached one; cluster_map gives the address at which threadgroup `rank`
  // of this cluster holds the threadgroup-memory byte at `shared_ptr` (valid while the calling
  // thread's threadgroup runs, i.e. in that thread). A launch without clusters is a cluster of 1.
  unsigned (*cluster_rank)(void);
  unsigned (*cluster_size)(void);
  void (*cluster_barrier)(const void* site);
  void* (*cluster_map)(const void* shared_ptr, unsigned rank);
  // sm_90 mbarriers and bulk copies (CUDA's TMA, 1-D form), for the CUDA emulator. An mbarrier
  // is 8 bytes of threadgroup memory whose state the executor keeps there (its own encoding):
  // init sets the arrival count; arrive counts one arrival and adds `tx` bytes to the phase's
  // expected transactions; the phase completes when every arrival and every byte is in. wait
  // blocks until the phase of `parity` has completed. bulk_copy moves `bytes` from global to
  // threadgroup memory and counts them on `bar`; when they land is the executor's choice (the
  // launch's `copies`): at once, or only when every thread is blocked.
  void (*mbar_init)(void* bar, unsigned count);
  void (*mbar_arrive)(void* bar, unsigned tx);
  void (*mbar_wait)(void* bar, unsigned parity);
  void (*bulk_copy)(void* dst, const void* src, unsigned bytes, void* bar);
};

extern struct __emu_hooks_t __emu_hooks;
}

// The call site of a collective or barrier, as a source position: every shim function that
// reaches the executor ends its parameter list with __EMU_SITE_PARAM and passes __EMU_SITE().
// The defaults are evaluated at the caller (like std::source_location), so lanes that call the
// same source-level collective wait together however the optimiser unswitches or unrolls loops,
// while lanes in divergent branches (different calls) form separate groups, as on hardware.
#define __EMU_SITE_PARAM \
  unsigned __emu_line = __builtin_LINE(), unsigned __emu_col = __builtin_COLUMN()
#define __EMU_SITE() \
  ((const void*)(((unsigned long)__emu_line << 16) | (unsigned long)__emu_col))
