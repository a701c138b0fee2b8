"""Builders for results-stream events and crafted runs, shared by the db tests.

Plain functions (no pytest fixtures at module scope), so each test owns its database in its
own tmp_path and the tests run in any order under pytest-xdist.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

G13S = {"arch": "applegpu_g13s", "generation": 13, "size": "s", "chip": "Apple M1 Max",
        "backend": "metal", "mlx_version": "0.32.4", "emulated": False}


def device(**over) -> dict:
    return {**G13S, **over}


def session_start(dev: dict | None = None, host: str = "mac-1", suite: str = "m8-parity",
                  t: float = 1764680000.0) -> dict:
    return {"type": "session_start", "schema": 1, "time": t, "device": dev or device(),
            "host": host, "os": "Darwin 24.1", "suite": suite, "args": ["suites"],
            "expectations": "suites/expectations.txt", "future_key": {"ignored": True}}


def result(nodeid: str = "suites/test_parity.py::test_m8[gate_up-bfloat16]", *,
           outcome: str = "passed", category: str | None = None, expected: str = "pass",
           measurements: list[dict] | None = None, selections: list[dict] | None = None,
           fingerprints: list[dict] | None = None, message: str = "",
           link: str | None = None) -> dict:
    test_id, _, params = nodeid.partition("[")
    if category is None:
        category = {"passed": "expected_pass", "skipped": "skipped"}.get(outcome,
                                                                          "unexpected_fail")
    return {"type": "result", "nodeid": nodeid, "test_id": test_id, "params": params.rstrip("]"),
            "outcome": outcome, "duration": 0.01, "message": message,
            "expectation": {"expected": expected, "link": link, "reason": "",
                            "category": category},
            "measurements": measurements or [], "selections": selections or [],
            "fingerprints": fingerprints or [], "time": 1764680001.0, "unknown": 1}


def sel(variant: str, op: str = "gate_up", M: int = 8, reason: str = "tuned") -> dict:
    return {"op": op, "dtype": "bfloat16", "M": M, "K": 5120, "N": 17408, "variant": variant,
            "reason": reason}


def meas(name: str, value: float | None, bound: float | None = None, unit: str = "abs") -> dict:
    return {"name": name, "value": value, "unit": unit, "bound": bound}


def session_finish(t: float = 1764680100.0) -> dict:
    return {"type": "session_finish", "time": t, "exitstatus": 0, "counts": {}}


def record(h, events_by_device: list[tuple[dict, str, list[dict]]], *, suite: str = "m8-parity",
           started: float | None = None) -> str:
    """One finished run through the farm's library calls: [(device, host, result events)]."""
    run_id = h.start_run(suite, "g13s", {"git_sha": "a" * 40, "dirty": False,
                                          "tree_hash": "t"}, started=started)
    for dev, host, events in events_by_device:
        job = h.add_job(run_id, dev, host, "Darwin 24.1", f"node-{host}")
        h.ingest_events(job, [session_start(dev, host), *events, session_finish()])
        h.finish_job(job, h.job_verdict(job))
    h.finish_run(run_id, h.run_verdict(run_id))
    return run_id


def write_jsonl(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


PG_URL = os.environ.get("FARM_TEST_DB_URL", "")
PG_SKIP = "FARM_TEST_DB_URL is not set: start one with `.ci/start-postgres.sh` to run on PostgreSQL"


def backends() -> list:
    """`sqlite` always; `postgresql` when FARM_TEST_DB_URL names a server (else skipped)."""
    return ["sqlite", pytest.param("postgresql", marks=pytest.mark.skipif(not PG_URL,
                                                                          reason=PG_SKIP))]


def fresh_db(kind: str, tmp_path: Path) -> str:
    """A URL or path to an empty history of the given backend, private to this test."""
    if kind == "sqlite":
        return str(tmp_path / "history.db")
    return fresh_pg_database(PG_URL)


def fresh_pg_database(url: str) -> str:
    """A private schema on the server, named on the URL's search_path: tests run in parallel
    workers, and a schema is far cheaper to create than a database."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    base = make_url(url)
    name = f"farm_t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE SCHEMA "{name}"'))
    admin.dispose()
    return base.update_query_dict({"options": f"-csearch_path={name}"}).render_as_string(
        hide_password=False)


def seed_old_job(c, suite: str = "m8-parity") -> None:
    """A run 'r-old', one device and its job, by plain SQL on connection ``c``: what a history
    written by an older schema holds before its results (the migration tests). No explicit
    ids: a PostgreSQL sequence would not know them and collide later."""
    from sqlalchemy import text

    c.execute(text("INSERT INTO runs (id, suite, selector, started, status, heartbeat) "
                   "VALUES ('r-old', :s, 'g13s', 1000, 'passed', 1000)"), {"s": suite})
    c.execute(text("INSERT INTO devices (variant_key, lineage_key, arch, generation, "
                   "size, chip, backend, host, os, mlx_version, emulated) VALUES ('v', "
                   "'l', 'applegpu_g13s', 13, 's', 'Apple M1 Max', 'metal', 'mac-1', "
                   "'Darwin', '0.32.4', false)"))
    c.execute(text("INSERT INTO jobs (run_id, device_id, attempts, status, started) "
                   "SELECT 'r-old', id, 1, 'passed', 1000 FROM devices"))
