"""What `farm run` shows while it runs (issue 13): a status while the fleet starts and devices
are checked, then per device done/total (the total is the device's own collected count) and an
ETA; redrawn on a terminal, plain lines at most every few seconds elsewhere, never on stdout."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

from farm_procs import Seen, launch
from farm_procs import device_job_events as _events
from rich.console import Console

from farm.report import summary as report
from farm.runner.progress import Progress

REPO = Path(__file__).resolve().parent.parent
FIX = "tests/farm_fixtures"




def test_the_device_job_reports_its_total_before_the_first_result_and_after_a_restart():
    evs = _events(f"{FIX}/suite_abort.py")  # 3 tests; the interpreter dies in the second
    kinds = [e["type"] for e in evs]
    collected = [e for e in evs if e["type"] == "farm_collected"]
    # Collected 3; after the crash pytest restarts with the 2 reported deselected: 2 + 1.
    assert [(e["count"], e["total"]) for e in collected] == [(3, 3), (1, 3)]
    assert kinds.index("farm_collected") < kinds.index("result")


def test_a_retried_job_counts_what_an_earlier_attempt_reported():
    done = f"{FIX}/suite_basic.py::test_one"
    evs = _events(f"{FIX}/suite_basic.py", deselect=[done])
    assert [(e["count"], e["total"]) for e in evs if e["type"] == "farm_collected"] == [(2, 3)]
    assert len([e for e in evs if e["type"] == "result"]) == 2


def _job(done: int, total: int | None, since: float | None, status: str = "",
         before: int = 0) -> report.JobRecord:
    j = report.JobRecord(key="applegpu_g13s@n1", kind=("applegpu_g13s", True),
                         device={"arch": "applegpu_g13s", "emulated": True},
                         node_id="abcdef0123456789", state="running", status=status)
    j.results = {f"t::test_{i}[p-{i}]": {"outcome": "passed", "expectation": {}}
                 for i in range(done)}
    j.total, j.streaming, j.done_before = total, since, before
    j.current = f"t::test_{done - 1}[p-{done - 1}]" if done else ""
    return j


def test_done_total_and_eta_follow_the_pace_of_the_current_attempt():
    now = 1000.0
    j = _job(5, 20, now - 10)  # 5 done in 10 s: 15 left, 30 s
    assert report.done_text(j) == "5/20" and report.eta_s(j, now) == 30.0
    assert report.eta_s(_job(5, 20, now - 10, before=4), now) == 150.0  # 1 this attempt
    assert report.done_text(_job(0, None, None)) == "0/?"
    assert report.eta_s(_job(0, 20, now - 3), now) is None  # no pace yet
    assert report.eta_s(_job(20, 20, now - 3, status="passed"), now) is None
    jobs = [j, _job(2, 4, now - 10)]  # 10 s left
    assert report.run_eta_s(jobs, now) == 30.0  # the slowest device's
    assert report.fmt_s(30.0) == "0:30" and report.fmt_s(3725) == "1:02:05"
    line = report.progress_line(jobs, 42.0, now)
    assert line == ("progress [0:42]: applegpu_g13s (emulated)@abcdef01 running 5/20, "
                    "applegpu_g13s (emulated)@abcdef01 running 2/4; eta 0:30")
    out = io.StringIO()
    Console(file=out, width=200).print(report.progress_table(jobs, now))
    table = out.getvalue()
    assert "farm run (eta 0:30)" in table and "5/20" in table and "0:10" in table
    assert "test_4[p-4]" in table  # a parametrized id is text, not rich markup


def test_off_a_terminal_progress_is_plain_lines_at_most_every_interval():
    out = io.StringIO()
    show = Progress(Console(file=out, width=200), live=False, every=0.3)
    with show.phase("connecting to Ray at h:1", plain=False):
        pass  # a short step whose error must stay the one line on stderr: no line of its own
    assert out.getvalue() == ""
    with show.phase("starting fleet"):
        time.sleep(0.75)  # the main thread blocked: a line at the start, then one per 0.3 s
    lines = out.getvalue().splitlines()
    assert lines[0] == "starting fleet ..." and 1 <= len(lines) - 1 <= 2, lines
    assert all(re.fullmatch(r"starting fleet: \d+s", ln) for ln in lines[1:]), lines
    out.truncate(0), out.seek(0)
    jobs = [_job(0, None, None)]
    with show.view(jobs) as view:
        for _ in range(10):
            jobs[0].results[f"t::x{_}"] = {"outcome": "passed", "expectation": {}}
            view.update()  # ten updates in well under 0.3 s: no line for them
        time.sleep(0.35)
        view.update()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0].endswith("running 0/?") and "10/?" in lines[1], lines
    assert "\x1b" not in out.getvalue()  # no cursor movement, no colour


def test_farm_run_shows_fleet_start_health_and_done_total_on_stderr_and_only_json_on_stdout(
        tmp_path):
    db = tmp_path / "h.db"
    proc, mark = launch("--suite", f"{FIX}/suite_basic.py", "--devices", "g13s",
                        "--db", str(db), "--json")
    seen = Seen(proc, mark)
    try:
        deadline = time.monotonic() + 240
        while proc.poll() is None and time.monotonic() < deadline:
            seen.add()
            time.sleep(0.2)
        out, err = proc.communicate(timeout=30)
        left = seen.left_behind()
    finally:
        proc.kill()
        seen.kill()
    assert proc.returncode == 0, err
    run = json.loads(out)  # stdout is the JSON document and nothing else
    assert run["status"] == "passed"
    lines = err.splitlines()
    assert lines[0].startswith("embedded fleet")
    assert "starting fleet: local Ray, 1 device node(s) ..." in lines
    assert "health-checking 1 device(s) ..." in lines
    assert any(re.fullmatch(r"progress \[\d+:\d\d\]: applegpu_g13s \(emulated\)@\w{8} "
                            r"\w+ \d+/(\d+|\?)", ln) for ln in lines), err
    assert any(re.fullmatch(r"applegpu_g13s \(emulated\)@\w{8}: passed 3/3 in \d+:\d\d", ln)
               for ln in lines), err
    assert "\x1b" not in err  # not a terminal: nothing redrawn
    assert len(seen.known) >= 6 and left == [], left  # a normal end leaves none either
