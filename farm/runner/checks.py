"""Checks `farm run` makes before any cluster work: what the user can fix is refused in
seconds, before a fleet starts or the history changes."""

from __future__ import annotations

import os
from pathlib import Path

from farm.errors import EXIT_USAGE, FarmError


def check_arch_env() -> None:
    """A malformed DFLASH2_DEVICE_ARCH in the driver's environment is the user's to fix now,
    not an error in every device job's pytest after the fleet has started."""
    from devices.identity import ENV_ARCH, parse_apple_arch

    arch = os.environ.get(ENV_ARCH, "").strip()
    if arch:
        try:
            parse_apple_arch(arch)
        except ValueError as e:
            raise FarmError(f"{ENV_ARCH}={arch!r} in the environment: {e}; unset it "
                            f"(`farm run` picks devices with --devices)", EXIT_USAGE) from None


def check_collects(suite, root: Path) -> None:
    """A suite given as a path to a test file that defines no test: refused before any cluster
    work (a job that collects nothing would otherwise report a green, empty run)."""
    import ast

    for p in suite.paths:
        rel = p.partition("::")[0]
        full = root / rel
        if full.suffix != ".py" or not full.is_file():
            continue  # a directory: pytest's collection decides
        try:
            tree = ast.parse(full.read_text(encoding="utf-8"), filename=str(full))
        except (OSError, SyntaxError, ValueError):
            continue  # pytest reports it on the device, as a collection error
        if not any((isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    and n.name.startswith("test"))
                   or (isinstance(n, ast.ClassDef) and n.name.startswith("Test"))
                   for n in tree.body):
            raise FarmError(f"suite path {rel!r} collects no tests: it defines no test_* "
                            f"function or Test* class", EXIT_USAGE)
