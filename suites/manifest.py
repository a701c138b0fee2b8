"""The suite manifest (suites/manifest.toml): names the farm and a user can pass as ``--suite``.

A suite is data (paths, an optional marker expression, a default per-test timeout), so adding
one is an edit to the TOML file, not to the farm. A pytest path inside the shipped tree is
accepted too, so a single module or test can be shipped to the fleet without a manifest entry.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from devices.errors import Dflash2Error

MANIFEST = Path(__file__).resolve().with_name("manifest.toml")
ROOT = Path(__file__).resolve().parent.parent  # the shipped tree: paths are relative to it
DEFAULT_TIMEOUT = 300.0

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_KEYS = {"description", "paths", "markers", "timeout"}


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    paths: list[str]
    markers: str = ""
    timeout: float = DEFAULT_TIMEOUT

    def pytest_args(self) -> list[str]:
        """Arguments for pytest run from the repository root, e.g. [path, "--timeout", "300"]."""
        args = list(self.paths)
        if self.markers:
            args += ["-m", self.markers]
        return [*args, "--timeout", f"{self.timeout:g}"]

    def to_json(self) -> dict:
        return asdict(self)


def load_manifest(path: Path | None = None) -> dict[str, Suite]:
    """Every suite of the manifest, in file order; a malformed manifest is a Dflash2Error."""
    path = path or MANIFEST
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise Dflash2Error(f"cannot read suite manifest {path}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise Dflash2Error(f"{path}: bad TOML: {e}") from None
    tables = data.get("suites")
    if not isinstance(tables, dict) or not tables:
        raise Dflash2Error(f"{path}: no [suites.NAME] tables")
    unknown = set(data) - {"suites"}
    if unknown:
        raise Dflash2Error(f"{path}: unknown top-level keys {sorted(unknown)}")
    return {name: _suite(path, name, table) for name, table in tables.items()}


def resolve_suite(name_or_path: str, root: Path = ROOT, *,
                  manifest: dict[str, Suite] | None = None) -> Suite:
    """A manifest name, or a pytest path (``file[::node]``) that exists inside ``root``."""
    suites = manifest if manifest is not None else load_manifest()
    text = name_or_path.strip()
    if text in suites:
        return suites[text]
    known = ", ".join(suites)
    file_part, sep, node = text.partition("::")
    if not file_part:
        raise Dflash2Error(f"unknown suite {name_or_path!r}: use one of {known}, or a pytest path")
    root = root.resolve()
    given = Path(file_part)
    full = (given if given.is_absolute() else root / given).resolve()
    if not full.is_relative_to(root):
        raise Dflash2Error(f"suite path {file_part!r} is outside the shipped tree {root}: "
                           f"use one of {known}, or a pytest path inside it")
    if not full.exists():
        raise Dflash2Error(f"unknown suite {name_or_path!r}: no such suite or path under "
                           f"{root}; known suites: {known}")
    rel = full.relative_to(root).as_posix()
    target = rel + sep + node
    return Suite(name=target, description=f"pytest path {target}", paths=[target],
                 timeout=_timeout_for(rel, suites))


def _timeout_for(rel: str, suites: dict[str, Suite]) -> float:
    """The timeout of the first named suite that ships this file, else ``all``'s."""
    for suite in suites.values():
        if suite.name != "all" and any(_covers(p, rel) for p in suite.paths):
            return suite.timeout
    return suites["all"].timeout if "all" in suites else DEFAULT_TIMEOUT


def _covers(suite_path: str, rel: str) -> bool:
    base = suite_path.partition("::")[0].rstrip("/")
    return rel == base or rel.startswith(base + "/")


def _suite(path: Path, name: str, table: object) -> Suite:
    where = f"{path}: [suites.{name}]"
    if not _NAME.match(name):
        raise Dflash2Error(f"{where}: suite names are lowercase letters, digits and '-'")
    if not isinstance(table, dict):
        raise Dflash2Error(f"{where}: must be a table")
    unknown = set(table) - _KEYS
    if unknown:
        raise Dflash2Error(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_KEYS)})")
    description = table.get("description")
    if not isinstance(description, str) or not description.strip() or "\n" in description:
        raise Dflash2Error(f"{where}: description must be one non-empty line")
    paths = table.get("paths")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise Dflash2Error(f"{where}: paths must be a non-empty list of strings")
    for p in paths:
        pure = PurePosixPath(p.partition("::")[0])
        if not p or pure.is_absolute() or ".." in pure.parts:
            raise Dflash2Error(f"{where}: path {p!r} must be relative to the repository root")
    markers = table.get("markers", "")
    if not isinstance(markers, str):
        raise Dflash2Error(f"{where}: markers must be a string (a pytest -m expression)")
    timeout = table.get("timeout")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise Dflash2Error(f"{where}: timeout must be a positive number of seconds")
    return Suite(name, description.strip(), list(paths), markers.strip(), float(timeout))
