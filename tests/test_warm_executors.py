"""Warm executors (`farm.fleet.executor`): a run on a warm fleet starts no Ray worker.

Real Ray on loopback, a fleet per test in a state directory of its own (`warm_cli`). What ran a
device job is read from the job's own pytest process (the fixture suite writes its process
ancestry and the farm package it imported), not from anything the farm says of itself.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from farm_procs import psutil
from warm_cli import FARM, REPO, fleet_cli

from farm.fleet import executor

FIX = "tests/farm_fixtures"
ANCESTRY = f"{FIX}/suite_ancestry.py"


@pytest.fixture
def cli(tmp_path):
    yield from fleet_cli(tmp_path)


def _where(seen: Path) -> dict:
    files = sorted(seen.glob("*.json"))
    assert len(files) == 1, files
    rec = json.loads(files[0].read_text())
    files[0].unlink()
    return rec


def _run(cli, db: Path, suite: str = ANCESTRY, **env: str) -> subprocess.CompletedProcess:
    out = cli("run", "--suite", suite, "--devices", "g13s", "--db", str(db), "--json", **env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["jobs"][0]["status"] == "passed"
    return out


def test_a_warm_run_is_run_by_its_nodes_executor_in_the_runs_own_tree(cli, tmp_path):
    seen = tmp_path / "seen"
    seen.mkdir()
    info = cli.up("--devices", "g13s", FARM_TEST_ANCESTRY=str(seen))
    for _ in range(2):  # and again: the executor outlives a run
        out = _run(cli, tmp_path / "h.db")
        assert "starts Ray workers" not in out.stderr, out.stderr
        _ran_by_an_executor(_where(seen))
    assert info["executors"] == executor.VERSION


def _ran_by_an_executor(rec: dict) -> None:
    pytest_parent, its_parent = rec["ancestors"][:2]
    # pytest <- the job's entry process <- the node's executor
    assert "-m farm.runner.exec_entry" in pytest_parent, rec
    assert its_parent.startswith("ray::NodeExecutor"), rec
    # the run's code: the job's checked copy of the staged tree, not the checkout
    assert "/farm-job-" in rec["farm"] and not rec["farm"].startswith(str(REPO)), rec


def _kill_executors(state: Path) -> None:
    """Kill the fleet's executors from a driver of the test's own (a subprocess)."""
    code = ("import json, sys, ray; from farm.fleet import cluster, executor; "
            "s = json.load(open(sys.argv[1])); cluster.use_token_auth(s['token']); "
            "cluster.connect(s['address']); "
            "[ray.kill(ray.get_actor(executor.name(n), namespace=cluster.NAMESPACE)) "
            "for n in s['nodes']]")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    out = subprocess.run([sys.executable, "-c", code, str(state)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-2000:]


def test_without_its_executors_a_warm_run_says_so_and_starts_ray_workers(cli, tmp_path):
    seen = tmp_path / "seen"
    seen.mkdir()
    cli.up("--devices", "g13s", FARM_TEST_ANCESTRY=str(seen))
    _kill_executors(cli.state)
    out = _run(cli, tmp_path / "h.db")
    said = [ln for ln in out.stderr.splitlines() if ln.startswith("warm fleet: ")]
    assert len(said) == 1 and "this run starts Ray workers" in said[0], out.stderr
    assert _where(seen)["ancestors"][0].startswith("ray::"), "a Ray worker ran the job"


def _job_processes() -> list[str]:
    ps, out = psutil(), []
    for p in ps.process_iter():
        try:
            cmd = " ".join(p.cmdline())
        except ps.Error:
            continue
        if "suite_hang.py" in cmd or "farm.runner.exec_entry" in cmd:
            out.append(f"{p.pid} {cmd[:100]}")
    return out


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_an_aborted_or_killed_warm_run_leaves_no_job_process_and_frees_the_device(cli, tmp_path,
                                                                                 sig):
    """Ctrl-C cancels the executor's call; a driver killed outright (no teardown at all) is
    noticed by the executor, which ends the job: either way the device is free at once, not
    after the job's timeout."""
    seen = tmp_path / "seen"
    seen.mkdir()
    cli.up("--devices", "g13s", FARM_TEST_ANCESTRY=str(seen))
    db = tmp_path / "h.db"
    proc = subprocess.Popen([*FARM, "run", "--suite", f"{FIX}/suite_hang.py", "--devices",
                             "g13s", "--test-timeout", "900", "--db", str(db)], cwd=REPO,
                            env=cli.env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while not any("suite_hang.py" in p and "pytest" in p for p in _job_processes()):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        time.sleep(1.0)  # inside test_hangs
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == (130 if sig == signal.SIGINT else -sig), err[-2000:]
    deadline = time.monotonic() + 20
    while (left := _job_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], left
    # the device's executor is free again: the next run is its
    _run(cli, db)
    assert "-m farm.runner.exec_entry" in _where(seen)["ancestors"][0]


def test_twins_on_a_warm_fleet_pull_their_tests_through_their_executors(cli, tmp_path):
    """`--devices g14*2` on a warm fleet of two g14 nodes: each twin's job is run by its node's
    executor and asks the run's queue through it (no job process connects to Ray)."""
    info = cli.up("--devices", "g14*2")
    db = tmp_path / "h.db"
    out = cli("run", "--suite", f"{FIX}/suite_twins.py", "--devices", "g14*2", "--db", str(db),
              "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "starts Ray workers" not in out.stderr, out.stderr
    job = json.loads(out.stdout)["jobs"][0]
    assert job["status"] == "passed" and job["counts"]["expected_pass"] == 16, job
    with sqlite3.connect(db) as c:
        per_node = dict(c.execute("select node, count(*) from results group by node"))
    assert sorted(per_node) == sorted(info["nodes"]) and sum(per_node.values()) == 16, per_node


def test_an_embedded_run_is_run_by_executors_of_its_own_job(cli, tmp_path):
    """No warm fleet up: the embedded fleet's device jobs also go to executors (actors of this
    run's driver: its job carries no runtime env, so Ray starts its workers without the
    runtime-env agent's setup), and still run the run's own checked copy of the tree."""
    seen = tmp_path / "seen"
    seen.mkdir()
    out = _run(cli, tmp_path / "h.db", FARM_TEST_ANCESTRY=str(seen))
    assert "run as Ray tasks" not in out.stderr, out.stderr
    _ran_by_an_executor(_where(seen))


def test_with_executors_off_an_embedded_run_runs_ray_tasks_that_carry_the_tree(cli, tmp_path):
    """``FARM_EXECUTORS=0``: the embedded fleet's device jobs run as Ray tasks, as on real
    Macs; the driver connects again with the shipped tree as its job's working_dir (a Ray task
    cannot carry a local one), and the job still runs its checked copy of it."""
    seen = tmp_path / "seen"
    seen.mkdir()
    out = _run(cli, tmp_path / "h.db", FARM_TEST_ANCESTRY=str(seen), FARM_EXECUTORS="0")
    assert "FARM_EXECUTORS=0: this run's device jobs run as Ray tasks" in out.stderr, out.stderr
    rec = _where(seen)
    pytest_parent = rec["ancestors"][0]
    assert pytest_parent.startswith("ray::run_job"), rec
    assert "/farm-job-" in rec["farm"] and not rec["farm"].startswith(str(REPO)), rec
