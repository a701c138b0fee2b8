"""Launching `farm run` with an embedded fleet in a subprocess, and finding what it left behind.

Ray's processes inherit the environment of the `farm` that started them, so a marker variable
the test sets (``FARM_TEST_MARK``) names most of them; ``Seen`` also remembers the fleet's
processes by identity while it runs, and its session directory (see there). After the run none
may be alive. psutil is Ray's own copy (on sys.path once ``ray`` is imported).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FARM = [sys.executable, "-c", "from farm.cli.app import script; script()"]
MARK = "FARM_TEST_MARK"


def psutil():
    import ray  # noqa: F401  (puts Ray's psutil on sys.path)

    return importlib.import_module("psutil")


def launch(*args: str, stderr=subprocess.PIPE) -> tuple[subprocess.Popen, str]:
    """`farm run ARGS` with an embedded fleet (no cluster in the environment); (proc, mark)."""
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update({MARK: mark, "PYTHONUNBUFFERED": "1"})
    # Its own session: Ray's reaper, should it fire, signals the farm's process group, and
    # that must not be pytest's.
    proc = subprocess.Popen([*FARM, "run", *args], cwd=REPO, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                            start_new_session=True)
    return proc, mark


def marked(mark: str) -> list:
    """Live processes (zombies aside) carrying ``mark``."""
    ps = psutil()
    out = []
    for p in ps.process_iter():
        try:
            if p.environ().get(MARK) == mark and p.status() != ps.STATUS_ZOMBIE:
                out.append(p)
        except ps.Error:
            continue
    return out


class Seen:
    """What a run's fleet is made of, as seen while it runs: ``add`` records the farm's
    descendants and marked processes (pid and start time) and the Ray session directories on
    their command lines. Ray renames some processes (``ray::DashboardAgent``) and the new title
    overwrites their environment, so the marker alone cannot find them once orphaned: they are
    found by identity, or by the logs they hold open in the session directory."""

    def __init__(self, proc, mark: str):
        self.proc, self.mark = proc, mark
        self.known: dict[tuple[int, float], str] = {}
        self.sessions: set[str] = set()

    def add(self) -> list:
        ps = psutil()
        procs = marked(self.mark)
        with contextlib.suppress(ps.Error):
            procs += ps.Process(self.proc.pid).children(recursive=True)
        for p in procs:
            with contextlib.suppress(ps.Error):
                cmd = " ".join(p.cmdline())
                self.known[(p.pid, p.create_time())] = cmd[:200]
                self.sessions.update(re.findall(r"/[^\s=:]*/session_\d{4}-[\d_-]+", cmd))
        return procs

    def alive(self) -> list[str]:
        ps = psutil()
        out = []
        for p in ps.process_iter():
            with contextlib.suppress(ps.Error):
                if p.pid == os.getpid() or p.status() == ps.STATUS_ZOMBIE:
                    continue
                hit = (p.pid, p.create_time()) in self.known or p.environ().get(
                    MARK) == self.mark
                if not hit and self.sessions and p.cmdline()[:1] and p.cmdline()[0].startswith(
                        "ray::"):
                    hit = any(f.path.startswith(tuple(d + "/" for d in self.sessions))
                              for f in p.open_files())
                if hit:
                    out.append(f"{p.pid} {' '.join(p.cmdline())[:60]}")
        return out

    def left_behind(self, grace: float = 1.0) -> list[str]:
        """What of the fleet still runs ``grace`` seconds after the farm exited."""
        deadline = time.monotonic() + grace
        while (left := self.alive()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def kill(self) -> None:
        """Cleanup after a failed test: nothing of it may outlive the test."""
        ps = psutil()
        for p in ps.process_iter():
            with contextlib.suppress(ps.Error):
                if p.pid == os.getpid():
                    continue
                if (p.pid, p.create_time()) in self.known or p.environ().get(MARK) == self.mark:
                    p.kill()


def ro(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            return c.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def device_job_events(suite: str, **over) -> list[dict]:
    """Every event of one device job run in this process (no Ray), as a device runs it: in the
    tree, on an emulated g13s; ``over`` replaces fields of the job spec."""
    from farm.fleet.shipping import as_run_worker
    from farm.runner.device_job import run_job

    spec = {"suite": suite, "pytest_args": [suite], "test_timeout": 30, "job_timeout": 120,
            "device": {"arch": "applegpu_g13s", "emulated": True}, "deselect": [], **over}
    with as_run_worker(REPO):  # as a Ray worker of a run shipping this tree
        return [ev for batch in run_job(spec) for ev in batch]


def until_first_result(proc: subprocess.Popen, seen: Seen, db: Path,
                       within: float = 180) -> None:
    """Watch ``proc``'s processes (``seen``) until its first result is in ``db``; it must still
    be running then (a driver that ended first fails here with its stderr)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline and proc.poll() is None:
        seen.add()
        if ro(db, "select count(*) from results") not in ([], [(0,)]):
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1]
