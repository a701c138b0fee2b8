"""Twins on a real loopback cluster: two (then three) `farm agent` nodes emulating the same
applegpu_g14g share one suite, test by test, through `farm run` as a user runs it."""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import ray_cluster
from ray_cluster import FARM, LOOPBACK, REPO, FarmCluster, stop_cluster

pytestmark = pytest.mark.xdist_group("farm_ray_cluster")

SUITE = "tests/farm_fixtures/suite_twins.py"  # 16 tests, the first 4 slow
ARCH = "applegpu_g14g"
def _own_block() -> int:
    """A port block of this module's own (test_farm_cluster's may be up in this process)."""
    base = ray_cluster.claim_block(reversed(ray_cluster._BLOCKS))
    if base is None:
        raise RuntimeError("no free test port block")
    return base


@pytest.fixture(scope="module")
def twins():
    base = _own_block()
    c = FarmCluster(address=f"{LOOPBACK}:{base}", token=secrets.token_hex(32), base=base,
                    temp_dir=Path(tempfile.mkdtemp(prefix="farmray-twins-", dir="/tmp")))
    head = ray_cluster._start(c, [*FARM, "head", "--node-ip", LOOPBACK, "--port", str(base),
                                  "--num-cpus", "1", "--object-store-mb", "100",
                                  "--temp-dir", str(c.temp_dir)], {})
    c.groups["head"] = head.pid
    try:
        ray_cluster._wait(head, "farm head")
        c.add_agent("twin-a", ARCH)
        c.add_agent("twin-b", ARCH)
        yield c
    finally:
        stop_cluster(c)


def _g14_nodes(c: FarmCluster) -> set[str]:
    out = c.farm("devices", "--address", c.address, "--json", "--no-check")
    assert out.returncode == 0, out.stderr
    return {d["node_id"] for d in json.loads(out.stdout) if d["arch"] == ARCH}


def _said(run: dict, err: str = "") -> str:
    jobs = [(j.get("status"), (j.get("error") or "")[:500]) for j in run.get("jobs", [])]
    return f"jobs {jobs}; stderr: {(err or run.get('_stderr', ''))[-2000:]}"


def _piece(nodeid: str) -> int:
    return int(nodeid.rpartition("[")[2].rstrip("]"))


def _db_rows(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("select r.nodeid, r.node, r.host, j.id from results r join jobs j on "
                         "j.id = r.job_id").fetchall()


def test_twins_split_one_suite_by_test_and_merge_it_under_one_variant(twins: FarmCluster,
                                                                       tmp_path):
    nodes = _g14_nodes(twins)
    assert len(nodes) == 2
    db = tmp_path / "h.db"
    code, run = twins.run_json("--suite", SUITE, "--devices", "g14", "--db", str(db))
    assert code == 0, _said(run)
    (job,) = run["jobs"]  # one job for the one device variant
    assert job["status"] == "passed" and job["device"]["arch"] == ARCH
    assert set(job["nodes"]) == nodes and job["attempts"] == 1
    ids = [r["nodeid"] for r in job["results"]]
    assert sorted(_piece(i) for i in ids) == list(range(16))  # each test once
    ran = Counter(r["farm_node"] for r in job["results"])
    assert set(ran) == nodes, ran  # both twins ran tests
    # Work stealing: the first contiguous share holds the four slow tests; its twin, done with
    # the quick share, took tests of it, so the first half did not all run on one node.
    first_half = {r["farm_node"] for r in job["results"] if _piece(r["nodeid"]) < 8}
    assert len(first_half) == 2, Counter((_piece(r["nodeid"]), r["farm_node"][:6])
                                         for r in job["results"])
    assert all(r["farm_host"] for r in job["results"])
    rows = _db_rows(db)
    assert len(rows) == 16 and len({r[0] for r in rows}) == 16
    assert {r[3] for r in rows} == {job["job_id"]}  # merged under one job
    assert {r[0]: r[1] for r in rows} == {r["nodeid"]: r["farm_node"] for r in job["results"]}
    assert all(r[2] for r in rows)
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from jobs").fetchone()[0] == 1
        assert c.execute("select status from runs").fetchone()[0] == "passed"


def test_a_twin_killed_mid_suite_hands_its_unfinished_tests_to_its_twins(twins: FarmCluster,
                                                                         tmp_path):
    before = _g14_nodes(twins)
    twins.add_agent("victim", ARCH, FARM_TWINS_VICTIM="1")
    victim = (_g14_nodes(twins) - before).pop()
    db = tmp_path / "h.db"
    proc = subprocess.Popen([*FARM, "run", "--address", twins.address, "--json", "--suite",
                             SUITE, "--devices", "g14", "--db", str(db)], cwd=REPO,
                            env=twins.env(), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        # The victim takes 4 s a test, its twins are quick and steal its share: once every test
        # but one has a result and the victim has reported one, the last is the victim's own,
        # running, and its twins have ended (their queue is empty).
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and not (
                _count(db, "select count(*) from results where node = ?", victim)
                and _count(db, "select count(*) from results") >= 15):
            time.sleep(0.1)
        twins.kill("victim")  # its process group: raylet, workers, pytest, mid-test
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
        twins.kill("victim")
    run = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
    assert proc.returncode == 0, _said(run, err)
    assert f"{victim[:8]} died" in err, err[-2000:]
    assert "test(s) of the applegpu_g14g (emulated) job move to" in err, err[-2000:]
    (job,) = run["jobs"]
    assert job["status"] == "passed" and job["attempts"] == 1
    assert set(job["nodes"]) == before | {victim}
    pieces = sorted(_piece(r["nodeid"]) for r in job["results"])
    assert pieces == list(range(16)), pieces  # every test, once, the victim's unfinished too
    ran = Counter(r["farm_node"] for r in job["results"])
    assert 1 <= ran[victim] < 16 and set(ran) - {victim} <= before, ran
    rows = _db_rows(db)
    assert sorted(_piece(r[0]) for r in rows) == list(range(16))
    assert {r[1] for r in rows} == set(ran)


def _count(db: Path, sql: str, *args) -> int:
    if not db.exists():
        return 0
    with contextlib.suppress(sqlite3.Error), sqlite3.connect(db) as c:
        return c.execute(sql, args).fetchone()[0]
    return 0
