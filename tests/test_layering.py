"""Imports point one way (docs/CONTRACTS.md): farm -> db, suites -> dflash2 -> kernels -> devices.

Read from the source with ``ast`` (no import runs), so a new upward arrow fails here before it
tangles the packages: device identity sits below both the runtime and its kernels, which once
imported each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("devices", "dflash2", "kernels", "suites", "db", "farm")
# package -> the project's packages it may import (whole), or modules of them (dotted names)
ALLOWED = {
    "devices": set(),
    "kernels": {"devices"},
    "dflash2": {"devices", "kernels"},
    "suites": {"devices", "dflash2", "kernels"},
    # db reads the implementation names of kernels.recorder and raises the error types that
    # live in devices.errors (once farm.errors: an arrow up into the orchestrator)
    "db": {"kernels.recorder", "devices.errors"},
    "farm": {"devices", "dflash2", "kernels", "suites", "db"},
}


def imports_of(package: str) -> dict[str, set[str]]:
    """The project modules each file of ``package`` imports (absolute imports only)."""
    out: dict[str, set[str]] = {}
    for f in sorted((REPO / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        names = {n for n in names if n.split(".")[0] in PACKAGES
                 and n.split(".")[0] != package}
        if names:
            out[str(f.relative_to(REPO))] = names
    return out


def _allowed(package: str, module: str) -> bool:
    return any(module == a or module.startswith(a + ".") for a in ALLOWED[package])


def test_imports_point_down():
    wrong = [f"{f} imports {m}" for package in PACKAGES
             for f, mods in imports_of(package).items() for m in sorted(mods)
             if not _allowed(package, m)]
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_imports_inside_functions_too():
    """dflash2/bundle.py imports devices.errors inside a function only: still an arrow."""
    assert "devices.errors" in imports_of("dflash2")["dflash2/bundle.py"]
