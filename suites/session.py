"""The name of the suite a pytest session runs, so a local run (`pytest suites/test_parity.py`
with `--results-jsonl`, `--farm-db` or `--farm-junit`) is recorded as `m8-parity`, comparable
with `farm run --suite m8-parity`, rather than as "local" or a file name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suites.manifest import ROOT, load_manifest


def suite_name(config: pytest.Config) -> str:
    """The suite this session runs: ``--farm-suite`` when given, else the manifest suite whose
    paths and markers are exactly this session's, else the paths themselves."""
    given = config.getoption("farm_suite", None)
    if given:
        return str(given)
    base = (config.rootpath if config.args_source == pytest.Config.ArgsSource.TESTPATHS
            else config.invocation_params.dir)
    paths = [_relative(base, a) for a in config.args] or ["."]
    markers = (config.getoption("markexpr", "") or "").strip()
    try:  # never fatal: a broken manifest must not stop a test session
        manifest = load_manifest()
    except Exception:  # noqa: BLE001
        manifest = {}
    files = _files(paths)
    for suite in manifest.values():
        if suite.markers == markers and _files(suite.paths) == files:
            return suite.name
    return " ".join(paths)[:200]


def _relative(base: Path, arg: str) -> str:
    """A pytest argument as a path relative to the checkout when inside it (``::node`` kept)."""
    file_part, sep, node = str(arg).partition("::")
    full = (base / file_part).resolve()
    rel = full.relative_to(ROOT).as_posix() if full.is_relative_to(ROOT) else full.as_posix()
    return rel + sep + node


def _files(paths: list[str]) -> frozenset[str]:
    """What the paths select: a directory stands for its test modules, so `suites` and the
    list of every suite module are the same selection."""
    out = set()
    for p in paths:
        file_part, sep, _ = p.partition("::")
        full = ROOT / file_part
        if not sep and full.is_dir() and full.resolve().is_relative_to(ROOT):
            out.update(f.relative_to(ROOT).as_posix() for f in sorted(full.rglob("test_*.py")))
        else:
            out.add(p.rstrip("/"))
    return frozenset(out)
