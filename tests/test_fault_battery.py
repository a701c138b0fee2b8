"""Faults on a real loopback cluster that tests/test_farm_cluster.py does not cover: the
driver (`farm run`) killed with SIGKILL mid-run, and four concurrent `farm run`s writing one
SQLite file. (A node killed mid-job, a test that aborts the interpreter, a hang and Ctrl-C are
tests/test_farm_cluster.py's.) Each checks that every result received before the fault is in
the history and that the file stays a sound SQLite database.

The cluster is this module's own (head + two `farm agent` nodes), on a port block apart from
tests/test_farm_cluster.py's, so the two can be alive at once on one xdist worker. The driver
kill runs last: the job it leaves behind may hold its device until Ray reaps it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import ray_cluster
from ray_cluster import FARM, REPO, FarmCluster

from db import open_history

FIX = "tests/farm_fixtures"
QUICK = [f"{FIX}/suite_stream.py::test_quick[{i}]" for i in range(20)]


@pytest.fixture(scope="module")
def cluster():
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    base = 28000 + 2000 * (int(worker) if worker.isdigit() else 0)  # clear of 20000 + 2000*w
    orig = ray_cluster._port_block
    ray_cluster._port_block = lambda: base
    try:
        c = ray_cluster.start_cluster(("applegpu_g13s", "applegpu_g14g"))
    finally:
        ray_cluster._port_block = orig
    try:
        yield c
    finally:
        ray_cluster.stop_cluster(c)


def ro(db: Path, sql: str) -> list[tuple]:
    """A read-only query from another process's point of view; [] while there is no file."""
    if not db.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)) as c:
        try:
            return c.execute(sql).fetchall()
        except sqlite3.OperationalError:  # no tables yet
            return []


def test_four_concurrent_runs_write_one_history_losing_nothing(cluster: FarmCluster,
                                                               tmp_path):
    db = tmp_path / "shared.db"
    open_history(db).close()  # made once, so the four race on writes, not on migrations
    procs = [subprocess.Popen([*FARM, "run", "--address", cluster.address, "--json",
                               "--suite", f"{FIX}/suite_basic.py", "--devices", "g13s,g14",
                               "--db", str(db)], cwd=REPO, env=cluster.env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              start_new_session=True) for _ in range(4)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=240))
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
        assert "database is locked" not in out + err
    runs = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert len({r["run_id"] for r in runs}) == 4
    for r in runs:
        assert r["status"] == "passed"
        assert sorted(j["device"]["arch"] for j in r["jobs"]) == ["applegpu_g13s",
                                                                  "applegpu_g14g"]
    # Every result each driver reported is a row of the history, under its run and device.
    reported = sorted((r["run_id"], j["device"]["arch"], res["nodeid"])
                      for r in runs for j in r["jobs"] for res in j["results"])
    rows = sorted(ro(db, "select j.run_id, d.arch, r.nodeid from results r join jobs j on "
                         "j.id = r.job_id join devices d on d.id = j.device_id"))
    assert len(reported) == 4 * 2 * 3 and rows == reported
    assert sorted(ro(db, "select status from runs")) == [("passed",)] * 4
    assert ro(db, "select count(*) from jobs where status = 'passed'") == [(8,)]
    assert ro(db, "PRAGMA integrity_check") == [("ok",)]


def test_a_selector_no_live_device_matches_leaves_the_history_as_it_was(cluster: FarmCluster,
                                                                        tmp_path):
    """tests/test_farm_cluster.py checks the one line and exit 3; this, the history's bytes."""
    db = tmp_path / "h.db"
    open_history(db).close()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    out = cluster.farm("run", "--address", cluster.address, "--suite",
                       f"{FIX}/suite_basic.py", "--devices", "g17", "--db", str(db),
                       timeout=60)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 3 and len(lines) == 1, out.stderr
    assert lines[0].startswith("error: no live device matches 'g17'")
    assert "Traceback" not in out.stdout + out.stderr
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before
    assert ro(db, "select count(*) from runs") == [(0,)]


def test_driver_killed_mid_run_is_aborted_on_next_open_and_keeps_every_result(
        cluster: FarmCluster, tmp_path):
    db = tmp_path / "h.db"
    proc = subprocess.Popen([*FARM, "run", "--address", cluster.address, "--suite",
                             f"{FIX}/suite_stream.py", "--devices", "g13s", "--test-timeout",
                             "900", "--db", str(db)], cwd=REPO, env=cluster.env(), text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline, seen = time.monotonic() + 120, 0
        while time.monotonic() < deadline and seen < 5:  # kill while results are streaming
            seen = (ro(db, "select count(*) from results") or [(0,)])[0][0]
            time.sleep(0.05)
        assert seen >= 5, proc.stderr.read() if proc.poll() is not None else "no results"
        os.kill(proc.pid, signal.SIGKILL)
        killed_at = time.time()
        proc.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL

    # What the driver stored before it died: a prefix of the suite, in order, none twice,
    # at least what another reader saw committed before the kill.
    stored = [r[0] for r in ro(db, "select nodeid from results order by id")]
    assert len(stored) >= seen
    assert stored == QUICK[:len(stored)], stored
    assert {r[0] for r in ro(db, "select outcome from results")} == {"passed"}
    assert ro(db, "select status from runs") == [("running",)]  # nobody has told it yet
    assert ro(db, "PRAGMA integrity_check") == [("ok",)]

    # A fresh writer within the staleness window leaves a live-looking run alone ...
    open_history(db).close()
    assert ro(db, "select status from runs") == [("running",)]
    # ... and once its heartbeat is older than stale_after, marks it aborted, its job lost.
    stale_after = 1.0
    time.sleep(max(0.0, killed_at + stale_after + 0.2 - time.time()))
    open_history(db, stale_after=stale_after).close()
    assert ro(db, "select status from runs") == [("aborted",)]
    assert ro(db, "select status, error from jobs") == [("lost", "writer stopped: run aborted")]
    assert [r[0] for r in ro(db, "select nodeid from results order by id")] == stored
    assert ro(db, "PRAGMA integrity_check") == [("ok",)]
    with contextlib.closing(sqlite3.connect(db)) as c:  # and the file still takes writes
        assert c.execute("PRAGMA quick_check").fetchone() == ("ok",)
