// The SIMT executor: runs one kernel launch of a Metal source compiled for the CPU.
//
// Every thread of a threadgroup is a fiber with its own stack; threadgroups run one after the
// other, so `threadgroup` variables (static storage in the lowered source) are private to the
// threadgroup that runs. A fiber runs until it reaches a collective, a barrier or its end; when
// every fiber of the threadgroup is blocked, the executor resolves what can be resolved (SIMD
// collectives per call site, barriers when every live thread has arrived) and resumes them.
//
// Buffers live in guarded mappings: each buffer's data ends at a page boundary (rounded to 16
// bytes for vector loads), with 8 GiB of inaccessible address space on either side, so an
// out-of-bounds access faults and is reported with the buffer's name and the element index. The
// few bytes of slack before the start and after a 16-byte-rounded end are filled with 0xFF and
// checked after the launch: a write there is reported too.
//
// Not thread-safe by design: one launch at a time per process (the Python side holds a lock).

#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/mman.h>
#include <sys/time.h>
#include <ucontext.h>
#include <unistd.h>
#include <vector>

#include "metal_emu_hooks.h"

namespace {

constexpr unsigned long kGuard = 1ul << 33;  // 8 GiB of PROT_NONE on each side of a buffer
constexpr unsigned long kAlign = 16;
constexpr unsigned long kStack = 256 * 1024;
constexpr unsigned kSimd = 32;
constexpr unsigned kMaxBuffers = 64;

enum State { kRunnable, kWaitSimd, kWaitTgBarrier, kWaitSgBarrier, kDone };

struct Lane {
  ucontext_t ctx;
  void* sp = nullptr;  // saved stack pointer (x86-64 fast switch)
  char* stack_map = nullptr;
  State state = kRunnable;
  __emu_lane_info info{};
  const void* in = nullptr;
  void* out = nullptr;
  unsigned long size = 0;
  unsigned arg = 0;
  __emu_combine_fn combine = nullptr;
  const void* site = nullptr;
};

struct Buffer {
  char* region = nullptr;
  unsigned long region_len = 0;
  char* base = nullptr;
  unsigned long nbytes = 0;
  unsigned elem = 1;
  char name[64] = {0};
  char* pages = nullptr;  // first accessible byte
  unsigned long pages_len = 0;
};

Buffer g_buffers[kMaxBuffers];
unsigned g_nbuffers = 0;

std::vector<Lane> g_lanes;
Lane* g_cur = nullptr;
ucontext_t g_sched;
void (*g_entry)(void* const*) = nullptr;
void* const* g_args = nullptr;
sigjmp_buf g_jmp;
char* g_tg_lo = nullptr;  // the kernel library's threadgroup variables (section emu_tg)
char* g_tg_hi = nullptr;
char g_error[2048];
bool g_failed = false;
char* g_altstack = nullptr;

void set_error(const char* message) {
  if (g_failed) return;
  g_failed = true;
  snprintf(g_error, sizeof g_error, "%s", message);
}

void where(char* out, size_t n) {
  if (!g_cur) {
    snprintf(out, n, "outside any thread");
    return;
  }
  const auto& i = g_cur->info;
  snprintf(out, n, "thread %u of threadgroup (%u,%u,%u)", i.thread_index_in_threadgroup,
           i.threadgroup_position_in_grid[0], i.threadgroup_position_in_grid[1],
           i.threadgroup_position_in_grid[2]);
}

const __emu_lane_info* hook_lane() { return &g_cur->info; }

void lane_main();

// Switching threads. swapcontext saves the signal mask with a system call on every switch,
// which dominated kernels with a barrier per K step; on x86-64 a switch is the callee-saved
// registers and the FP control words, nothing more.
#if defined(__x86_64__)
extern "C" void emu_switch(void** save_sp, void* to_sp);
asm(R"(
.text
.globl emu_switch
.hidden emu_switch
.type emu_switch,@function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size emu_switch, .-emu_switch
)");
void* g_sched_sp = nullptr;

void fiber_entry() {
  lane_main();
  emu_switch(&g_cur->sp, g_sched_sp);  // never resumed
  __builtin_trap();
}

void fiber_init(Lane& l, char* stack_top) {
  auto* sp = reinterpret_cast<uint64_t*>(stack_top);
  *--sp = 0;                                          // keeps the ABI's call alignment
  *--sp = reinterpret_cast<uint64_t>(&fiber_entry);   // where the first switch returns to
  for (int r = 0; r < 6; ++r) *--sp = 0;              // rbp rbx r12 r13 r14 r15
  uint32_t ctl[2];
  asm volatile("stmxcsr %0" : "=m"(ctl[0]));
  asm volatile("fnstcw %0" : "=m"(ctl[1]));
  *--sp = static_cast<uint64_t>(ctl[0]) | (static_cast<uint64_t>(ctl[1] & 0xFFFF) << 32);
  l.sp = sp;
}
void to_lane(Lane& l) { emu_switch(&g_sched_sp, l.sp); }
void yield_to_scheduler() { emu_switch(&g_cur->sp, g_sched_sp); }
#else
void fiber_init(Lane& l, char* stack_top) {
  getcontext(&l.ctx);
  l.ctx.uc_stack.ss_sp = stack_top - kStack;
  l.ctx.uc_stack.ss_size = kStack;
  l.ctx.uc_link = &g_sched;
  makecontext(&l.ctx, lane_main, 0);
}
void to_lane(Lane& l) { swapcontext(&g_sched, &l.ctx); }
void yield_to_scheduler() { swapcontext(&g_cur->ctx, &g_sched); }
#endif

void hook_simd_collective(const void* in, void* out, unsigned long size, unsigned arg,
                          __emu_combine_fn combine, const void* site) {
  Lane* l = g_cur;
  l->in = in;
  l->out = out;
  l->size = size;
  l->arg = arg;
  l->combine = combine;
  l->site = site;
  l->state = kWaitSimd;
  yield_to_scheduler();
}

void hook_tg_barrier(const void* site) {
  g_cur->site = site;
  g_cur->state = kWaitTgBarrier;
  yield_to_scheduler();
}

void hook_sg_barrier(const void* site) {
  g_cur->site = site;
  g_cur->state = kWaitSgBarrier;
  yield_to_scheduler();
}

void hook_fail(const char* message) {
  char w[128];
  where(w, sizeof w);
  char buf[1024];
  snprintf(buf, sizeof buf, "%s (%s)", message, w);
  set_error(buf);
  siglongjmp(g_jmp, 1);
}

const Buffer* buffer_of(const char* addr) {
  for (unsigned i = 0; i < g_nbuffers; ++i) {
    const Buffer& b = g_buffers[i];
    if (addr >= b.region && addr < b.region + b.region_len) return &b;
  }
  return nullptr;
}

void on_signal(int sig, siginfo_t* info, void* uctx) {
  char w[128];
  where(w, sizeof w);
  char buf[1024];
  if (sig == SIGSEGV || sig == SIGBUS) {
    const char* addr = static_cast<const char*>(info->si_addr);
    const Buffer* b = buffer_of(addr);
    bool write = false;
#if defined(__x86_64__)
    write = (static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
#endif
    if (b) {
      long long off = addr - b->base;
      long long index = off >= 0 ? off / b->elem : -((-off + b->elem - 1) / b->elem);
      snprintf(buf, sizeof buf,
               "out-of-bounds %s of buffer '%s' at element index %lld (valid 0..%lld) by %s",
               write ? "write" : "read", b->name, index,
               static_cast<long long>(b->nbytes / b->elem) - 1, w);
    } else {
      snprintf(buf, sizeof buf, "invalid memory %s at address %p (no buffer) by %s",
               write ? "write" : "read", info->si_addr, w);
    }
  } else if (sig == SIGFPE) {
    snprintf(buf, sizeof buf, "arithmetic fault (integer division by zero?) by %s", w);
  } else if (sig == SIGTRAP || sig == SIGILL) {
    snprintf(buf, sizeof buf,
             "trap in %s: an index past the end of a thread or threadgroup array, or other "
             "undefined behaviour the compiler made a trap of (a loop with no way out)", w);
  } else if (sig == SIGPROF) {
    snprintf(buf, sizeof buf, "time limit exceeded (an endless loop?) in %s", w);
  } else {
    snprintf(buf, sizeof buf, "signal %d by %s", sig, w);
  }
  set_error(buf);
  siglongjmp(g_jmp, 1);
}

void lane_main() {
  g_entry(g_args);
  g_cur->state = kDone;
}

// One resolution step over a blocked threadgroup; false when nothing could move (a deadlock).
bool resolve(unsigned nthreads) {
  bool progress = false;
  const unsigned nsimd = (nthreads + kSimd - 1) / kSimd;
  for (unsigned s = 0; s < nsimd; ++s) {
    const unsigned lo = s * kSimd, hi = lo + kSimd < nthreads ? lo + kSimd : nthreads;
    bool all_sg_barrier = true, any_live = false;
    // Lanes of one SIMD group waiting at different collectives have diverged. On hardware the
    // branch with the collective runs under its mask while the others wait to reconverge, so
    // only the earliest call site in the source resolves now; the rest wait for the lanes that
    // will join them. (A collective reached by every lane after a divergent block that has one
    // of its own then runs with every lane, as on hardware.)
    const void* first_site = nullptr;
    for (unsigned i = lo; i < hi; ++i)
      if (g_lanes[i].state == kWaitSimd && (!first_site || g_lanes[i].site < first_site))
        first_site = g_lanes[i].site;
    for (unsigned i = lo; i < hi; ++i) {
      Lane& l = g_lanes[i];
      if (l.state == kDone) continue;
      any_live = true;
      if (l.state != kWaitSgBarrier) all_sg_barrier = false;
      if (l.state != kWaitSimd || l.site != first_site) continue;
      // Group every lane waiting at this site with this one.
      alignas(16) unsigned char in_all[kSimd * 64] = {0};
      alignas(16) unsigned char out_all[kSimd * 64] = {0};
      unsigned args[kSimd] = {0};
      unsigned active = 0;
      const void* site = l.site;
      const unsigned long size = l.size;
      const __emu_combine_fn fn = l.combine;
      if (size > 64) {
        set_error("a SIMD collective of more than 64 bytes per lane");
        return false;
      }
      for (unsigned j = i; j < hi; ++j) {
        Lane& m = g_lanes[j];
        if (m.state != kWaitSimd || m.site != site) continue;
        if (m.combine != fn || m.size != size) {
          set_error("lanes of one SIMD group reached different collectives at one site");
          return false;
        }
        memcpy(in_all + (j - lo) * size, m.in, size);
        args[j - lo] = m.arg;
        active |= 1u << (j - lo);
      }
      fn(in_all, out_all, args, active, size);
      for (unsigned j = i; j < hi; ++j) {
        Lane& m = g_lanes[j];
        if (!(active >> (j - lo) & 1u)) continue;
        memcpy(m.out, out_all + (j - lo) * size, size);
        m.state = kRunnable;
      }
      progress = true;
    }
    if (any_live && all_sg_barrier) {
      for (unsigned i = lo; i < hi; ++i)
        if (g_lanes[i].state == kWaitSgBarrier) g_lanes[i].state = kRunnable;
      progress = true;
    }
  }
  if (progress) return true;
  bool all_tg = true, any_live = false;
  for (unsigned i = 0; i < nthreads; ++i) {
    if (g_lanes[i].state == kDone) continue;
    any_live = true;
    if (g_lanes[i].state != kWaitTgBarrier) all_tg = false;
  }
  if (any_live && all_tg) {
    for (unsigned i = 0; i < nthreads; ++i)
      if (g_lanes[i].state == kWaitTgBarrier) g_lanes[i].state = kRunnable;
    return true;
  }
  return !any_live;
}

void run_threadgroup(const unsigned tg_pos[3], const unsigned tg[3], const unsigned grid[3],
                     const unsigned groups[3]) {
  // Threads of an edge threadgroup beyond the grid do not exist (dispatchThreads).
  unsigned ext[3];
  for (int d = 0; d < 3; ++d) {
    unsigned start = tg_pos[d] * tg[d];
    ext[d] = grid[d] - start < tg[d] ? grid[d] - start : tg[d];
  }
  const unsigned nthreads = ext[0] * ext[1] * ext[2];
  const unsigned tg_threads = tg[0] * tg[1] * tg[2];
  for (unsigned t = 0; t < nthreads; ++t) {
    Lane& l = g_lanes[t];
    l.state = kRunnable;
    unsigned lx = t % ext[0], ly = (t / ext[0]) % ext[1], lz = t / (ext[0] * ext[1]);
    __emu_lane_info& i = l.info;
    const unsigned lpos[3] = {lx, ly, lz};
    for (int d = 0; d < 3; ++d) {
      i.thread_position_in_threadgroup[d] = lpos[d];
      i.threadgroup_position_in_grid[d] = tg_pos[d];
      i.thread_position_in_grid[d] = tg_pos[d] * tg[d] + lpos[d];
      i.threads_per_grid[d] = grid[d];
      i.threads_per_threadgroup[d] = ext[d];
      i.threadgroups_per_grid[d] = groups[d];
    }
    i.thread_index_in_threadgroup = lx + ly * ext[0] + lz * ext[0] * ext[1];
    i.thread_index_in_simdgroup = i.thread_index_in_threadgroup % kSimd;
    i.simdgroup_index_in_threadgroup = i.thread_index_in_threadgroup / kSimd;
    i.simdgroups_per_threadgroup = (tg_threads + kSimd - 1) / kSimd;
    i.threads_per_simdgroup = kSimd;
    i.thread_index_in_quadgroup = i.thread_index_in_threadgroup % 4;
    i.quadgroup_index_in_threadgroup = i.thread_index_in_threadgroup / 4;
    i.quadgroups_per_threadgroup = (tg_threads + 3) / 4;
    fiber_init(l, l.stack_map + 4096 + kStack);  // one guard page below each stack
  }
  // Threadgroup memory starts as garbage on hardware: here it is NaN bytes, so a read before a
  // write (a missing barrier) shows in the output. Threads run highest index first, so a thread
  // that reads what a lower one writes without a barrier in between reads that garbage.
  if (g_tg_lo && g_tg_hi > g_tg_lo) memset(g_tg_lo, 0xFF, g_tg_hi - g_tg_lo);
  for (;;) {
    for (unsigned u = nthreads; u-- > 0;) {
      const unsigned t = u;
      Lane& l = g_lanes[t];
      if (l.state != kRunnable) continue;
      g_cur = &l;
      to_lane(l);
      g_cur = nullptr;
    }
    bool live = false;
    for (unsigned t = 0; t < nthreads; ++t) live |= g_lanes[t].state != kDone;
    if (!live) return;
    if (!resolve(nthreads)) {
      if (!g_failed) {
        unsigned at_tg = 0, at_sg = 0, done = 0;
        for (unsigned t = 0; t < nthreads; ++t) {
          at_tg += g_lanes[t].state == kWaitTgBarrier;
          at_sg += g_lanes[t].state == kWaitSgBarrier;
          done += g_lanes[t].state == kDone;
        }
        char buf[256];
        snprintf(buf, sizeof buf,
                 "deadlock in threadgroup (%u,%u,%u): %u threads at threadgroup_barrier, %u at "
                 "simdgroup_barrier, %u finished",
                 tg_pos[0], tg_pos[1], tg_pos[2], at_tg, at_sg, done);
        set_error(buf);
      }
      siglongjmp(g_jmp, 1);
    }
  }
}

struct SavedSignals {
  struct sigaction segv, bus, fpe, prof, ill, trap;
};

}  // namespace

extern "C" {

// A guarded buffer of `nbytes` (elements of `elem` bytes), named for error messages.
void* emu_buffer(unsigned long nbytes, unsigned elem, const char* name) {
  if (g_nbuffers >= kMaxBuffers) return nullptr;
  const unsigned long page = static_cast<unsigned long>(sysconf(_SC_PAGESIZE));
  const unsigned long rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
  const unsigned long pages_len = rounded == 0 ? page : (rounded + page - 1) / page * page;
  const unsigned long len = kGuard + pages_len + kGuard;
  void* region = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (region == MAP_FAILED) return nullptr;
  char* pages = static_cast<char*>(region) + kGuard;
  if (mprotect(pages, pages_len, PROT_READ | PROT_WRITE) != 0) {
    munmap(region, len);
    return nullptr;
  }
  Buffer& b = g_buffers[g_nbuffers++];
  b.region = static_cast<char*>(region);
  b.region_len = len;
  b.pages = pages;
  b.pages_len = pages_len;
  b.base = pages + pages_len - rounded;
  b.nbytes = nbytes;
  b.elem = elem ? elem : 1;
  snprintf(b.name, sizeof b.name, "%s", name);
  memset(pages, 0xFF, pages_len);
  return b.base;
}

void emu_release_buffers() {
  for (unsigned i = 0; i < g_nbuffers; ++i) munmap(g_buffers[i].region, g_buffers[i].region_len);
  g_nbuffers = 0;
}

// Run one launch. Returns 0, or 1 with a one-line reason in `error`.
int emu_launch(void (*entry)(void* const*), struct __emu_hooks_t* hooks, void* const* args,
               const unsigned grid[3], const unsigned tg[3], char* tg_lo, char* tg_hi,
               double cpu_seconds, char* error, unsigned long error_len) {
  g_tg_lo = tg_lo;
  g_tg_hi = tg_hi;
  hooks->lane = hook_lane;
  hooks->simd_collective = hook_simd_collective;
  hooks->threadgroup_barrier = hook_tg_barrier;
  hooks->simdgroup_barrier = hook_sg_barrier;
  hooks->fail = hook_fail;
  g_entry = entry;
  g_args = args;
  g_failed = false;
  g_error[0] = 0;
  const unsigned tg_threads = tg[0] * tg[1] * tg[2];
  if (tg_threads == 0 || tg_threads > 1024 || grid[0] * grid[1] * grid[2] == 0) {
    snprintf(error, error_len, "bad launch: grid (%u,%u,%u), threadgroup (%u,%u,%u)", grid[0],
             grid[1], grid[2], tg[0], tg[1], tg[2]);
    return 1;
  }
  g_lanes.assign(tg_threads, Lane());
  for (auto& l : g_lanes) {
    void* m = mmap(nullptr, kStack + 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    l.stack_map = static_cast<char*>(m);
    mprotect(l.stack_map, 4096, PROT_NONE);
  }
  if (!g_altstack) g_altstack = static_cast<char*>(malloc(64 * 1024));
  stack_t alt{}, old_alt{};
  alt.ss_sp = g_altstack;
  alt.ss_size = 64 * 1024;
  sigaltstack(&alt, &old_alt);
  struct sigaction sa {};
  sa.sa_sigaction = on_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  SavedSignals saved;
  sigaction(SIGSEGV, &sa, &saved.segv);
  sigaction(SIGBUS, &sa, &saved.bus);
  sigaction(SIGFPE, &sa, &saved.fpe);
  sigaction(SIGILL, &sa, &saved.ill);
  sigaction(SIGTRAP, &sa, &saved.trap);
  sigaction(SIGPROF, &sa, &saved.prof);
  struct itimerval timer {}, old_timer {};
  timer.it_value.tv_sec = static_cast<long>(cpu_seconds);
  timer.it_value.tv_usec = static_cast<long>((cpu_seconds - static_cast<long>(cpu_seconds)) * 1e6);
  setitimer(ITIMER_PROF, &timer, &old_timer);

  const unsigned groups[3] = {(grid[0] + tg[0] - 1) / tg[0], (grid[1] + tg[1] - 1) / tg[1],
                              (grid[2] + tg[2] - 1) / tg[2]};
  if (sigsetjmp(g_jmp, 1) == 0) {
    for (unsigned z = 0; z < groups[2]; ++z)
      for (unsigned y = 0; y < groups[1]; ++y)
        for (unsigned x = 0; x < groups[0]; ++x) {
          const unsigned pos[3] = {x, y, z};
          run_threadgroup(pos, tg, grid, groups);
        }
  }
  g_cur = nullptr;
  struct itimerval off {};
  setitimer(ITIMER_PROF, &off, nullptr);
  sigaction(SIGSEGV, &saved.segv, nullptr);
  sigaction(SIGBUS, &saved.bus, nullptr);
  sigaction(SIGFPE, &saved.fpe, nullptr);
  sigaction(SIGILL, &saved.ill, nullptr);
  sigaction(SIGTRAP, &saved.trap, nullptr);
  sigaction(SIGPROF, &saved.prof, nullptr);
  sigaltstack(&old_alt, nullptr);
  for (auto& l : g_lanes) munmap(l.stack_map, kStack + 4096);
  g_lanes.clear();

  // Writes into the slack around a buffer (the bytes no guard page can cover).
  for (unsigned i = 0; i < g_nbuffers && !g_failed; ++i) {
    const Buffer& b = g_buffers[i];
    for (char* p = b.pages; p < b.pages + b.pages_len; ++p) {
      if (p == b.base) p += b.nbytes;
      if (p >= b.pages + b.pages_len) break;
      if (static_cast<unsigned char>(*p) != 0xFF) {
        long long off = p - b.base;
        long long index = off >= 0 ? off / b.elem : -((-off + b.elem - 1) / b.elem);
        snprintf(g_error, sizeof g_error,
                 "out-of-bounds write of buffer '%s' at element index %lld (valid 0..%lld)",
                 b.name, index, static_cast<long long>(b.nbytes / b.elem) - 1);
        g_failed = true;
        break;
      }
    }
  }
  if (g_failed) {
    snprintf(error, error_len, "%s", g_error);
    return 1;
  }
  return 0;
}
}
