"""A `farm run` whose driver is gone (SIGKILL: no handler runs) is marked ``aborted`` by the
next command that opens the history, a read included, once its lease (``DRIVER_LEASE_S``)
lapsed; a live driver's run and a local pytest run (which beats only with its batches) stay."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from db_fixtures import device
from sqlalchemy import text

from db import open_history
from db.history import DRIVER_LEASE_S

REPO = Path(__file__).resolve().parent.parent
FARM = [sys.executable, "-c", "from farm.cli.app import script; script()"]


def _running(h, *, age: float, node: str | None) -> str:
    run = h.start_run("m8-parity", "g13s", None)
    h.add_job(run, device(), "mac-1", "Darwin", node)
    with h.engine.begin() as c:
        c.execute(text("UPDATE runs SET heartbeat = :t WHERE id = :r"),
                  {"t": time.time() - age, "r": run})
    return run


def test_an_orphaned_run_is_aborted_by_the_next_read(tmp_path):
    db = tmp_path / "h.db"
    h = open_history(db)
    gone = _running(h, age=DRIVER_LEASE_S + 30, node="node-1")
    live = _running(h, age=1.0, node="node-2")
    local = _running(h, age=DRIVER_LEASE_S + 30, node=None)
    h.close()
    out = subprocess.run([*FARM, "runs", "--db", str(db), "--json"], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    status = {r["run_id"]: r["status"] for r in json.loads(out.stdout)}
    assert status == {gone: "aborted", live: "running", local: "running"}
    with open_history(db, write=False) as h, h.engine.connect() as c:
        job = c.execute(text("SELECT status, error FROM jobs WHERE run_id = :r"),
                        {"r": gone}).one()
    assert job.status == "lost" and "driver gone" in job.error


def test_a_read_with_no_orphan_takes_no_writer_lock(tmp_path):
    db = tmp_path / "h.db"
    h = open_history(db)
    _running(h, age=1.0, node="node-1")
    h.close()
    before = db.read_bytes()
    subprocess.run([*FARM, "runs", "--db", str(db)], cwd=REPO, capture_output=True,
                   text=True, timeout=60, check=True)
    assert db.read_bytes() == before
