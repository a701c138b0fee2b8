"""`farm suites`: the suites of suites/manifest.toml, with how many tests each one runs.

The count is pytest's own collection (``pytest --collect-only -q`` in a subprocess, from the
checkout the farm ships), so it is the number `farm run --suite NAME` will run on a device,
parametrizations and markers included; nothing is estimated.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from farm.cli.app import app, verbosity
from farm.cli.history import JsonOpt, _echo_json
from farm.errors import EXIT_INFRA, FarmError

COLLECT_TIMEOUT_S = 300


def collect(paths: list[str], markers: str, root: Path, *, verbose: bool = False) -> list[str]:
    """The node ids pytest collects for ``paths`` (and ``-m markers``), run from ``root``."""
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
           *(["-m", markers] if markers else []), *paths]
    if verbose:
        typer.echo("collecting: " + " ".join(cmd[1:]), err=True)
    try:
        p = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                           timeout=COLLECT_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise FarmError(f"pytest took over {COLLECT_TIMEOUT_S} s to collect {' '.join(paths)}: "
                        f"count with `pytest --collect-only {' '.join(paths)}`",
                        EXIT_INFRA) from None
    if p.returncode not in (0, 5):  # 5: nothing collected
        lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.startswith("E ")]
        raise FarmError(f"pytest could not collect {' '.join(paths)}: "
                        f"{(lines or ['exit status ' + str(p.returncode)])[0][2:].strip()}",
                        EXIT_INFRA)
    return [ln.strip() for ln in p.stdout.splitlines() if "::" in ln and " " not in ln.strip()]


def _selected(path: str, nodeid: str) -> bool:
    """Whether a manifest path (a directory, a file, or ``file::node``) selects ``nodeid``."""
    path = path.rstrip("/")
    return nodeid == path or nodeid.startswith((path + "::", path + "[", path + "/"))


def count_tests(suites: list, root: Path, *, verbose: bool = False) -> dict[str, int]:
    """Tests per suite: one pytest collection per distinct marker expression."""
    out: dict[str, int] = {}
    for markers in dict.fromkeys(s.markers for s in suites):
        group = [s for s in suites if s.markers == markers]
        paths = list(dict.fromkeys(p for s in group for p in s.paths))
        ids = collect(paths, markers, root, verbose=verbose)
        for s in group:
            out[s.name] = sum(any(_selected(p, n) for p in s.paths) for n in ids)
    return out


@app.command("suites")
def suites_cmd(
    ctx: typer.Context,
    count: Annotated[bool, typer.Option(help="count each suite's tests by pytest collection "
                                             "(a few seconds)")] = True,
    as_json: JsonOpt = False,
) -> None:
    """The suites `farm run --suite NAME` accepts, with their paths, timeout and test count."""
    from suites.manifest import ROOT, load_manifest

    suites = list(load_manifest().values())
    counts: dict[str, int] = {}
    if count:
        level = verbosity(ctx)
        status = (Console(stderr=True).status("collecting the suites' tests with pytest ...")
                  if level >= 0 else contextlib.nullcontext())
        with status:
            counts = count_tests(suites, ROOT, verbose=level > 0)
    rows = [{"suite": s.name, "description": s.description, "paths": s.paths,
             "markers": s.markers, "timeout": s.timeout, "tests": counts.get(s.name)}
            for s in suites]
    if as_json:
        _echo_json(rows)
        return
    t = Table("suite", "tests", "timeout (s)", "paths", "description")
    for r in rows:
        t.add_row(escape(r["suite"]), "-" if r["tests"] is None else str(r["tests"]),
                  f"{r['timeout']:g}", escape("\n".join(r["paths"]) + (
                      f"\n-m {r['markers']}" if r["markers"] else "")), escape(r["description"]))
    Console(highlight=False, width=None if sys.stdout.isatty() else 200).print(t)
