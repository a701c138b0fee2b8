"""`farm logs RUN [TEST]`: a failure's whole output, from the suites plugin's result event
(``output``) through the history (``results.output``) to the terminal, on a real SQLite file."""

from __future__ import annotations

import json

import pytest
from db_fixtures import device, record, result
from test_history_cli import farm, run_main

from db import open_history

pytest_plugins = ["pytester"]

FAIL = "suites/test_parity.py::test_m8[bf16-(8,5120,17408)]"
FAIL2 = "suites/test_parity.py::test_m4[bf16-(8,5120,17408)]"
OUTPUT = ("def test_m8():\n>       assert [/bold] == ref\nE       AssertionError: [red]x\n"
          "------------------------------ Captured stdout call ----------------------------\n"
          "line one\nline two\n")


def _history(tmp_path) -> tuple[str, str]:
    db = str(tmp_path / "h.db")
    h = open_history(db)
    emu = device(arch="applegpu_g14g", generation=14, size="g", emulated=True)
    events = [result(),
              {**result(FAIL, outcome="failed", message="AssertionError: [red]x"),
               "output": OUTPUT},
              {**result(FAIL2, outcome="error", message="fixture"), "output": "setup broke"}]
    run_id = record(h, [(device(), "mac-1", events), (emu, "linux-1", events[:2])])
    h.close()
    return db, run_id


def test_logs_prints_every_failure_whole_and_intact(tmp_path):
    db, run_id = _history(tmp_path)
    res = farm("logs", run_id, db=db)
    assert res.exit_code == 0, res.output
    assert res.output.count(OUTPUT) == 2, res.output  # both devices, every line, no markup eaten
    assert f"==== applegpu_g13s @mac-1: {FAIL} (failed, unexpected_fail) ====" in res.output
    assert "setup broke" in res.output
    rows = json.loads(farm("logs", "latest", "--json", db=db).output)
    assert [(r["device"], r["nodeid"]) for r in rows] == [
        ("applegpu_g13s @mac-1", FAIL), ("applegpu_g13s @mac-1", FAIL2),
        ("applegpu_g14g (emulated) @linux-1", FAIL)]
    assert rows[0]["output"] == OUTPUT and rows[0]["run_id"] == run_id


def test_logs_of_one_test_by_node_id_or_unique_part(tmp_path):
    db, run_id = _history(tmp_path)
    rows = json.loads(farm("logs", run_id, "test_m8", "--json", db=db).output)
    # `test_m8` also names the passing test_m8[gate_up-bfloat16]: the failure is meant
    assert {r["nodeid"] for r in rows} == {FAIL} and len(rows) == 2
    rows = json.loads(farm("logs", run_id, FAIL2, "--json", db=db).output)
    assert [r["output"] for r in rows] == ["setup broke"]
    passed = farm("logs", run_id, "test_m8[gate_up-bfloat16]", db=db)
    assert "passed: no failure output" in passed.output


def test_logs_errors_are_one_line(tmp_path, capsys):
    db, run_id = _history(tmp_path)
    for args, text in ((["logs", run_id, "bf16-(8,5120", "--db", db], "matches 2 tests"),
                       (["logs", run_id, "test_nothing", "--db", db], "no test matching"),
                       (["logs", "nope", "--db", db], "unknown run")):
        p = run_main(capsys, *args)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1 and text in lines[0], (args, p.stderr)
        assert lines[0].startswith("error: ") and "Traceback" not in p.stdout + p.stderr


def test_a_run_without_failures_says_so(tmp_path):
    db = str(tmp_path / "h.db")
    h = open_history(db)
    run_id = record(h, [(device(), "mac-1", [result()])])
    h.close()
    res = farm("logs", run_id, db=db)
    assert res.exit_code == 0 and res.output.strip() == f"run {run_id} has no failures"


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_plugin_records_the_whole_failure_and_farm_logs_prints_it(pytester, monkeypatch,
                                                                       xdist):
    """Real pytest, the real suites plugin and `--farm-db`: traceback, assertion
    introspection and captured stdout, stderr and log reach `farm logs`; `message` stays short.
    Under xdist the reports cross from the workers, and must carry all of it too."""
    monkeypatch.setenv("DFLASH2_DEVICE_ARCH", "applegpu_g13s")
    pytester.makepyfile(test_local="""
        import logging
        import sys

        def helper(x):
            return x + 1

        def test_fails():
            print("to stdout [/bold]")
            print("to stderr", file=sys.stderr)
            logging.getLogger("dflash2").warning("a log line")
            assert helper(1) == 3

        def test_passes():
            print("not kept")
    """)
    db = pytester.path / "h.db"
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--farm-db={db}",
                                       "--results-jsonl=out.jsonl", *xdist)
    assert res.ret == 1, res.outlines
    events = {e["nodeid"].split("::")[1]: e for e in map(
        json.loads, (pytester.path / "out.jsonl").read_text().splitlines())
        if e["type"] == "result"}
    assert "output" not in events["test_passes"]
    assert events["test_fails"]["message"] == "assert 2 == 3\n +  where 2 = helper(1)"
    out = farm("logs", "latest", "test_fails", db=str(db)).output
    for text in ("def test_fails():", "assert helper(1) == 3", "where 2 = helper(1)",
                 "Captured stdout call", "to stdout [/bold]", "Captured stderr call",
                 "to stderr", "Captured log call", "a log line"):
        assert text in out, (text, out)
