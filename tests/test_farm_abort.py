"""Ending `farm run` early (issue 13): SIGTERM (a CI cancel, `timeout`) and Ctrl-C are one abort.

Each test starts the real CLI in a subprocess with an embedded fleet (real Ray on loopback) and
signals it: the run is recorded ``aborted``, the command exits 128 + the signal after one line
(no traceback, no stack dump from Ray), the history is intact, and no process of the fleet is
left (the raylets, GCS, dashboard and runtime-env agents, log monitors, workers: what the test
saw of the fleet while it ran, tests/farm_procs.py). A ``running`` run whose driver is gone is marked
``aborted`` by the next run's start.
"""

from __future__ import annotations

import contextlib
import io
import signal
import sqlite3
import time

import pytest
from db_fixtures import device
from farm_procs import Seen, launch, marked, psutil, ro, until_first_result

from db import open_history
from farm.runner.driver import ORPHAN_AFTER_S

FIX = "tests/farm_fixtures"


LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def _off_loopback(mark: str) -> list[str]:
    """Sockets of the run's processes (driver included) on any address but loopback."""
    ps, out = psutil(), []
    for p in marked(mark):
        with contextlib.suppress(ps.Error):
            for c in p.net_connections(kind="inet"):
                ends = [c.laddr.ip] + ([c.raddr.ip] if c.raddr else [])
                if any(ip not in LOOPBACK and ip not in ("0.0.0.0", "::") for ip in ends) or (
                        c.status == ps.CONN_LISTEN and c.laddr.ip in ("0.0.0.0", "::")):
                    out.append(f"{p.name()} {c.status} {c.laddr} {c.raddr or ''}")
    return out


def _no_dump(err: str) -> None:
    assert "Traceback" not in err, err
    assert "SIGTERM received" not in err and "logging.cc" not in err, err  # Ray's C++ dump


def test_sigterm_after_the_first_result_aborts_the_run_and_stops_the_fleet(tmp_path):
    db = tmp_path / "h.db"
    proc, mark = launch("--suite", f"{FIX}/suite_stream.py", "--devices", "g13s",
                        "--test-timeout", "900", "--db", str(db))
    seen = Seen(proc, mark)
    try:
        until_first_result(proc, seen, db)
        fleet = len(seen.add())  # the driver and every process of its fleet
        foreign = _off_loopback(mark)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        left = seen.left_behind()
    finally:
        proc.kill()
        seen.kill()
    assert proc.returncode == 143, err
    _no_dump(err)
    last = err.strip().splitlines()[-1]
    assert last.startswith("run ") and ": aborted (SIGTERM) after " in last, err
    assert out == ""
    assert fleet >= 8, fleet  # GCS, raylets, agents, workers... were there to stop
    assert foreign == [], foreign  # the fleet and its driver talk over loopback only
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


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_a_signal_while_the_fleet_starts_aborts_the_run_and_leaves_no_ray_process(
        tmp_path, sig, code):
    """SIGTERM too: while Ray starts, its head node would install its own handler (kill what
    it knows of, exit 1) over the run's."""
    db = tmp_path / "h.db"
    seeded = _seed(db)
    proc, mark = launch("--suite", f"{FIX}/suite_basic.py", "--devices", "g13s,g14",
                        "--db", str(db))
    seen, agents = Seen(proc, mark), []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and len(agents) < 2:
            # Interrupt while a device node is being added (its raylet up, its agents coming):
            # Ray's own bookkeeping of that node is incomplete then, and its agents, which
            # ignore SIGTERM, outlived Ray's teardown before the fleet was killed as a whole.
            seen.add()
            agents = [c for c in seen.known.values() if c.startswith("ray::DashboardAgent")]
            time.sleep(0.02)
        assert len(agents) == 2, proc.communicate()[1]  # the head's, a device node's
        assert ro(db, "select count(*) from jobs") == [(3,)]  # no job: the seeded ones only
        proc.send_signal(sig)
        seen.add()
        out, err = proc.communicate(timeout=60)
        left = seen.left_behind()
    finally:
        proc.kill()
        seen.kill()
    assert proc.returncode == code, err
    _no_dump(err)
    lines = err.strip().splitlines()
    assert lines[0].startswith("embedded fleet")
    assert lines[-1].startswith("run ") and f": aborted ({sig.name}) after " in lines[-1], err
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


def test_a_run_beats_from_its_row_on_whatever_the_driver_is_blocked_in(tmp_path):
    """The heartbeat is a thread: a driver blocked for a minute in Ray's start still beats, so
    only a driver that is gone goes stale (ORPHAN_AFTER_S is many beats)."""
    from rich.console import Console

    from farm.runner.driver import HEARTBEAT_S
    from farm.runner.record import RunRecord

    assert ORPHAN_AFTER_S >= 10 * HEARTBEAT_S
    db = tmp_path / "h.db"
    h = open_history(db)
    try:
        rec = RunRecord(h, Console(file=io.StringIO()), every=0.1)
        suite = type("Suite", (), {"name": "m8-parity"})()
        opts = type("Opts", (), {"devices": "g13s"})()
        run_id = rec.open(suite, opts, None, None)
        first = ro(db, "select heartbeat from runs")[0][0]
        time.sleep(0.5)  # the main thread blocked
        beat = ro(db, "select heartbeat from runs")[0][0]
        assert beat > first
        rec.finish("aborted")
        rec.finish("passed")  # once finished, every later exit path is a no-op
        done = ro(db, "select status, heartbeat from runs")
        time.sleep(0.3)
        assert ro(db, "select status, heartbeat from runs") == done == [("aborted", done[0][1])]
        assert ro(db, "select id from runs") == [(run_id,)]
    finally:
        h.close()


def test_the_guard_turns_sigterm_into_the_ctrl_c_path_and_defers_it_during_teardown():
    import os

    from farm.runner.signals import Guard, Interrupted

    before = signal.getsignal(signal.SIGTERM)
    with Guard() as g:
        with pytest.raises(KeyboardInterrupt) as e:  # what every abort path catches
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert isinstance(e.value, Interrupted)
        assert (e.value.name, e.value.exit_code) == ("SIGTERM", 143)
        g.received = None
        with g.deferred():  # a teardown runs to its end; the signal is remembered
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)
        assert g.received == signal.SIGINT
        with pytest.raises(Interrupted) as e:  # ... and raised at the next safe point
            g.check()
        assert e.value.exit_code == 130
        g.handled = True  # the abort is under way: later signals are noted only
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
        g.check()
    assert signal.getsignal(signal.SIGTERM) is before
