"""The history commands through the real CLI: output, --json, exports, exit codes, and every
bad input answered with one line and no traceback."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest
from db_fixtures import (
    backends,
    device,
    fresh_db,
    meas,
    record,
    result,
    sel,
    session_finish,
    session_start,
    write_jsonl,
)
from typer.testing import CliRunner

from db import open_history
from farm.cli import app as cli
from farm.errors import FarmError

cli._register()
FARM = Path(sys.executable).with_name("farm")
NODE_OK = "suites/test_parity.py::test_m8[gate_up-bfloat16]"
NODE_X = "suites/test_bounds.py::test_m16_bound[gate_up]"


@dataclass
class Ran:
    exit_code: int
    output: str
    error: str


def farm(*args: str, db: str | None = None) -> Ran:
    """Invoke the app in process; a FarmError exits with its code, as `farm.cli.app.main` does."""
    argv = [*args, *(["--db", db] if db else [])]
    res = CliRunner().invoke(cli.app, argv, catch_exceptions=True)
    if isinstance(res.exception, FarmError):
        return Ran(res.exception.exit_code, res.output, str(res.exception))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return Ran(res.exit_code, res.output, "")


def run_script(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """The installed `farm` console script, exactly as a user runs it."""
    return subprocess.run([str(FARM), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, check=False)


def run_main(capsys, *args: str) -> subprocess.CompletedProcess:
    """`farm.cli.app.main` in this process (what the script calls), with its exit and streams."""
    argv = sys.argv
    sys.argv = ["farm", *args]
    try:
        cli.main()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = argv
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


@pytest.fixture(params=backends())
def hist(request, tmp_path):
    """A history with two runs on two devices: the second one regressed."""
    target = fresh_db(request.param, tmp_path)
    h = open_history(target)
    emu = device(arch="applegpu_g14g", generation=14, size="g", chip="emulated on EPYC",
                 backend="cpu", emulated=True)
    xfail = result(NODE_X, outcome="failed", category="expected_fail", expected="fail",
                   link="crbug/1", measurements=[meas("deviation", 0.0078125, 0.001)])
    # The real device's first run predates selections naming their implementation (unknown).
    good = [result(measurements=[meas("deviation", 1e-4, 1e-3)],
                   selections=[sel("scalar_kmajor")]), xfail]
    bad = [result(outcome="failed", message="mismatch",
                  measurements=[meas("deviation", 1e-4, 1e-3)],
                  selections=[{**sel("stock", reason="fallback:unsupported-device"),
                               "impl": "stock-native"}]), xfail]
    emu_good = [result(measurements=[meas("deviation", 1e-4, 1e-3)],
                       selections=[{**sel("scalar_kmajor"), "impl": "metal-emulated"}]), xfail]
    r1 = record(h, [(device(), "mac-1", good), (emu, "linux-1", emu_good)], started=1000.0)
    r2 = record(h, [(device(), "mac-1", bad), (emu, "linux-1", emu_good)], started=2000.0)
    h.close()
    return target, r1, r2


def test_runs_lists_newest_first_with_filters(hist):
    db, r1, r2 = hist
    res = farm("runs", "--json", db=db)
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["run_id"] for r in rows] == [r2, r1]
    assert rows[0]["status"] == "failed" and rows[0]["counts"]["unexpected_fail"] == 1
    assert rows[0]["devices"] == ["applegpu_g13s @mac-1", "applegpu_g14g (emulated) @linux-1"]
    assert [r["run_id"] for r in json.loads(farm("runs", "--json", "--limit", "1",
                                             db=db).output)] == [r2]
    assert json.loads(farm("runs", "--json", "--suite", "other", db=db).output) == []
    assert len(json.loads(farm("runs", "--json", "--device", "g14", db=db).output)) == 2
    table = farm("runs", db=db).output
    assert r1 in table and "1 FAIL" in table
    hist_table = farm("history", NODE_OK, db=db).output
    assert "gate_up-bfloat16" in hist_table


def test_show_prints_the_device_by_test_matrix(hist):
    db, _, r2 = hist
    res = farm("show", r2[:12], db=db)  # a unique prefix is enough
    assert res.exit_code == 0, res.output
    out = res.output
    assert "applegpu_g14g (emulated) @linux-1" in out and "applegpu_g13s @mac-1" in out
    assert "suites/test_bounds.py::test_m16_bound" in out and "1 xfail" in out
    doc = json.loads(farm("show", r2, "--json", db=db).output)
    cells = {row["test_id"]: row["cells"] for row in doc["matrix"]}
    job_of = {j["device"]["label"]: str(j["id"]) for j in doc["jobs"]}
    assert cells["suites/test_parity.py::test_m8"][job_of["applegpu_g13s @mac-1"]] == {
        "unexpected_fail": 1}
    assert cells["suites/test_bounds.py::test_m16_bound"][
        job_of["applegpu_g14g (emulated) @linux-1"]] == {"expected_fail": 1}


def test_show_lists_each_devices_selections_with_their_implementation(hist):
    db, r1, r2 = hist
    doc = json.loads(farm("show", r2, "--json", db=db).output)
    shown = [(x["device"], x["op"], x["M"], x["K"], x["N"], x["variant"], x["impl"], x["tests"])
             for x in doc["selections"]]
    assert shown == [
        ("applegpu_g13s @mac-1", "gate_up", 8, 5120, 17408, "stock", "stock-native", 1),
        ("applegpu_g14g (emulated) @linux-1", "gate_up", 8, 5120, 17408, "scalar_kmajor",
         "metal-emulated", 1)]
    assert doc["selections"][0]["reason"] == "fallback:unsupported-device"
    job_of = {j["device"]["label"]: j["id"] for j in doc["jobs"]}
    assert [x["job_id"] for x in doc["selections"]] == [job_of["applegpu_g13s @mac-1"],
                                                        job_of["applegpu_g14g (emulated) @linux-1"]]
    lines = farm("show", r2, db=db).output.splitlines()
    start = next(i for i, line in enumerate(lines) if "kernel selections" in line)
    rows = [" ".join(line.replace("│", " ").split()) for line in lines[start:]]
    assert any(r.startswith("applegpu_g14g (emulated) @linux-1 gate_up bfloat16 8 x 5120 x "
                            "17408 scalar_kmajor metal-emulated tuned 1") for r in rows), rows
    assert any(r.startswith("applegpu_g13s @mac-1 gate_up bfloat16 8 x 5120 x 17408 stock "
                            "stock-native fallback:unsupported-device 1") for r in rows), rows
    # Recorded before selections named their implementation: null in JSON, "unknown" shown.
    old = json.loads(farm("show", r1, "--json", db=db).output)["selections"]
    assert [x["impl"] for x in old] == [None, "metal-emulated"]
    assert "scalar_kmajor unknown tuned" in " ".join(farm("show", r1, db=db).output.replace(
        "│", " ").split())
    # The export carries every result's selections with their implementation.
    exported = json.loads(farm("export", r2, "--format", "json", db=db).output)
    assert "selections" not in exported
    assert sorted(s["impl"] for j in exported["jobs"] for r in j["results"]
                  for s in r["selections"]) == ["metal-emulated", "stock-native"]


def test_history_series_with_device_filter(hist):
    db, r1, r2 = hist
    rows = json.loads(farm("history", "suites/test_parity.py::test_m8", "--json",
                           db=db).output)
    assert [r["run_id"] for r in rows] == [r1, r1, r2, r2]
    rows = json.loads(farm("history", NODE_OK, "--device", "g13s", "--json", db=db).output)
    assert [(r["run_id"], r["outcome"]) for r in rows] == [(r1, "passed"), (r2, "failed")]
    assert rows[0]["measurements"][0]["name"] == "deviation"
    assert "deviation=0.0001/0.001" in farm("history", NODE_OK, db=db).output


def test_regressions_exit_codes_and_baseline(hist):
    db, r1, r2 = hist
    res = farm("regressions", db=db)  # latest run, each device's previous run
    assert res.exit_code == 1, res.output
    assert "kernel_selection" in res.output and "new_failure" in res.output
    assert "scalar_kmajor -> stock[stock-native]" in res.output  # unknown before: bare
    assert NODE_OK in res.output  # [params] are data, not rich markup
    report = json.loads(farm("regressions", r2, "--json", db=db).output)
    assert {(f["kind"], f["severity"]) for f in report["flags"]} == {
        ("kernel_selection", "high"), ("new_failure", "high")}
    assert all(f["device"] == "applegpu_g13s @mac-1" for f in report["flags"])
    assert farm("regressions", r1, db=db).exit_code == 0  # nothing before it
    # Baseline the regressed run: judged against itself, the latest run flags nothing.
    res = farm("baseline", "set", r2, "--json", db=db)
    assert res.exit_code == 0 and len(json.loads(res.output)) == 2
    assert farm("regressions", "--against", "baseline", db=db).exit_code == 0
    assert farm("regressions", r2, "--against", r1, db=db).exit_code == 1
    listed = json.loads(farm("baseline", "list", "--json", db=db).output)
    assert {b["run_id"] for b in listed} == {r2}
    res = farm("baseline", "set", r1, "--device", "g13s", db=db)
    assert res.exit_code == 0 and "applegpu_g13s" in res.output
    assert farm("regressions", db=db).exit_code == 1


def test_query_is_read_only_by_the_database(hist):
    db, r1, r2 = hist
    res = farm("query", "SELECT id, status FROM runs ORDER BY started", "--json", db=db)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [{"id": r1, "status": "passed"},
                                      {"id": r2, "status": "failed"}]
    res = farm("query", "SELECT count(*) AS n FROM runs WHERE id LIKE '%'", "--json", db=db)
    assert json.loads(res.output) == [{"n": 2}]  # the text reaches the database as written
    for sql in ("DELETE FROM results", "UPDATE runs SET status = 'passed'",
                "CREATE TABLE x (a int)", "DROP TABLE runs", "COMMIT; DELETE FROM results",
                "SELECT 1; DELETE FROM results"):
        res = farm("query", sql, db=db)
        assert res.exit_code == 2, (sql, res.output)
        assert "read-only" in res.error or "one statement" in res.error, res.error
    h = open_history(db, write=False)
    from db.queries import run_query

    assert run_query(h, "SELECT count(*) FROM results")[1] == [[8]]
    h.close()


def test_export_formats(hist):
    db, _, r2 = hist
    junit = farm("export", r2, "--format", "junit", db=db)
    assert junit.exit_code == 0
    root = ET.fromstring(junit.output.split("\n", 1)[1])
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["applegpu_g13s @mac-1"].get("failures") == "1"
    assert suites["applegpu_g14g (emulated) @linux-1"].get("failures") == "0"
    doc = json.loads(farm("export", r2, "--format", "json", db=db).output)
    assert doc["run"]["run_id"] == r2 and sum(len(j["results"]) for j in doc["jobs"]) == 4
    rows = list(csv.DictReader(io.StringIO(farm("export", r2, "--format", "csv",
                                                db=db).output)))
    assert len(rows) == 4 and {r["category"] for r in rows} == {
        "unexpected_fail", "expected_fail", "expected_pass"}


def test_export_to_a_file(hist, tmp_path):
    db, _, r2 = hist
    out = tmp_path / "run.xml"
    assert farm("export", r2, "--format", "junit", "-o", str(out), db=db).exit_code == 0
    assert ET.parse(out).getroot().tag == "testsuites"


def test_ingest_command(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [session_start(), result(), session_finish()])
    db = str(tmp_path / "h.db")
    res = farm("ingest", str(path), "--json", db=db)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["status"] == "passed"
    path = write_jsonl(tmp_path / "r2.jsonl", [session_start(), result(selections=[
        {**sel("scalar_kmajor"), "impl": "metal"}]), session_finish()])
    res = farm("ingest", str(path), "--json", db=db)
    assert res.exit_code == 0, res.output
    doc = json.loads(farm("show", json.loads(res.output)["run_id"], "--json", db=db).output)
    assert [x["impl"] for x in doc["selections"]] == ["metal"]


@pytest.mark.parametrize("kind", backends())
def test_bad_inputs_are_one_line_with_exit_codes(kind, tmp_path, capsys):
    """Through `farm.cli.app.main`, as a user meets them: stderr is one line, no traceback."""
    db = fresh_db(kind, tmp_path)
    h = open_history(db)
    run = record(h, [(device(), "mac-1", [result()])])
    h.close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(2048))
    newer = write_jsonl(tmp_path / "newer.jsonl", [session_start(), result(selections=[
        {**sel("scalar_kmajor"), "impl": "metal-remote"}])])
    blocker = tmp_path / "file"
    blocker.write_text("")
    cases = [
        (["show", "no-such-run", "--db", db], 2, "unknown run"),
        (["export", run, "--format", "xml", "--db", db], 2, "unknown export format"),
        (["query", "SELEC nonsense", "--db", db], 2, "invalid SQL"),
        (["query", "DELETE FROM runs", "--db", db], 2, "read-only"),
        (["history", "suites/nope.py::test_x", "--db", db], 2, "no results for test"),
        (["runs", "--device", "g99x", "--db", db], 2, "selector"),
        (["runs", "--db", str(junk)], 2, "not a SQLite database"),
        (["baseline", "set", run, "--db", str(blocker / "h.db")], 2, "cannot create"),
        (["runs", "--db", str(tmp_path / "absent.db")], 2, "no history at"),
        (["ingest", str(tmp_path / "missing.jsonl"), "--db", db], 2, "cannot read"),
        (["ingest", str(newer), "--db", db], 2, "impl 'metal-remote', not one of metal, "),
        (["show", "--db", str(tmp_path / "empty.db")], 2, "no history at"),
        (["history", "--db", db], 2, "Missing argument"),
        (["export", run, "--db", db, "--format"], 2, "requires an argument"),
        (["runs", "--limit", "many", "--db", db], 2, "--limit"),
    ]
    for args, code, text in cases:
        p = run_main(capsys, *args)
        assert p.returncode == code, (args, p.stdout, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], (
            args, p.stderr)
        assert "Traceback" not in p.stdout + p.stderr
    p = run_main(capsys, "regressions", "--db", db)
    assert p.returncode == 0, p.stdout + p.stderr
    h = open_history(db, write=False)
    from db.queries import list_runs

    assert [r["run_id"] for r in list_runs(h)] == [run]  # the refused file recorded nothing
    h.close()


def test_installed_script_one_line_errors_and_farm_db(tmp_path):
    db = str(tmp_path / "h.db")
    h = open_history(db)
    run = record(h, [(device(), "mac-1", [result()])])
    h.close()
    p = run_script("query", "DELETE FROM runs", "--db", db)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "read-only" in p.stderr
    p = run_script("runs", "--json", env={"FARM_DB": db})
    assert p.returncode == 0 and json.loads(p.stdout)[0]["run_id"] == run
