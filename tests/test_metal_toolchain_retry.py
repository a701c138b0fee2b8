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
