"""Ending `farm run` early (issue 13): SIGTERM (a CI cancel, `timeout`) and Ctrl-C are one abort.

Each test starts the real CLI in a subprocess with an embedded fleet (real Ray on loopback) and
signals it: the run is recorded ``aborted``, the command exits 128 + the signal after one line
(no traceback, no stack dump from Ray), the history is intact, and no process of the fleet is
left (the raylets, GCS, dashboard and runtime-env agents, log monitors, workers: all carry the
test's marker, tests/farm_procs.py). A ``running`` run whose driver is gone is marked
``aborted`` by the next run's start.
"""

from __future__ import annotations

import signal
import sqlite3
import time

from db_fixtures import device
from farm_procs import kill_marked, launch, left_behind, marked, ro

from db import open_history
from farm.runner.driver import ORPHAN_AFTER_S

FIX = "tests/farm_fixtures"


def _no_dump(err: str) -> None:
    assert "Traceback" not in err, err
    assert "SIGTERM received" not in err and "logging.cc" not in err, err  # Ray's C++ dump


def test_sigterm_after_the_first_result_aborts_the_run_and_stops_the_fleet(tmp_path):
    db = tmp_path / "h.db"
    proc, mark = launch("--suite", f"{FIX}/suite_stream.py", "--devices", "g13s",
                        "--test-timeout", "900", "--db", str(db))
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if ro(db, "select count(*) from results") not in ([], [(0,)]):
                break
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()[1]
        fleet = len(marked(mark)) - 1  # every process of the fleet, the driver aside
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - t0
        left = left_behind(mark)
    finally:
        proc.kill()
        kill_marked(mark)
    assert proc.returncode == 143, err
    _no_dump(err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("run ") and ": aborted (SIGTERM) after " in last, err
    assert out == ""
    assert took < 30, took
    assert fleet >= 6, fleet  # GCS, raylets, agents, workers... were there to stop
    assert left == [], left
    assert ro(db, "select status from runs") == [("aborted",)]
    assert ro(db, "select status, error from jobs") == [
        ("error", "cancelled: the run was aborted (SIGTERM)")]
    kept = ro(db, "select count(*) from results")[0][0]
    assert 1 <= kept < 21  # what arrived is kept; the blocking test never reported
    assert f"{kept} result(s) kept" in last
    assert ro(db, "PRAGMA integrity_check") == [("ok",)]


def _seed(db) -> dict[str, str]:
    """Three running runs: a farm driver gone long ago, a live one, a local pytest session."""
    h = open_history(db)
    try:
        ids = {}
        for name, node in (("orphan", "n" * 56), ("live", "m" * 56), ("local", None)):
            ids[name] = h.start_run("m8-parity", "g13s", None)
            h.add_job(ids[name], device(), "mac-1", "Darwin", node)
    finally:
        h.close()
    old = time.time() - ORPHAN_AFTER_S - 60
    with sqlite3.connect(db) as c:  # the orphan's and the local session's last beat: long ago
        c.execute("update runs set heartbeat = ? where id in (?, ?)",
                  (old, ids["orphan"], ids["local"]))
    c.close()
    return ids


def test_ctrl_c_while_the_fleet_starts_aborts_the_run_and_leaves_no_ray_process(tmp_path):
    db = tmp_path / "h.db"
    seeded = _seed(db)
    proc, mark = launch("--suite", f"{FIX}/suite_basic.py", "--devices", "g13s,g14",
                        "--db", str(db))
    try:
        deadline, names = time.monotonic() + 120, set()
        while time.monotonic() < deadline and proc.poll() is None:
            names = {p.name() for p in marked(mark)}
            if "gcs_server" in names:  # Ray is starting: its GCS is up, no device yet
                break
            time.sleep(0.05)
        assert "gcs_server" in names, proc.communicate()[1]
        assert ro(db, "select count(*) from jobs") == [(3,)]  # the seeded ones only
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        left = left_behind(mark)
    finally:
        proc.kill()
        kill_marked(mark)
    assert proc.returncode == 130, err
    _no_dump(err)
    lines = err.strip().splitlines()
    assert lines[0].startswith("embedded fleet")
    assert lines[-1].startswith("run ") and ": aborted (SIGINT) after " in lines[-1], err
    assert "0 result(s) kept" in lines[-1]
    assert out == ""
    assert left == [], left
    status = dict(ro(db, "select id, status from runs"))
    new = set(status) - set(seeded.values())
    assert len(new) == 1 and status[new.pop()] == "aborted", status  # recorded, and aborted
    # The run's start marked the orphaned farm run aborted (its job lost), said so in one
    # line, and left a live run and a local pytest session (which beats only per batch) alone.
    assert status[seeded["orphan"]] == "aborted"
    assert status[seeded["live"]] == "running" and status[seeded["local"]] == "running"
    assert ro(db, f"select status, error from jobs where run_id = '{seeded['orphan']}'") == [
        ("lost", f"driver gone (no heartbeat for {ORPHAN_AFTER_S:g}s): run aborted")]
    assert any(ln.startswith("marked 1 orphaned run(s) aborted") and seeded["orphan"] in ln
               for ln in lines), err
    assert ro(db, "PRAGMA integrity_check") == [("ok",)]
