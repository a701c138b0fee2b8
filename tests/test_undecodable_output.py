"""Bytes no codec decodes, in a failing test's message and output (lone surrogates, as a test
that prints raw subprocess output can produce), are stored escaped: `farm run` keeps every
result and prints its summary, `farm ingest` records the file and leaves no run `running`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE = "tests/farm_fixtures/suite_undecodable.py"
FARM = [sys.executable, "-c", "from farm.cli.app import script; script()"]
ESCAPED = "caf\\udce9 \\udcff\\udcfe end"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}


def _stored(db: Path) -> tuple[str, list[tuple]]:
    with sqlite3.connect(db) as c:
        status = c.execute("select status from runs").fetchone()[0]
        rows = c.execute("select nodeid, outcome, message, output from results "
                         "order by nodeid").fetchall()
    return status, rows


def test_ingest_stores_undecodable_bytes_escaped(tmp_path):
    jsonl, db = tmp_path / "r.jsonl", tmp_path / "h.db"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", SUITE,
                        "--results-jsonl", str(jsonl)], cwd=REPO, env=_env(),
                       capture_output=True, text=True, errors="replace", timeout=120,
                       check=False)
    assert p.returncode == 1, p.stdout[-2000:]
    out = subprocess.run([*FARM, "ingest", str(jsonl), "--db", str(db)], cwd=REPO, env=_env(),
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    status, rows = _stored(db)
    assert status == "failed" and len(rows) == 2
    failed = [r for r in rows if r[1] == "failed"]
    assert failed and ESCAPED in failed[0][2] and ESCAPED in failed[0][3]


def test_farm_run_keeps_every_result_and_prints_its_summary(tmp_path):
    db = tmp_path / "h.db"
    out = subprocess.run([*FARM, "run", "--suite", SUITE, "--devices", "g13s", "--db", str(db)],
                         cwd=REPO, env=_env(), capture_output=True, text=True,
                         encoding="utf-8", errors="strict", timeout=240, check=False)
    assert out.returncode == 1, out.stderr[-3000:]  # an unexpected failure, not a crash
    assert "Traceback" not in out.stdout + out.stderr
    assert "mismatch in caf\\udce9" in out.stdout  # the failure's summary line, escaped
    status, rows = _stored(db)
    assert status == "failed" and len(rows) == 2
    assert any(ESCAPED in (r[2] or "") for r in rows)
