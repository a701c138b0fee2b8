"""The emulator's compile step (kernels.metal_emu.toolchain._run) against a compiler that fails
the way zig's wrapper once did in a fresh clone's suite: exit 1 with no diagnostic. Such a
failure is tried again; a diagnosed one is the source's and is raised at once, with its text."""

from __future__ import annotations

import pytest

from kernels.metal_emu import toolchain

SCRIPT = """#!/bin/bash
echo call >> "$CALLS"
n=$(wc -l < "$CALLS")
case "$MODE" in
  silent-once) [ "$n" = 1 ] && exit 1; exit 0;;
  silent) exit 1;;
  error) echo "x.cpp:1:1: error: unknown type name 'flaot'" >&2; exit 1;;
esac
"""


def _calls(tmp_path) -> int:
    return len((tmp_path / "calls").read_text().splitlines())


@pytest.fixture
def cc(tmp_path, monkeypatch):
    script = tmp_path / "cc"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    monkeypatch.setenv(toolchain.ENV_CLANG, str(script))
    monkeypatch.setenv("CALLS", str(tmp_path / "calls"))
    toolchain.compiler.cache_clear()  # the compiler is found once a process: find this one
    yield lambda mode: monkeypatch.setenv("MODE", mode)
    toolchain.compiler.cache_clear()  # and the real one again for the tests after these


def test_a_failure_with_no_diagnostic_is_tried_again(cc, tmp_path):
    cc("silent-once")
    toolchain._run(["x.cpp"], "k")
    assert _calls(tmp_path) == 2


def test_a_diagnosed_failure_is_raised_at_once_with_its_text(cc, tmp_path):
    cc("error")
    with pytest.raises(toolchain.CompileError, match="unknown type name 'flaot'"):
        toolchain._run(["x.cpp"], "k")
    assert _calls(tmp_path) == 1


def test_a_failure_that_never_says_why_is_raised_after_four_tries_saying_so(cc, tmp_path):
    cc("silent")
    with pytest.raises(toolchain.CompileError, match=r"k does not compile:\nno diagnostic \(exit 1\)"):
        toolchain._run(["x.cpp"], "k")
    assert _calls(tmp_path) == 4


def test_a_source_half_written_by_another_process_is_not_what_this_one_compiles(
        monkeypatch, tmp_path):
    """Two processes building one kernel at once (two emulated devices of one fleet) each wrote
    the shared source path, and one compiled the other's half-written file: a library with no
    entry point ("undefined symbol: __emu_entry", a fleet test on 2026-12-07). Here the other
    process truncates the shared path just before this one's compile: the library built still
    holds its symbol, and the readable source is whole afterwards."""
    import ctypes
    import uuid

    from kernels.metal_emu import mlx_metal

    monkeypatch.setenv(mlx_metal.ENV_CACHE, str(tmp_path))  # its libraries, not the shared cache
    real_run = toolchain._run
    text = f'extern "C" int dflash2_probe_{uuid.uuid4().hex}() {{ return 7; }}\n'  # new each run
    name = "race_probe"

    def racing_run(args, what, **kw):
        if "-c" in args:  # the other process starts its build: the shared source made empty
            for shared in toolchain.build_dir().glob(f"{name}-*.cpp"):
                shared.write_text("")
        return real_run(args, what, **kw)

    monkeypatch.setattr(toolchain, "_run", racing_run)
    lib = toolchain.build_library(text, name, ())
    symbol = text.split()[3].split("(")[0]
    assert getattr(ctypes.CDLL(str(lib)), symbol)() == 7
    assert lib.with_suffix(".cpp").read_text() == text
