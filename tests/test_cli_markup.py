"""Test ids and errors are data, not rich markup: `[params]` survive and `[/` never raises.

The summary `farm run` prints, `farm show` and `farm history`, on a real SQLite history.
"""

from __future__ import annotations

import io
import json

from db_fixtures import device, record, result, session_finish, session_start
from rich.console import Console
from test_history_cli import farm

from db import open_history
from farm.report.summary import JobRecord, print_summary

NODE = "suites/test_x.py::test_x[bf16-(8,5120,17408)]"
ERROR = "worker died: [/bold] unbalanced [red]markup"


def test_the_run_summary_prints_params_and_markup_like_errors_intact():
    job = JobRecord(key="applegpu_g13s@n1", kind=("applegpu_g13s", False), device=device(),
                    node_id="n1" * 8, host="mac-[1]", status="lost", error=ERROR)
    job.results[NODE] = {**result(NODE, outcome="failed", message="assert [/] == [b]"),
                         "output": "x"}
    buf = io.StringIO()
    print_summary(Console(file=buf, width=300), [job], [], "run-[1]", 1)
    out = buf.getvalue()
    assert NODE in out, out
    assert ERROR in out and "assert [/] == [b]" in out and "mac-[1]" in out, out
    assert "run run-[1]: exit 1" in out


def test_show_and_history_print_params_and_job_errors_intact(tmp_path):
    db = str(tmp_path / "h.db")
    h = open_history(db)
    run_id = h.start_run("m8-parity", "g13s", {"git_sha": None, "dirty": None,
                                                "tree_hash": None})
    job = h.add_job(run_id, device(), "mac-1", "Darwin 24.1", "node-1")
    h.ingest_events(job, [session_start(), result(NODE, outcome="failed"), session_finish()])
    h.finish_job(job, "lost", error=ERROR)
    h.finish_run(run_id, h.run_verdict(run_id))
    h.close()
    shown = farm("show", run_id, db=db)
    assert shown.exit_code == 0, shown.output
    assert ERROR[:40] in shown.output, shown.output  # the column shows 60 characters
    hist = farm("history", NODE, db=db)
    assert hist.exit_code == 0 and "bf16-(8,5120,17408)" in hist.output, hist.output


def test_show_without_a_run_shows_the_latest(tmp_path):
    db = str(tmp_path / "h.db")
    h = open_history(db)
    record(h, [(device(), "mac-1", [result()])], started=1000.0)
    newest = record(h, [(device(), "mac-1", [result()])], started=2000.0)
    h.close()
    res = farm("show", "--json", db=db)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["run"]["run_id"] == newest
    assert f"run {newest}" in farm("show", db=db).output
