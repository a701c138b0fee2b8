// The SIMT executor: runs one kernel launch of a Metal source compiled for the CPU.
//
// Every thread of a threadgroup is a fiber with its own stack; threadgroups run one after the
// other, so `threadgroup` variables (static storage in the lowered source) are private to the
// threadgroup that runs. A fiber runs until it reaches a collective, a barrier or its end; when
// every fiber of the threadgroup is blocked, the executor resolves what can be resolved (SIMD
// collectives per call site, barriers when every live thread has arrived) and resumes them.
//
// A CUDA thread-block cluster (S consecutive threadgroups along x) runs as one: the fibers of
// its S threadgroups live together, so a cluster barrier can wait for all of them and a thread
// can reach another threadgroup's memory (cluster_map). The kernel's threadgroup variables have
// one address each, so the section holding them is live for one threadgroup at a time: each
// threadgroup has a backing store, and the section is swapped whenever the next fiber to run
// (or the next SIMD group to resolve) belongs to another threadgroup than the live one. Only
// the live threadgroup's store is stale; cluster_map gives the live section for it.
//
// Buffers are guarded mappings (buffers.cpp): an access out of bounds faults, and the fault is
// reported with the buffer's name and the element index.
//
// CUDA's mbarriers and 1-D bulk copies (sm_90's TMA) for the CUDA emulator: an mbarrier's state
// lives in its 8 bytes of threadgroup memory (so it goes with the threadgroup's memory), a
// waiting thread blocks until its phase completes, and a bulk copy lands either at once or
// (`copies_late`) only when every thread of the cluster is blocked: the latest a kernel can
// observe, so a read of a slot before the wait on its barrier reads what was there before.
// One SIMD group of each threadgroup may lag (`lag`): it runs only when nothing else can, so
// the others run ahead of it as far as the kernel's barriers let them.
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

#include "buffers.h"
#include "metal_emu_hooks.h"

namespace {

constexpr unsigned long kStack = 256 * 1024;
constexpr unsigned kSimd = 32;
constexpr unsigned kMaxCluster = 16;  // CUDA's largest (non-portable) cluster

enum State {
  kRunnable, kWaitSimd, kWaitTgBarrier, kWaitSgBarrier, kWaitClusterBarrier, kWaitMbar, kDone
};

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
  unsigned rank = 0;  // its threadgroup's rank in the cluster
  char* mbar = nullptr;  // kWaitMbar: the mbarrier, and the parity (arg) of the awaited phase
};

// A threadgroup of the running cluster: its lanes are g_lanes[first, first + nthreads).
struct Group {
  unsigned first = 0;
  unsigned nthreads = 0;
  unsigned finished = 0;  // its lanes that have returned: at nthreads its memory is gone
  std::vector<char> store;  // its threadgroup memory while another threadgroup's is live
};

std::vector<Lane> g_lanes;
Lane* g_cur = nullptr;
ucontext_t g_sched;
void (*g_entry)(void* const*) = nullptr;
void* const* g_args = nullptr;
sigjmp_buf g_jmp;
char* g_tg_lo = nullptr;  // the kernel library's threadgroup variables (section emu_tg)
char* g_tg_hi = nullptr;
std::vector<Group> g_groups;  // the running cluster, by rank
unsigned g_cluster = 1;
unsigned g_live = 0;  // the rank whose threadgroup memory is in the section
char g_error[2048];
bool g_failed = false;
char* g_altstack = nullptr;

// A bulk copy issued and not yet landed (copies_late): its threadgroup's rank and the
// threadgroup-memory addresses of its destination and mbarrier.
struct Copy {
  unsigned rank;
  char* dst;
  const char* src;
  unsigned bytes;
  char* bar;
};
std::vector<Copy> g_copies;
bool g_copies_late = false;
// The SIMD group of each threadgroup that lags (-1: none): its lanes run only when every other
// lane is blocked and nothing can be resolved, so the others run ahead of it as far as the
// kernel lets them (a slot refilled before this group has read it is then read refilled).
int g_lag = -1;

bool lags(const Lane& l) {
  return g_lag >= 0 && l.info.simdgroup_index_in_threadgroup == static_cast<unsigned>(g_lag);
}

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

// Makes the section hold threadgroup `rank`'s memory. Nothing to do in a cluster of one.
void make_live(unsigned rank) {
  if (rank == g_live) return;
  const unsigned long n = g_tg_hi - g_tg_lo;
  if (n) {
    memcpy(g_groups[g_live].store.data(), g_tg_lo, n);
    memcpy(g_tg_lo, g_groups[rank].store.data(), n);
  }
  g_live = rank;
}

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

unsigned hook_cluster_rank() { return g_cur->rank; }
unsigned hook_cluster_size() { return g_cluster; }

void hook_cluster_barrier(const void* site) {
  g_cur->site = site;
  g_cur->state = kWaitClusterBarrier;
  yield_to_scheduler();
}

// The running lane's threadgroup is the live one, and every other threadgroup's store is
// current (saved when the section was last swapped away from it): an address into a store
// stays right for as long as this lane's threadgroup runs, which is whenever this lane does.
void* hook_cluster_map(const void* shared_ptr, unsigned rank) {
  char* p = const_cast<char*>(static_cast<const char*>(shared_ptr));
  char buf[160];
  if (rank >= g_cluster) {
    snprintf(buf, sizeof buf, "cluster_map to rank %u in a cluster of %u threadgroups", rank,
             g_cluster);
    hook_fail(buf);
  }
  // On hardware a block's shared memory goes with its last thread: a cluster must meet at a
  // barrier after its last read of another block's memory (a kernel that does not can read a
  // block that has exited).
  if (g_groups[rank].finished == g_groups[rank].nthreads) {
    snprintf(buf, sizeof buf,
             "cluster_map to rank %u, a threadgroup whose threads have all finished", rank);
    hook_fail(buf);
  }
  if (p < g_tg_lo || p >= g_tg_hi) {
    snprintf(buf, sizeof buf, "cluster_map of %p, an address outside threadgroup memory", p);
    hook_fail(buf);
  }
  return rank == g_live ? p : g_groups[rank].store.data() + (p - g_tg_lo);
}

// An mbarrier's 8 bytes: word 0 holds the arrivals still to come in this phase (bits 0-10),
// the count mbarrier.init gave (11-21), a mark that init wrote them (22-30) and the phase's
// parity (31); word 1 the phase's transaction bytes still to land, signed (a copy may land
// before the arrival that expects its bytes, as on hardware).
constexpr uint32_t kMbarCount = 0x7FFu;
constexpr uint32_t kMbarMarkMask = 0x1FFu << 22;
constexpr uint32_t kMbarMark = 0x1A5u << 22;
constexpr int32_t kMbarTxMax = (1 << 20) - 1;  // PTX's range of the transaction count

uint32_t* mbar_words(void* bar, const char* op) {
  char* p = static_cast<char*>(bar);
  char buf[200];
  if (p < g_tg_lo || p + 8 > g_tg_hi || reinterpret_cast<uintptr_t>(p) % 8) {
    snprintf(buf, sizeof buf, "mbarrier.%s at %p: not 8 aligned bytes of threadgroup memory",
             op, bar);
    hook_fail(buf);
  }
  uint32_t* w = reinterpret_cast<uint32_t*>(p);
  if (op[0] != 'i' && (w[0] & kMbarMarkMask) != kMbarMark) {
    snprintf(buf, sizeof buf,
             "mbarrier.%s at threadgroup offset %ld before its mbarrier.init", op,
             static_cast<long>(p - g_tg_lo));
    hook_fail(buf);
  }
  return w;
}

// The phase completes when its arrivals and its bytes are all in: the parity flips and the
// arrivals start again from the count.
void mbar_complete(uint32_t* w) {
  if ((w[0] & kMbarCount) == 0 && static_cast<int32_t>(w[1]) == 0)
    w[0] = ((w[0] ^ 0x80000000u) & ~kMbarCount) | ((w[0] >> 11) & kMbarCount);
}

void mbar_add_tx(uint32_t* w, long long tx) {
  const long long t = static_cast<int32_t>(w[1]) + tx;
  if (t > kMbarTxMax || t < -kMbarTxMax) {
    char buf[160];
    snprintf(buf, sizeof buf, "an mbarrier's transaction count left PTX's range (%lld bytes)", t);
    hook_fail(buf);
  }
  w[1] = static_cast<uint32_t>(static_cast<int32_t>(t));
}

void hook_mbar_init(void* bar, unsigned count) {
  uint32_t* w = mbar_words(bar, "init");
  if (count == 0 || count > kMbarCount) {
    char buf[120];
    snprintf(buf, sizeof buf, "mbarrier.init with a count of %u (the executor takes 1..%u)",
             count, kMbarCount);
    hook_fail(buf);
  }
  w[0] = kMbarMark | (count << 11) | count;
  w[1] = 0;
}

void hook_mbar_arrive(void* bar, unsigned tx) {
  uint32_t* w = mbar_words(bar, tx ? "arrive.expect_tx" : "arrive");
  if ((w[0] & kMbarCount) == 0) {  // its arrivals are in, its bytes not yet
    hook_fail("an mbarrier arrived on more times in one phase than its count");
  }
  mbar_add_tx(w, tx);
  w[0] -= 1;
  mbar_complete(w);
}

bool mbar_done(const char* bar, unsigned parity) {
  return (reinterpret_cast<const uint32_t*>(bar)[0] >> 31) != (parity & 1u);
}

void hook_mbar_wait(void* bar, unsigned parity) {
  mbar_words(bar, "try_wait.parity");
  if (mbar_done(static_cast<char*>(bar), parity)) return;
  g_cur->mbar = static_cast<char*>(bar);
  g_cur->arg = parity;
  g_cur->state = kWaitMbar;
  yield_to_scheduler();
}

void land(const Copy& c) {
  make_live(c.rank);
  memcpy(c.dst, c.src, c.bytes);
  uint32_t* w = reinterpret_cast<uint32_t*>(c.bar);
  mbar_add_tx(w, -static_cast<long long>(c.bytes));
  mbar_complete(w);
}

void hook_bulk_copy(void* dst, const void* src, unsigned bytes, void* bar) {
  char buf[240];
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (bytes == 0 || bytes % 16 || reinterpret_cast<uintptr_t>(d) % 16 ||
      reinterpret_cast<uintptr_t>(s) % 16) {
    snprintf(buf, sizeof buf,
             "a bulk copy of %u bytes from %p to %p: the size and both addresses must be "
             "multiples of 16", bytes, src, dst);
    hook_fail(buf);
  }
  if (d < g_tg_lo || d + bytes > g_tg_hi) {
    snprintf(buf, sizeof buf,
             "a bulk copy of %u bytes to threadgroup offset %ld, outside threadgroup memory "
             "(%ld bytes)", bytes, static_cast<long>(d - g_tg_lo),
             static_cast<long>(g_tg_hi - g_tg_lo));
    hook_fail(buf);
  }
  const emu::Buffer* b = emu::buffer_of(s);
  if (!b || s < b->base || s + bytes > b->base + b->nbytes) {
    if (b) {
      snprintf(buf, sizeof buf,
               "out-of-bounds bulk copy from buffer '%s': elements %ld..%ld (valid 0..%ld)",
               b->name, static_cast<long>((s - b->base) / b->elem),
               static_cast<long>((s + bytes - b->base) / b->elem) - 1,
               static_cast<long>(b->nbytes / b->elem) - 1);
    } else {
      snprintf(buf, sizeof buf, "a bulk copy from %p, an address in no buffer", src);
    }
    hook_fail(buf);
  }
  mbar_words(bar, "complete_tx");
  const Copy c{g_cur->rank, d, s, bytes, static_cast<char*>(bar)};
  if (g_copies_late) {
    g_copies.push_back(c);
  } else {
    land(c);
  }
}

void on_signal(int sig, siginfo_t* info, void* uctx) {
  char w[128];
  where(w, sizeof w);
  char buf[1024];
  if (sig == SIGSEGV || sig == SIGBUS) {
    const char* addr = static_cast<const char*>(info->si_addr);
    const emu::Buffer* b = emu::buffer_of(addr);
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
  ++g_groups[g_cur->rank].finished;
}

// One resolution step over one threadgroup's SIMD groups: collectives and SIMD-group barriers.
bool resolve_simd(Lane* lanes, unsigned nthreads) {
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
    // A lane waiting on an mbarrier, or still runnable (the lagging group's), has diverged too
    // and will come to the collective the others wait at: the compiler reconverges the warp
    // before an .aligned one (mma.sync), so they wait for it. resolve() lets every lane whose
    // barrier has completed run first; if the lane never comes, the deadlock is reported.
    const void* first_site = nullptr;
    bool to_come = false;
    for (unsigned i = lo; i < hi; ++i) {
      to_come |= lanes[i].state == kRunnable || lanes[i].state == kWaitMbar;
      if (lanes[i].state == kWaitSimd && (!first_site || lanes[i].site < first_site))
        first_site = lanes[i].site;
    }
    if (to_come) continue;
    for (unsigned i = lo; i < hi; ++i) {
      Lane& l = lanes[i];
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
        Lane& m = lanes[j];
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
        Lane& m = lanes[j];
        if (!(active >> (j - lo) & 1u)) continue;
        memcpy(m.out, out_all + (j - lo) * size, size);
        m.state = kRunnable;
      }
      progress = true;
    }
    if (any_live && all_sg_barrier) {
      for (unsigned i = lo; i < hi; ++i)
        if (lanes[i].state == kWaitSgBarrier) lanes[i].state = kRunnable;
      progress = true;
    }
  }
  return progress;
}

// Releases the lanes waiting at `barrier` when every live one of [lo, hi) waits there.
bool release_barrier(unsigned lo, unsigned hi, State barrier) {
  bool all = true, any_live = false;
  for (unsigned i = lo; i < hi; ++i) {
    if (g_lanes[i].state == kDone) continue;
    any_live = true;
    if (g_lanes[i].state != barrier) all = false;
  }
  if (!any_live || !all) return false;
  for (unsigned i = lo; i < hi; ++i)
    if (g_lanes[i].state == barrier) g_lanes[i].state = kRunnable;
  return true;
}

// Lanes waiting on an mbarrier whose phase has completed run again.
bool release_mbar_waits() {
  bool progress = false;
  for (const Group& g : g_groups)
    for (unsigned t = g.first; t < g.first + g.nthreads; ++t) {
      Lane& l = g_lanes[t];
      if (l.state != kWaitMbar) continue;
      make_live(l.rank);
      if (mbar_done(l.mbar, l.arg)) {
        l.state = kRunnable;
        progress = true;
      }
    }
  return progress;
}

// One resolution step over a blocked cluster; false when nothing could move (a deadlock).
bool resolve() {
  // lanes whose barrier has completed run before any collective resolves: their warp's mma
  // waits for them (mma.sync is .aligned), so resolving it now would leave them out
  if (release_mbar_waits()) return true;
  bool progress = false;
  for (unsigned r = 0; r < g_cluster; ++r) {
    const Group& g = g_groups[r];
    // a collective's in and out may be threadgroup memory: the lanes' own must be live
    for (unsigned t = g.first; t < g.first + g.nthreads; ++t)
      if (g_lanes[t].state == kWaitSimd) {
        make_live(r);
        break;
      }
    progress |= resolve_simd(&g_lanes[g.first], g.nthreads);
    if (g_failed) return false;
  }
  if (progress) return true;
  for (const Group& g : g_groups)
    progress |= release_barrier(g.first, g.first + g.nthreads, kWaitTgBarrier);
  if (progress) return true;
  // The threadgroups' lanes are contiguous: the cluster is [0, last one's end).
  const unsigned end = g_groups.back().first + g_groups.back().nthreads;
  if (release_barrier(0, end, kWaitClusterBarrier)) return true;
  // copies_late: a copy lands only when nothing else can move (the lagging group included),
  // one at a time: first the oldest whose mbarrier a thread waits on, else the oldest. Copies
  // are not ordered among themselves on hardware either, so one that no thread waits for (a
  // missing wait) lands last.
  bool runnable = false;
  for (unsigned i = 0; i < end; ++i) runnable |= g_lanes[i].state == kRunnable;
  while (!runnable && !g_copies.empty()) {
    size_t pick = 0;
    for (size_t c = 0; c < g_copies.size() && !pick; ++c)
      for (unsigned i = 0; i < end; ++i)
        if (g_lanes[i].state == kWaitMbar && g_lanes[i].rank == g_copies[c].rank &&
            g_lanes[i].mbar == g_copies[c].bar) {
          pick = c + 1;
          break;
        }
    pick = pick ? pick - 1 : 0;
    const Copy c = g_copies[pick];
    g_copies.erase(g_copies.begin() + static_cast<long>(pick));
    land(c);
    if (release_mbar_waits()) return true;
  }
  for (unsigned i = 0; i < end; ++i)
    if (g_lanes[i].state != kDone) return false;
  return true;
}

void deadlock() {
  unsigned at_tg = 0, at_sg = 0, at_cluster = 0, at_mbar = 0, done = 0;
  for (const Group& g : g_groups)
    for (unsigned t = g.first; t < g.first + g.nthreads; ++t) {
      at_mbar += g_lanes[t].state == kWaitMbar;
      at_tg += g_lanes[t].state == kWaitTgBarrier;
      at_sg += g_lanes[t].state == kWaitSgBarrier;
      at_cluster += g_lanes[t].state == kWaitClusterBarrier;
      done += g_lanes[t].state == kDone;
    }
  const unsigned* p = g_lanes[0].info.threadgroup_position_in_grid;  // rank 0's
  char where[96], cluster[48] = "";
  if (g_cluster == 1)
    snprintf(where, sizeof where, "threadgroup (%u,%u,%u)", p[0], p[1], p[2]);
  else
    snprintf(where, sizeof where, "the cluster of threadgroups (%u..%u,%u,%u)", p[0],
             p[0] + g_cluster - 1, p[1], p[2]);
  if (g_cluster > 1 || at_cluster)
    snprintf(cluster, sizeof cluster, ", %u at a cluster barrier", at_cluster);
  char mbar[48] = "";
  if (at_mbar) snprintf(mbar, sizeof mbar, ", %u waiting on an mbarrier", at_mbar);
  char buf[360];
  snprintf(buf, sizeof buf,
           "deadlock in %s: %u threads at threadgroup_barrier, %u at simdgroup_barrier%s%s, %u "
           "finished",
           where, at_tg, at_sg, cluster, mbar, done);
  set_error(buf);
}

// Runs the cluster whose rank-0 threadgroup is at `first`: its g_cluster threadgroups along x.
// `reverse` starts each round of fibers at the highest rank instead of rank 0.
void run_cluster(const unsigned first[3], const unsigned tg[3], const unsigned grid[3],
                 const unsigned groups[3], bool reverse) {
  const unsigned tg_threads = tg[0] * tg[1] * tg[2];
  for (unsigned r = 0; r < g_cluster; ++r) {
    Group& g = g_groups[r];
    const unsigned tg_pos[3] = {first[0] + r, first[1], first[2]};
    // Threads of an edge threadgroup beyond the grid do not exist (dispatchThreads).
    unsigned ext[3];
    for (int d = 0; d < 3; ++d) {
      unsigned start = tg_pos[d] * tg[d];
      ext[d] = grid[d] - start < tg[d] ? grid[d] - start : tg[d];
    }
    g.first = r * tg_threads;
    g.nthreads = ext[0] * ext[1] * ext[2];
    g.finished = 0;
    for (unsigned t = 0; t < g.nthreads; ++t) {
      Lane& l = g_lanes[g.first + t];
      l.state = kRunnable;
      l.rank = r;
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
  }
  // Threadgroup memory starts as garbage on hardware: here it is NaN bytes, so a read before a
  // write (a missing barrier) shows in the output. Threads run highest index first, so a thread
  // that reads what a lower one writes without a barrier in between reads that garbage.
  if (g_tg_lo && g_tg_hi > g_tg_lo) memset(g_tg_lo, 0xFF, g_tg_hi - g_tg_lo);
  if (g_cluster > 1)
    for (Group& g : g_groups) g.store.assign(g_tg_hi - g_tg_lo, static_cast<char>(0xFF));
  g_live = reverse ? g_cluster - 1 : 0;
  // One pass: every runnable lane runs until it blocks; `lagging` passes run the lagging SIMD
  // group's lanes only, the others every other lane's. True when a lane ran.
  auto pass = [&](bool lagging) {
    bool ran = false;
    for (unsigned k = 0; k < g_cluster; ++k) {
      const unsigned r = reverse ? g_cluster - 1 - k : k;
      const Group& g = g_groups[r];
      for (unsigned u = g.nthreads; u-- > 0;) {
        Lane& l = g_lanes[g.first + u];
        if (l.state != kRunnable || lags(l) != lagging) continue;
        make_live(r);
        g_cur = &l;
        to_lane(l);
        g_cur = nullptr;
        ran = true;
      }
    }
    return ran;
  };
  for (;;) {
    pass(false);
    bool live = false;
    for (const Group& g : g_groups)
      for (unsigned t = g.first; t < g.first + g.nthreads; ++t) live |= g_lanes[t].state != kDone;
    if (!live) {
      // on hardware a block must not exit with bulk copies into its memory in flight
      if (!g_copies.empty()) {
        char buf[200];
        snprintf(buf, sizeof buf,
                 "%zu bulk copies (the first of %u bytes) were still in flight when their "
                 "threadgroup's threads had all finished: no thread waited on them",
                 g_copies.size(), g_copies.front().bytes);
        g_copies.clear();
        set_error(buf);
        siglongjmp(g_jmp, 1);
      }
      return;
    }
    if (resolve()) continue;
    // the lagging SIMD group runs only when nothing else can
    if (!g_failed && g_lag >= 0 && pass(true)) continue;
    if (!g_failed) deadlock();
    siglongjmp(g_jmp, 1);
  }
}

struct SavedSignals {
  struct sigaction segv, bus, fpe, prof, ill, trap;
};

}  // namespace

extern "C" {

// Run one launch. Returns 0, or 1 with a one-line reason in `error`. `cluster` threadgroups
// along x run together as a cluster (1: each alone); `reverse` runs the grid's last cluster
// first, and each cluster's threadgroups from the highest rank; `lag` (>= 0) is a SIMD group of
// each threadgroup that runs only when nothing else can; `copies_late` lands each bulk copy
// only when every thread of the cluster is blocked, instead of as it is issued.
int emu_launch(void (*entry)(void* const*), struct __emu_hooks_t* hooks, void* const* args,
               const unsigned grid[3], const unsigned tg[3], unsigned cluster, int reverse,
               int lag, int copies_late, char* tg_lo, char* tg_hi, double cpu_seconds,
               char* error, unsigned long error_len) {
  g_tg_lo = tg_lo;
  g_tg_hi = tg_hi;
  hooks->lane = hook_lane;
  hooks->simd_collective = hook_simd_collective;
  hooks->threadgroup_barrier = hook_tg_barrier;
  hooks->simdgroup_barrier = hook_sg_barrier;
  hooks->fail = hook_fail;
  hooks->cluster_rank = hook_cluster_rank;
  hooks->cluster_size = hook_cluster_size;
  hooks->cluster_barrier = hook_cluster_barrier;
  hooks->cluster_map = hook_cluster_map;
  hooks->mbar_init = hook_mbar_init;
  hooks->mbar_arrive = hook_mbar_arrive;
  hooks->mbar_wait = hook_mbar_wait;
  hooks->bulk_copy = hook_bulk_copy;
  g_copies.clear();
  g_copies_late = copies_late != 0;
  g_lag = lag;
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
  const unsigned groups[3] = {(grid[0] + tg[0] - 1) / tg[0], (grid[1] + tg[1] - 1) / tg[1],
                              (grid[2] + tg[2] - 1) / tg[2]};
  if (cluster == 0 || cluster > kMaxCluster || groups[0] % cluster != 0) {
    snprintf(error, error_len,
             "bad launch: a cluster of %u threadgroups (1..%u) for %u threadgroups along x, "
             "which must be a multiple of it",
             cluster, kMaxCluster, groups[0]);
    return 1;
  }
  g_cluster = cluster;
  g_groups.assign(cluster, Group());
  g_lanes.assign(cluster * tg_threads, Lane());
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

  if (sigsetjmp(g_jmp, 1) == 0) {
    const unsigned long across = groups[0] / cluster;  // clusters along x
    const unsigned long count = across * groups[1] * groups[2];
    for (unsigned long k = 0; k < count; ++k) {
      const unsigned long c = reverse ? count - 1 - k : k;  // x fastest, then y, then z
      const unsigned first[3] = {static_cast<unsigned>(c % across * cluster),
                                 static_cast<unsigned>(c / across % groups[1]),
                                 static_cast<unsigned>(c / (across * groups[1]))};
      run_cluster(first, tg, grid, groups, reverse != 0);
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
  g_groups.clear();

  if (!g_failed && emu::slack_written(g_error, sizeof g_error)) g_failed = true;
  if (g_failed) {
    snprintf(error, error_len, "%s", g_error);
    return 1;
  }
  return 0;
}
}
