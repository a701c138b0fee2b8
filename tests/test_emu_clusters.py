"""Thread-block clusters on the SIMT executor (kernels/metal_emu/runtime): the real compiler and
executor running small CUDA-style kernels through kernels/cuda_emu/shim/cuda_emu.h.

A cluster of S blocks along x runs as one: each block keeps its own ``__shared__`` memory, a
cluster barrier waits for every block of the cluster, and a block reads another's shared memory
through ``__emu_cluster_map``. ``order="reverse"`` runs the last cluster (and a cluster's last
block) first, so a kernel whose output must not depend on which block comes first can be run
both ways and compared bit for bit.
"""

from __future__ import annotations

import contextlib
import shutil

import numpy as np
import pytest

from kernels.cuda_emu import build
from kernels.metal_emu import executor, glue, toolchain
from kernels.metal_emu.executor import EmulatorError

THREADS = 64
_SIG = glue.Signature("k", "k", (glue.Param("", "x", 0, "buffer"),
                                 glue.Param("", "y", 1, "buffer")))

# A warp-wide sum through the executor's SIMD collective: per 32-lane SIMD group of one block.
_WARP_SUM = r"""
static void warp_sum_combine(const void* in_all, void* out_all, const unsigned*, unsigned active,
                             unsigned long) {
  const float* in = static_cast<const float*>(in_all);
  float* out = static_cast<float*>(out_all);
  float s = 0;
  for (int l = 0; l < 32; ++l) if (active >> l & 1u) s += in[l];
  for (int l = 0; l < 32; ++l) out[l] = s;
}
inline float warp_sum(float v, __EMU_SITE_PARAM) {
  float r;
  __emu_hooks.simd_collective(&v, &r, sizeof v, 0, warp_sum_combine, __EMU_SITE());
  return r;
}
"""


def _library(name: str, body: str) -> str:
    """A translation unit as kernels/cuda_emu/build.py assembles one: the shim, the hook table
    and the section bounds, the kernel ``k(x, y)`` with ``body``, and the executor's entry."""
    tu = f"""#include "cuda_emu.h"
extern "C" {{
struct __emu_hooks_t __emu_hooks;
{glue.TRUNCSFBF2}
extern char __start_emu_tg[] __attribute__((weak));
extern char __stop_emu_tg[] __attribute__((weak));
void __emu_tg_bounds(char** lo, char** hi) {{ *lo = __start_emu_tg; *hi = __stop_emu_tg; }}
}}
{_WARP_SUM}
static void k(const float* x, float* y) {{
{body}
}}
extern "C" void __emu_entry(void* const* b) {{
  k(static_cast<const float*>(b[0]), static_cast<float*>(b[1]));
}}
"""
    return str(toolchain.build_library(tu, f"cluster-test-{name}", (build.SHIM,)))


def _run(lib: str, blocks: int, out: int, **kw) -> np.ndarray:
    x = np.arange(blocks * THREADS, dtype=np.float32)
    return executor.launch("probe", _SIG, lib, {"x": executor.Buffer("x", x)},
                           {"y": ((out,), np.float32)}, (blocks * THREADS, 1, 1),
                           (THREADS, 1, 1), **kw)["y"]


# Each block fills its shared array with values of its own, then (after the cluster barrier)
# reads its partner's array in the opposite order; the second barrier keeps every block's
# memory alive until its partner has read it, as on hardware. Rank 1 writes a barrier later
# than rank 0: a cluster barrier that released rank 0 alone would let it read NaN bytes.
EXCHANGE = r"""
  __shared__ float buf[64];
  const unsigned t = threadIdx.x, b = blockIdx.x, rank = __emu_cluster_rank();
  for (unsigned i = 0; i < rank; ++i) __syncthreads();
  buf[t] = 1000.0f * b + x[b * 64 + t];
  __emu_cluster_sync();
  const float* other = __emu_cluster_map(buf, rank ^ 1u);
  y[b * 64 + t] = other[63 - t];
  __emu_cluster_sync();
  if (t == 0) y[4 * 64 + b] = 10.0f * rank + __emu_cluster_size();
"""


def _exchange_expected(blocks: int) -> np.ndarray:
    y = np.empty(blocks * THREADS + blocks, np.float32)
    for b in range(blocks):
        p = b ^ 1
        y[b * THREADS:(b + 1) * THREADS] = 1000.0 * p + p * THREADS + np.arange(THREADS)[::-1]
        y[blocks * THREADS + b] = 10.0 * (b % 2) + 2
    return y


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_a_block_reads_its_partners_shared_memory_through_the_cluster_map(order):
    lib = _library("exchange", EXCHANGE)
    y = _run(lib, 4, 4 * THREADS + 4, cluster=2, order=order)
    np.testing.assert_array_equal(y, _exchange_expected(4))


def test_each_block_of_a_cluster_has_its_own_shared_memory():
    """Block 1's writes are not at the same address in block 0: only through the map. Both
    blocks write before the cluster barrier and read after it, each its own array. An address
    mapped to the block's own rank, taken before the writes, sees them at once: it is the live
    memory, not a copy."""
    lib = _library("own", r"""
  __shared__ float buf[64];
  const unsigned t = threadIdx.x, b = blockIdx.x;
  const float* self = __emu_cluster_map(buf, __emu_cluster_rank());
  buf[t] = 1000.0f * b + t;
  __emu_cluster_sync();
  const float mine = buf[(t + 1) % 64];
  __syncthreads();
  buf[t] = mine + 0.5f;
  y[(4 + b) * 64 + t] = self[t];
  __syncthreads();
  y[b * 64 + t] = self[(t + 1) % 64];
  __emu_cluster_sync();
""")
    t = np.arange(THREADS)
    expected = np.concatenate([1000.0 * b + (t + 2) % THREADS + 0.5 for b in range(4)]
                              + [1000.0 * b + (t + 1) % THREADS + 0.5 for b in range(4)])
    for order in ("forward", "reverse"):
        np.testing.assert_array_equal(_run(lib, 4, 8 * THREADS, cluster=2, order=order),
                                      expected.astype(np.float32))


def test_threadgroup_barriers_and_warps_stay_per_block_in_a_cluster():
    """__syncthreads releases per block (block 1 passes two, block 0 one: no deadlock) and a
    SIMD collective sums its own warp of its own block; then a cluster of 4 exchanges sums."""
    lib = _library("per_block", r"""
  __shared__ float sums[2];
  const unsigned t = threadIdx.x, b = blockIdx.x, rank = __emu_cluster_rank();
  for (unsigned i = 0; i <= rank % 2; ++i) __syncthreads();
  const float s = warp_sum(x[b * 64 + t]);
  if (t % 32 == 0) sums[t / 32] = s;
  __emu_cluster_sync();
  const float* next = __emu_cluster_map(sums, (rank + 1) % __emu_cluster_size());
  y[b * 64 + t] = next[t % 2];
  __emu_cluster_sync();
""")
    x = np.arange(8 * THREADS, dtype=np.float64).reshape(8, 2, 32).sum(axis=2)  # [block, warp]
    nxt = [(b // 4) * 4 + (b % 4 + 1) % 4 for b in range(8)]
    expected = np.concatenate([np.tile(x[n], THREADS // 2) for n in nxt]).astype(np.float32)
    for order in ("forward", "reverse"):
        np.testing.assert_array_equal(_run(lib, 8, 8 * THREADS, cluster=4, order=order),
                                      expected)


def test_a_collectives_operands_in_shared_memory_are_its_own_blocks():
    """A SIMD collective resolves after its block has stopped running, maybe while another
    block of the cluster holds the shared memory: it must read and write its own block's."""
    lib = _library("smem_collective", r"""
  __shared__ float in[64], out[64];
  const unsigned t = threadIdx.x, b = blockIdx.x;
  in[t] = x[b * 64 + t];
  __emu_hooks.simd_collective(&in[t], &out[t], sizeof(float), 0, warp_sum_combine,
                              __EMU_SITE());
  __syncthreads();
  y[b * 64 + t] = out[t];
  __emu_cluster_sync();
""".replace("__EMU_SITE()", "(const void*)1"))
    x = np.arange(4 * THREADS, dtype=np.float64).reshape(4, 2, 32).sum(axis=2)
    expected = np.repeat(x, 32, axis=1).reshape(-1).astype(np.float32)
    for order in ("forward", "reverse"):
        np.testing.assert_array_equal(_run(lib, 4, 4 * THREADS, cluster=2, order=order),
                                      expected)


def test_reverse_runs_the_last_cluster_first_and_a_clusters_highest_rank_first():
    # The executor runs one fiber at a time, so a plain counter logs the order blocks start in.
    lib = _library("order", r"""
  float* log = const_cast<float*>(x);
  if (threadIdx.x == 0) {
    const unsigned n = static_cast<unsigned>(log[0]);
    log[0] = static_cast<float>(n + 1);
    y[n] = static_cast<float>(blockIdx.x);
  }
  __emu_cluster_sync();
""")

    def starts(**kw):
        x = np.zeros(4 * THREADS, np.float32)
        return executor.launch("probe", _SIG, lib, {"x": executor.Buffer("x", x)},
                               {"y": ((4,), np.float32)}, (4 * THREADS, 1, 1),
                               (THREADS, 1, 1), **kw)["y"].tolist()
    assert starts() == [0, 1, 2, 3]
    assert starts(cluster=2) == [0, 1, 2, 3]
    assert starts(cluster=2, order="reverse") == [3, 2, 1, 0]
    assert starts(order="reverse") == [3, 2, 1, 0]


# A kernel of today: shared memory, a barrier, a read of another thread's element.
PLAIN = r"""
  __shared__ float buf[64];
  const unsigned t = threadIdx.x, b = blockIdx.x;
  buf[t] = x[b * 64 + t] * 2.0f;
  __syncthreads();
  y[b * 64 + t] = buf[63 - t] + b;
  if (t == 0) y[3 * 64 + b] = 10.0f * __emu_cluster_rank() + __emu_cluster_size();
"""


def test_a_cluster_of_one_is_the_launch_without_clusters():
    lib = _library("plain", PLAIN)
    x = np.arange(3 * THREADS, dtype=np.float32).reshape(3, THREADS)
    expected = np.concatenate([(x[:, ::-1] * 2 + np.arange(3)[:, None]).reshape(-1),
                               [1.0, 1.0, 1.0]]).astype(np.float32)
    y0 = _run(lib, 3, 3 * THREADS + 3)
    np.testing.assert_array_equal(y0, expected)
    for order in ("forward", "reverse"):
        np.testing.assert_array_equal(_run(lib, 3, 3 * THREADS + 3, cluster=1, order=order), y0)


@pytest.mark.parametrize(("cluster", "order"), [(1, "forward"), (2, "forward"), (2, "reverse")])
def test_a_missing_barrier_still_reads_garbage(cluster, order):
    # Every block's shared memory starts as NaN bytes, and its highest thread runs first: a
    # thread reads what a lower one has not written yet. (The barrier at the end makes the
    # executor switch between a cluster's blocks after their writes: the next cluster's blocks
    # must not start with them.)
    lib = _library("racy", r"""
  __shared__ float buf[64];
  const unsigned t = threadIdx.x;
  buf[t] = 1.0f;
  y[blockIdx.x * 64 + t] = buf[(t + 63) % 64];
  __emu_cluster_sync();
""")
    y = _run(lib, 4, 4 * THREADS, cluster=cluster, order=order).reshape(4, THREADS)
    assert np.isnan(y[:, 1:]).all() and (y[:, 0] == 1).all()


@pytest.mark.parametrize(("kw", "match"), [
    ({"cluster": 2}, r"bad launch: a cluster of 2 threadgroups .* for 3 threadgroups along x"),
    ({"cluster": 0}, r"bad cluster 0"),
    ({"cluster": 2.0}, r"bad cluster 2\.0"),
    ({"cluster": 32}, r"bad launch: a cluster of 32 threadgroups \(1\.\.16\)"),
    ({"order": "sideways"}, r"bad order 'sideways'"),
])
def test_a_bad_cluster_or_order_is_refused_with_one_line(kw, match):
    lib = _library("plain", PLAIN)
    with pytest.raises(EmulatorError, match=match) as e:
        _run(lib, 3, 3 * THREADS + 3, **kw)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("body", "match"), [
    ("y[0] = *__emu_cluster_map(buf, 2);",
     r"probe: cluster_map to rank 2 in a cluster of 2 threadgroups \(thread \d+ of threadgroup"),
    ("float local = 1; y[0] = *__emu_cluster_map(&local, 0);",
     r"cluster_map of 0x[0-9a-f]+, an address outside threadgroup memory"),
])
def test_a_bad_cluster_map_fails_the_launch_with_one_line(body, match):
    lib = _library("badmap", "  __shared__ float buf[64];\n  buf[0] = 0;\n"
                   f"  {body}\n")
    with pytest.raises(EmulatorError, match=match) as e:
        _run(lib, 2, 1, cluster=2)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(("body", "cluster", "expected"), [
    # half of each block waits at the cluster barrier, the other half at __syncthreads
    ("if (threadIdx.x < 16) __emu_cluster_sync();\n  __syncthreads();", 2,
     ("deadlock in the cluster of threadgroups (0..1,0,0): 96 threads at threadgroup_barrier, "
      "0 at simdgroup_barrier, 32 at a cluster barrier, 0 finished")),
    # block 0 (but a thread that finished) and half of block 1 at the cluster barrier
    (("if (__emu_cluster_rank() == 0 && threadIdx.x == 63) return;\n"
      "  if (__emu_cluster_rank() == 0 || threadIdx.x < 32) __emu_cluster_sync();\n"
      "  else __syncthreads();"), 2,
     ("deadlock in the cluster of threadgroups (0..1,0,0): 32 threads at threadgroup_barrier, "
      "0 at simdgroup_barrier, 95 at a cluster barrier, 1 finished")),
    ("if (threadIdx.x < 16) __emu_cluster_sync();\n  else __syncthreads();", 1,
     ("deadlock in threadgroup (0,0,0): 48 threads at threadgroup_barrier, "
      "0 at simdgroup_barrier, 16 at a cluster barrier, 0 finished")),
])
def test_a_cluster_barrier_that_only_some_threads_reach_is_a_deadlock(monkeypatch, body,
                                                                      cluster, expected):
    monkeypatch.setenv(executor.ENV_TIME_LIMIT, "20")  # a hang would be a time limit instead
    lib = _library("deadlock", f"  {body}\n  y[0] = 1;\n")
    with pytest.raises(EmulatorError) as e:
        _run(lib, 2, 1, cluster=cluster)
    assert str(e.value) == f"probe: {expected}"


def test_threads_that_finished_do_not_hold_a_cluster_barrier():
    # as for __syncthreads: block 1 is done, block 0's barrier releases
    lib = _library("finished", r"""
  __shared__ float buf[64];
  const unsigned t = threadIdx.x, b = blockIdx.x;
  buf[t] = b;
  if (__emu_cluster_rank() == 0) {
    __emu_cluster_sync();
    y[t] = buf[t] + 1;
  } else {
    y[64 + t] = 5;
  }
""")
    np.testing.assert_array_equal(_run(lib, 2, 2 * THREADS, cluster=2),
                                  np.repeat(np.float32([1, 5]), THREADS))


@contextlib.contextmanager
def _copied(monkeypatch, tmp_path, folder: str):
    """toolchain's ``folder`` (SHIM or RUNTIME_DIR: files every build's key hashes) replaced
    by a copy to edit, for the block's length."""
    copy = tmp_path / folder
    shutil.copytree(getattr(toolchain, folder), copy)
    try:
        monkeypatch.setattr(toolchain, folder, copy)
        yield copy
    finally:
        monkeypatch.undo()
        toolchain._shim_digest.cache_clear()


def _key(part: str) -> str:
    toolchain._shim_digest.cache_clear()
    return toolchain._key(part)


def test_the_build_cache_is_keyed_by_the_hooks_header(tmp_path, monkeypatch):
    """A kernel library built against another table of hooks is never reused: the hooks
    header is part of every build's key (the runtime fills fields by the new layout)."""
    before = _key("x")
    with _copied(monkeypatch, tmp_path, "SHIM") as shim:
        assert _key("x") == before  # same content, same key
        hooks = shim / "metal_emu_hooks.h"
        hooks.write_text(hooks.read_text().replace("void* (*cluster_map)", "void* (*cluster_mapx)"))
        assert _key("x") != before


def test_the_build_cache_is_keyed_by_every_runtime_source(tmp_path, monkeypatch):
    """The executor is more than one source (runtime.cpp, buffers.cpp and their header): an
    edit to any of them is a new runtime build, never the cached one."""
    before = _key("runtime")
    with _copied(monkeypatch, tmp_path, "RUNTIME_DIR") as runtime:
        assert _key("runtime") == before
        for name in ("buffers.cpp", "buffers.h", "runtime.cpp"):
            src = runtime / name
            src.write_text(src.read_text() + "\n// edited\n")
            assert _key("runtime") != before, name
            before = _key("runtime")
