"""`farm suites` counts what pytest collects, and a local `pytest --farm-db` run is recorded
under the manifest suite it is (not `local`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_history_cli import farm

from suites.manifest import load_manifest

REPO = Path(__file__).resolve().parent.parent


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "DFLASH2_DEVICE_ARCH": "applegpu_g13s"})


def test_suites_lists_the_manifest_with_pytests_own_counts():
    res = farm("suites", "--json")
    assert res.exit_code == 0, res.output
    rows = {r["suite"]: r for r in json.loads(res.output)}
    manifest = load_manifest()
    assert list(rows) == list(manifest)
    assert rows["m8-parity"]["paths"] == ["suites/test_parity.py"]
    collected = _pytest("--collect-only", "-q", "suites/test_selection.py").stdout
    assert rows["selection"]["tests"] == sum("::" in line for line in collected.splitlines())
    assert rows["selection"]["tests"] > 0
    # `all` lists every other suite's module once: its count is theirs added up.
    assert rows["all"]["tests"] == sum(r["tests"] for n, r in rows.items() if n != "all")
    table = farm("suites").output
    assert "m8-parity" in table and str(rows["m8-parity"]["tests"]) in table
    quick = json.loads(farm("suites", "--no-count", "--json").output)
    assert {r["tests"] for r in quick} == {None}


@pytest.mark.parametrize(("args", "suite"), [
    (["suites/test_selection.py"], "selection"),
    (["suites"], "all"),
    (["suites/test_selection.py", "--farm-suite", "mine"], "mine"),
    (["suites/test_selection.py::test_selection_matches_expected"],
     "suites/test_selection.py::test_selection_matches_expected"),
    (["suites/test_selection.py", "-m", "slow"], "suites/test_selection.py"),
])
def test_farm_db_records_the_suite_the_session_runs(tmp_path, args, suite):
    db = tmp_path / "h.db"
    p = _pytest("--collect-only", "-q", f"--farm-db={db}", *args)
    assert p.returncode in (0, 5), p.stdout + p.stderr
    runs = json.loads(farm("runs", "--json", db=str(db)).output)
    assert [r["suite"] for r in runs] == [suite]


def test_the_greedy_suite_runs_its_stock_and_custom_cases():
    """A suite's cases must run, not only collect: a local name once shadowed the reference()
    role in greedy-e2e and every stock case raised TypeError, unseen because nothing here ran
    it. Budget 1 on both verifiers (the model and references are built once, ~20 s)."""
    p = _pytest("-q", "suites/test_greedy_e2e.py", "-k", "budget1-")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "2 passed" in p.stdout, p.stdout[-2000:]
