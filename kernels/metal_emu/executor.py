"""Launching a compiled Metal kernel on the SIMT executor (runtime/) from Python.

Inputs are copied into guarded buffers; outputs are pre-filled with a NaN whose payload no
arithmetic produces, so an element the kernel never writes is reported by index; a fault names
the kernel, the buffer and the element. Errors are ``EmulatorError`` with one line.
"""

from __future__ import annotations

import ctypes
import functools
import numbers
import os
import threading
from dataclasses import dataclass

import numpy as np

from kernels.metal_emu import glue, toolchain

ENV_TIME_LIMIT = "DFLASH2_EMU_CPU_SECONDS"
ORDERS = ("forward", "reverse", "lagging")
# "lagging": forward, but each threadgroup's second SIMD group (a CUDA warp) runs only when no
# other thread can: the others run ahead of it as far as the kernel's barriers let them
LAGGING_SIMD_GROUP = 1
# when a bulk copy (the CUDA emulator's) lands: as it is issued, or once every thread is blocked
COPIES = ("at_issue", "late")
_lock = threading.Lock()

# NaNs with a payload (quiet bit set, then 0xDE..): hardware NaNs are 0x7FC00000-style.
_UNWRITTEN = {np.dtype(np.float32): np.uint32(0x7FDEAD00), np.dtype(np.float16): np.uint16(0x7EDE),
              "bfloat16": np.uint16(0x7FDE)}


class EmulatorError(RuntimeError):
    """A launch the executor refused or that faulted: one line naming the kernel."""


@dataclass(frozen=True)
class Buffer:
    """One buffer of a launch: raw bytes (bf16 as uint16) and the element size."""

    name: str
    data: np.ndarray  # contiguous; bf16 carried as uint16 with bf16=True
    bf16: bool = False


@functools.cache
def _runtime() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(toolchain.build_runtime()))
    lib.emu_buffer.restype = ctypes.c_void_p
    lib.emu_buffer.argtypes = [ctypes.c_ulong, ctypes.c_uint, ctypes.c_char_p]
    lib.emu_release_buffers.restype = None
    lib.emu_launch.restype = ctypes.c_int
    lib.emu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
                               ctypes.c_uint, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_void_p, ctypes.c_void_p,
                               ctypes.c_double, ctypes.c_char_p, ctypes.c_ulong]
    return lib


@functools.lru_cache(maxsize=512)
def _kernel(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path)


def _time_limit() -> float:
    return float(os.environ.get(ENV_TIME_LIMIT, "120"))


def launch(name: str, sig: glue.Signature, library: str, inputs: dict[str, Buffer],
           outputs: dict[str, tuple[tuple[int, ...], np.dtype | str]], grid: tuple[int, int, int],
           threadgroup: tuple[int, int, int], *, cluster: int = 1,
           order: str = "forward", copies: str = "at_issue") -> dict[str, np.ndarray]:
    """Run one launch; ``outputs`` maps name -> (shape, dtype or "bfloat16").

    ``cluster`` threadgroups along x run together as a CUDA thread-block cluster (the grid's
    threadgroups along x a multiple of it). ``order`` "reverse" runs the grid's last cluster
    first and a cluster's threadgroups from the highest rank: an output that must not depend
    on which threadgroup comes first can be compared across the two orders; "lagging" runs
    forward with each threadgroup's second SIMD group held back until nothing else can run (a
    warp that reads a slot after the others: a refill before it has read shows). ``copies``
    "late" lands each bulk copy only once every thread of the cluster is blocked (a read of
    its bytes before the wait on its mbarrier then finds the old ones), "at_issue" at once (a
    refill of a slot before its readers are done then overwrites what they have yet to read)."""
    if isinstance(cluster, bool) or not isinstance(cluster, numbers.Integral) or not (
            1 <= cluster < 2 ** 32):
        raise EmulatorError(f"{name}: bad cluster {cluster!r}: a number of threadgroups >= 1")
    if order not in ORDERS:
        raise EmulatorError(f"{name}: bad order {order!r}: one of {', '.join(ORDERS)}")
    if copies not in COPIES:
        raise EmulatorError(f"{name}: bad copies {copies!r}: one of {', '.join(COPIES)}")
    rt = _runtime()
    lib = _kernel(library)
    nbuf = max(p.buffer for p in sig.buffers) + 1
    args = (ctypes.c_void_p * nbuf)()
    out_views: dict[str, tuple[int, np.ndarray, np.uint]] = {}
    with _lock:
        try:
            for p in sig.buffers:
                if p.name in inputs:
                    b = inputs[p.name]
                    raw = np.ascontiguousarray(b.data)
                    ptr = rt.emu_buffer(raw.nbytes, raw.itemsize, p.name.encode())
                    if not ptr:
                        raise EmulatorError(f"{name}: cannot map buffer {p.name!r}")
                    ctypes.memmove(ptr, raw.ctypes.data, raw.nbytes)
                elif p.name in outputs:
                    shape, dtype = outputs[p.name]
                    key = "bfloat16" if dtype == "bfloat16" else np.dtype(dtype)
                    store = np.uint16 if dtype == "bfloat16" else np.dtype(dtype)
                    count = int(np.prod(shape))
                    itemsize = np.dtype(store).itemsize
                    ptr = rt.emu_buffer(count * itemsize, itemsize, p.name.encode())
                    if not ptr:
                        raise EmulatorError(f"{name}: cannot map buffer {p.name!r}")
                    view = np.ctypeslib.as_array(
                        (ctypes.c_uint8 * (count * itemsize)).from_address(ptr))
                    bits = view.view(np.uint32 if itemsize == 4 else np.uint16)
                    bits[:] = _UNWRITTEN[key]
                    out_views[p.name] = (ptr, view.view(store).reshape(shape), _UNWRITTEN[key])
                else:
                    raise EmulatorError(f"{name}: no data for buffer {p.name!r}")
                args[p.buffer] = ptr
            entry = ctypes.cast(lib["__emu_entry"], ctypes.c_void_p)
            hooks = ctypes.addressof(ctypes.c_char.in_dll(lib, "__emu_hooks"))
            err = ctypes.create_string_buffer(2048)
            g = (ctypes.c_uint * 3)(*grid)
            t = (ctypes.c_uint * 3)(*threadgroup)
            lo, hi = ctypes.c_void_p(), ctypes.c_void_p()
            lib["__emu_tg_bounds"](ctypes.byref(lo), ctypes.byref(hi))
            if rt.emu_launch(entry, hooks, args, g, t, int(cluster), order == "reverse",
                             LAGGING_SIMD_GROUP if order == "lagging" else -1,
                             copies == "late", lo, hi,
                             _time_limit(), err, len(err)):
                raise EmulatorError(f"{name}: {err.value.decode(errors='replace')}")
            results = {}
            for oname, (_ptr, view, payload) in out_views.items():
                bits = view.view(np.uint32 if view.itemsize == 4 else np.uint16)
                unwritten = np.flatnonzero(bits.reshape(-1) == payload)
                if unwritten.size:
                    raise EmulatorError(
                        f"{name}: output {oname!r} has {unwritten.size} element(s) never written "
                        f"(first at index {int(unwritten[0])})")
                results[oname] = view.copy()
            return results
        finally:
            rt.emu_release_buffers()
