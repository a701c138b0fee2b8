"""clang for the emulator: which one, with which flags, and the cache of what it built.

The compiler is ``DFLASH2_CLANG`` (a clang++ path), else the clang that the ``ziglang`` wheel
carries (a pip dependency on Linux, so a fresh venv has one), else ``clang++`` on PATH. Builds
are cached by the hash of everything that shapes them (compiler identity, flags, shim, runtime,
source): a second run compiles nothing.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kernels.metal_emu import lower, mlx_metal
from kernels.metal_emu.mlx_metal import cache_root

ENV_CLANG = "DFLASH2_CLANG"
HERE = Path(__file__).parent
SHIM = HERE / "shim"
RUNTIME_DIR = HERE / "runtime"

# C++17 as MSL is; no fast math and no FP contraction (only an explicit fma fuses, as the
# portable forms assume); unknown attributes are checked by lower.unknown_attributes instead.
# Indexing a fixed-size array (thread or threadgroup memory, zero-length ones included) past its
# end traps, as does a shift by the type's width or more; the executor reports the trap: the
# guarded buffers cover device memory, this covers the rest.
KERNEL_FLAGS = ["-std=c++17", "-O2", "-fPIC", "-fno-exceptions", "-fno-rtti",
                "-ffp-contract=off", "-fno-fast-math", "-nostdinc", "-Wno-unknown-attributes",
                "-Wno-ignored-attributes", "-ferror-limit=8", "-fno-color-diagnostics",
                "-fsanitize=array-bounds,shift-exponent",
                "-fsanitize-trap=array-bounds,shift-exponent", "-fstrict-flex-arrays=3",
                "-march=native"]  # the build cache is keyed by this host's CPU (_cpu_id)


class CompileError(RuntimeError):
    """A Metal source the shim's compiler refuses; the message carries clang's diagnostics."""


class NoCompiler(RuntimeError):
    pass


@dataclass(frozen=True)
class Compiler:
    """``compile`` turns one Metal TU into an object with nothing but the shim on its include
    path; ``link`` makes shared libraries (and builds the runtime, which needs libc).

    zig's ``c++`` driver adds its libc++ and libc folders as -isystem paths that -nostdinc does
    not remove, so a kernel could include <math.h>; its raw ``clang`` adds nothing. Hence two
    commands."""

    compile: tuple[str, ...]
    link: tuple[str, ...]


@functools.cache
def compiler() -> Compiler:
    given = os.environ.get(ENV_CLANG)
    if given:
        return Compiler((given,), (given,))
    if importlib.util.find_spec("ziglang") is not None:
        zig = (sys.executable, "-m", "ziglang")
        return Compiler((*zig, "clang"), (*zig, "c++"))
    found = shutil.which("clang++")
    if found:
        return Compiler((found,), (found,))
    raise NoCompiler("no clang for the Metal emulator: pip install ziglang, install clang++, "
                     f"or set {ENV_CLANG}")


@functools.cache
def compiler_id() -> str:
    r = subprocess.run([*compiler().compile, "--version"], check=False, capture_output=True,
                       text=True)
    first = r.stdout.splitlines()[0] if r.returncode == 0 and r.stdout else ""
    return f"{first} ({' '.join(compiler().compile)} / {' '.join(compiler().link)})"


@functools.cache
def _shim_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(SHIM.iterdir()):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    for p in sorted(RUNTIME_DIR.iterdir()):  # the executor's sources and headers
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def build_dir() -> Path:
    d = cache_root() / "metal-emu"
    d.mkdir(parents=True, exist_ok=True)
    return d


def shim_dir() -> Path:
    """The shim every compile includes: a copy in the build cache named by its content.

    A PCH records the absolute paths and modification times of its headers, and clang refuses
    it from another copy of them. Compiling against the tree's own shim made every copy of the
    tree (each farm job runs its own) build, and keep, a PCH of its own. The content-named copy
    is made once (atomically: another process may be making it too) and never changed."""
    d = build_dir() / f"shim-{_shim_digest()[:16]}"
    if not d.is_dir():
        tmp = build_dir() / f".shim-{os.getpid()}-{time.monotonic_ns()}.tmp"
        shutil.copytree(SHIM, tmp)
        try:
            os.rename(tmp, d)
        except OSError:  # made meanwhile by another process: theirs is the same content
            shutil.rmtree(tmp, ignore_errors=True)
    return d


@functools.cache
def _cpu_id() -> str:
    """What -march=native targets: a build is reused only on a CPU with the same features."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return platform.processor() or platform.machine()


def _key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in (compiler_id(), _cpu_id(), _shim_digest(), *parts):
        h.update(p.encode() + b"\0")
    return h.hexdigest()[:24]


# zig's wrapper moves each output through its own global cache; two processes compiling the same
# content at once (xdist workers) can lose that rename. It is not a compile error: try again.
_CACHE_RACE = ("failed to rename", "FileNotFound", "unable to create cache")


def _diagnostics(r: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in r.stderr.splitlines()
                     if "warning: argument unused" not in line).strip()


def _run(args: list[str], what: str, *, link: bool = False) -> None:
    """A failure with no diagnostic is taken as the wrapper's, not the source's, and tried again
    like a cache race: a fresh clone's suite saw "does not compile:" with nothing after it once
    (2026-12-07, two emulated devices and an xdist worker compiling at once), and the same test
    passed alone; a source that does not compile always says why."""
    cmd = compiler().link if link else compiler().compile
    for _attempt in range(4):
        r = subprocess.run([*cmd, *args], check=False, capture_output=True, text=True)
        transient = any(m in r.stderr for m in _CACHE_RACE) or not _diagnostics(r)
        if r.returncode == 0 or not transient:
            break
    if r.returncode != 0:
        diag = _diagnostics(r) or (f"no diagnostic (exit {r.returncode}); stdout: "
                                   f"{r.stdout.strip()[-500:]}")
        raise CompileError(f"{what} does not compile:\n{diag}")


def _own_source(shared: Path, text: str) -> Path:
    """The translation unit in a file of this process's own, published at ``shared`` (where a
    reader finds it) once compiled. Two processes building one kernel at once (two emulated
    devices of a fleet) both wrote the shared path: one compiled the other's half-written file
    into a library with no entry point and published it (2026-12-07, tests/test_fleet_doc.py:
    "undefined symbol: __emu_entry")."""
    own = shared.with_name(f".{shared.name}.{os.getpid()}.tmp")
    own.write_text(text)
    return own


def _publish(tmp: Path, target: Path) -> Path:
    os.replace(tmp, target)
    return target


def _refuse_unknown_attributes(source: str, name: str) -> None:
    bad = lower.unknown_attributes(source)
    if bad:
        raise CompileError(f"{name} does not compile: unknown attribute(s) {', '.join(bad)}")


@functools.cache
def _preamble_pch(lowered_preamble: str) -> Path:
    """MLX's utils preamble (lowered), precompiled once: every launch's source starts with it,
    and parsing it is most of a kernel's compile time."""
    # The PCH is built against the content-named shim (`shim_dir`); its headers' mtimes are in
    # the key still, so a copy made again (a cleaned cache) gets a PCH of its own.
    shim = shim_dir()
    stamps = ";".join(f"{f.relative_to(shim)}:{f.stat().st_mtime_ns}"
                      for f in sorted(shim.rglob("*")) if f.is_file())
    key = _key(" ".join(KERNEL_FLAGS), str(shim), stamps, lowered_preamble)
    target = build_dir() / f"preamble-{key}.pch"
    header = build_dir() / f"preamble-{key}.h"
    if target.exists() and header.exists():
        return target
    tmp_header = build_dir() / f".{header.name}.{os.getpid()}.tmp"
    tmp_header.write_text(lowered_preamble)
    os.replace(tmp_header, header)
    tmp = build_dir() / f".{target.name}.{os.getpid()}.tmp"
    _run(["-x", "c++-header", *KERNEL_FLAGS, f"-I{shim}", "-o", str(tmp), str(header)],
         "MLX's utils preamble")
    return _publish(tmp, target)


def _translation_unit(source: str, name: str) -> tuple[str, list[str]]:
    """The lowered text to compile and the flags it needs. When ``source`` starts with MLX's
    preamble (every launch's does), that part comes from the precompiled header and a #line
    directive keeps the rest at its own line numbers: the same program, parsed once."""
    lowered = lower.lower(source)
    pre = mlx_metal.utils_preamble()
    if source.startswith(pre) and pre.endswith("\n"):
        lowered_pre, lowered_rest = lower.lower(pre), lower.lower(source[len(pre):])
        if lowered_pre + lowered_rest == lowered:  # no rewrite spans the seam
            line = lowered_pre.count("\n") + 1
            return (f'#line {line} "{name}.metal.cpp"\n{lowered_rest}',
                    ["-include-pch", str(_preamble_pch(lowered_pre))])
    return lowered, []


def check_source(source: str, name: str, extra_includes: tuple[Path, ...] = ()) -> None:
    """Compile ``source`` (a Metal translation unit) strictly, producing nothing."""
    _refuse_unknown_attributes(source, name)
    with tempfile.TemporaryDirectory(prefix="dflash2-check-") as tmp:
        src = Path(tmp) / f"{name}.metal.cpp"
        if extra_includes:
            text, pch = lower.lower(source), []
        else:
            text, pch = _translation_unit(source, name)
        src.write_text(text)
        inc = [f"-I{d}" for d in (shim_dir(), *extra_includes)]
        _run(["-x", "c++", *KERNEL_FLAGS, *inc, *pch, "-fsyntax-only", str(src)], name)


def build_kernel(source: str, entry: str, name: str) -> Path:
    """A shared library holding the exact ``source`` (lowered) and the executor ``entry``;
    cached by content."""
    key = _key(" ".join(KERNEL_FLAGS), source, entry)
    target = build_dir() / f"{name}-{key}.so"
    if target.exists():
        return target
    _refuse_unknown_attributes(source, name)
    text, pch = _translation_unit(source, name)
    shared = build_dir() / f"{name}-{key}.metal.cpp"
    src = _own_source(shared, text + entry)
    tmp = build_dir() / f".{target.name}.{os.getpid()}.tmp"
    obj = tmp.with_suffix(".o")
    try:
        _run(["-x", "c++", *KERNEL_FLAGS, f"-I{shim_dir()}", *pch, "-c", "-o", str(obj),
              str(src)],
             name)
        _run(["-shared", "-o", str(tmp), str(obj)], name, link=True)
    finally:
        obj.unlink(missing_ok=True)
        _publish(src, shared)
    return _publish(tmp, target)


def build_library(text: str, name: str, include_dirs: tuple[Path, ...]) -> Path:
    """A shared library of the C++ ``text`` compiled as kernels are (``KERNEL_FLAGS``, the
    given include folders, then the Metal shim's for the executor's hooks), cached by content:
    the CUDA emulator's kernels (kernels/cuda_emu)."""
    heads = "".join(f.read_text() for d in include_dirs for f in sorted(d.iterdir()))
    key = _key(" ".join(KERNEL_FLAGS), heads, text)
    target = build_dir() / f"{name}-{key}.so"
    if target.exists():
        return target
    shared = build_dir() / f"{name}-{key}.cpp"
    src = _own_source(shared, text)
    tmp = build_dir() / f".{target.name}.{os.getpid()}.tmp"
    obj = tmp.with_suffix(".o")
    try:
        _run(["-x", "c++", *KERNEL_FLAGS, *(f"-I{d}" for d in include_dirs),
              f"-I{shim_dir()}", "-c", "-o", str(obj), str(src)], name)
        _run(["-shared", "-o", str(tmp), str(obj)], name, link=True)
    finally:
        obj.unlink(missing_ok=True)
        _publish(src, shared)
    return _publish(tmp, target)


@functools.cache
def build_runtime() -> Path:
    key = _key("runtime")
    target = build_dir() / f"runtime-{key}.so"
    if target.exists():
        return target
    tmp = build_dir() / f".{target.name}.{os.getpid()}.tmp"
    _run(["-std=c++17", "-O2", "-fPIC", "-shared", f"-I{shim_dir()}", f"-I{RUNTIME_DIR}", "-o",
          str(tmp), *map(str, sorted(RUNTIME_DIR.glob("*.cpp")))],
         "the executor runtime", link=True)
    return _publish(tmp, target)
