"""Launching `farm run` with an embedded fleet in a subprocess, and finding what it left behind.

Every process of a fleet inherits the environment of the `farm` that started it, so a marker
variable the test sets (``FARM_TEST_MARK``) names all of them, whatever Ray renamed them to
(``ray::DashboardAgent``) and whoever reparented them: after the run, no live process may carry
the marker. psutil is Ray's own copy (on sys.path once ``ray`` is imported).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FARM = [sys.executable, "-c", "from farm.cli.app import main; main()"]
MARK = "FARM_TEST_MARK"


def psutil():
    import ray  # noqa: F401  (puts Ray's psutil on sys.path)

    return importlib.import_module("psutil")


def launch(*args: str, stderr=subprocess.PIPE) -> tuple[subprocess.Popen, str]:
    """`farm run ARGS` with an embedded fleet (no cluster in the environment); (proc, mark)."""
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env.update({MARK: mark, "PYTHONUNBUFFERED": "1"})
    proc = subprocess.Popen([*FARM, "run", *args], cwd=REPO, env=env, text=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr)
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


def left_behind(mark: str, grace: float = 5.0) -> list[str]:
    """What still runs with ``mark`` after ``grace`` seconds ("pid name" each)."""
    deadline = time.monotonic() + grace
    while True:
        procs = marked(mark)
        if not procs or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    ps, names = psutil(), []
    for p in procs:
        with contextlib.suppress(ps.Error):  # gone meanwhile
            names.append(f"{p.pid} {p.name()}")
    return names


def kill_marked(mark: str) -> None:
    """Cleanup after a failed test: nothing of it may outlive the test."""
    ps = psutil()
    for p in marked(mark):
        with contextlib.suppress(ps.Error):
            p.kill()


def ro(db: Path, sql: str) -> list[tuple]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
            return c.execute(sql).fetchall()
    except sqlite3.Error:
        return []
