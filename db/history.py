"""The history library: open (migrating), and the writes the farm makes while a run goes on.

Every write is one short transaction; results arrive in batches through Core bulk inserts, each
batch committed as it arrives, so a crash of the writer loses nothing already received.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterable
from typing import Self

from sqlalchemy import bindparam, func, insert, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from db import models as m
from db.engine import make_engine
from db.errors import EXIT_USAGE, FarmError
from db.events import RESULT_COLUMNS, BatchRows, batch_rows, device_row
from db.location import Location, resolve
from db.migrate import upgrade
from db.opening import check_integrity, exit_code, explain, prepare_file

# A run whose heartbeat is older than this when the history is opened for writing is aborted.
STALE_AFTER_S = 900.0
# A farm driver beats every few seconds (farm.runner.record); this many seconds without a beat
# and its run is orphaned.
DRIVER_LEASE_S = 60.0
RUN_STATUSES = ("running", "passed", "failed", "incomplete", "aborted")
JOB_STATUSES = ("running", "passed", "failed", "lost", "crashed", "timeout", "error")


# The per-job statements, built once: a run writes a few of them per device, and building and
# caching a Core statement on each call cost more than executing it (70 against 130 us).
_J, _R = m.jobs.c, m.runs.c
_START_RUN = insert(m.runs)
_ADD_JOB = (insert(m.jobs).returning(_J.id)
            .values(run_id=bindparam("run_id"), device_id=bindparam("device_id"),
                    node_id=bindparam("node_id"), attempts=1, status="running", error=None,
                    started=bindparam("started"), finished=None))
_FINISH_JOB = (update(m.jobs).where(_J.id == bindparam("job"))
               .values(status=bindparam("status"), error=bindparam("error"),
                       attempts=bindparam("attempts"), finished=bindparam("now")))
_BEAT_JOB = (update(m.runs)
             .where(_R.id == select(_J.run_id).where(_J.id == bindparam("job")).scalar_subquery())
             .values(heartbeat=bindparam("now")))
_FINISH_RUN = (update(m.runs).where(_R.id == bindparam("run"))
               .values(status=bindparam("status"), finished=bindparam("now"),
                       heartbeat=bindparam("now")))


def new_run_id(now: float) -> str:
    """Sortable by time, unique across concurrent writers, short enough to type a prefix of."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(3)


class History:
    """One history database. ``engine`` writes (or reads, when opened with ``write=False``)."""

    def __init__(self, loc: Location, engine: Engine, *, writable: bool):
        self.location = loc
        self.engine = engine
        self.writable = writable
        self._query_engine: Engine | None = None
        self.swept: list[str] = []  # orphaned runs this open marked aborted (`_sweep_orphans`)
        # variant_key -> devices.id, of devices committed (a device row is never changed or
        # removed): `add_job` then writes one row, not three statements, per job.
        self._devices: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"History({self.location.describe()!r})"

    def close(self) -> None:
        self.engine.dispose()
        if self._query_engine is not None:
            self._query_engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def query_engine(self) -> Engine:
        """An engine on which the database itself refuses every write (for `farm query`)."""
        if self._query_engine is None:
            self._query_engine = make_engine(self.location, "query")
        return self._query_engine

    # -- runs -----------------------------------------------------------------------------------

    def start_run(
        self, suite: str, selector: str, revision: dict | None, *, started: float | None = None,
        context: dict | None = None, source_digest: str | None = None,
    ) -> str:
        """A new run, ``running``. ``context``: what changes dispatch
        (`dflash2.runtime_context.run_context`); ``source_digest``: an ingested file's digest,
        unique (a second start with it raises IntegrityError; `db.ingest` looks first)."""
        now = time.time() if started is None else started
        rev = revision or {}
        run_id = new_run_id(now)
        with self._tx() as c:
            c.execute(
                _START_RUN,
                {
                    "id": run_id,
                    "suite": suite or "",
                    "selector": selector or "",
                    "git_sha": rev.get("git_sha") or rev.get("sha"),
                    "dirty": None if rev.get("dirty") is None else bool(rev.get("dirty")),
                    "tree_hash": rev.get("tree_hash"),
                    "started": now,
                    "finished": None,
                    "status": "running",
                    "heartbeat": now,
                    "context": None if context is None else json.dumps(context, sort_keys=True),
                    "source_digest": source_digest,
                },
            )
        return run_id

    def heartbeat(self, run_id: str) -> None:
        with self._tx() as c:
            c.execute(update(m.runs).where(m.runs.c.id == run_id).values(heartbeat=time.time()))

    def finish_run(self, run_id: str, status: str) -> None:
        _check(status, RUN_STATUSES, "run status")
        now = time.time()
        with self._tx() as c:
            done = c.execute(_FINISH_RUN, {"run": run_id, "status": status, "now": now})
            if done.rowcount == 0:
                raise FarmError(f"unknown run {run_id!r}: see `farm runs`", EXIT_USAGE)

    # -- jobs -----------------------------------------------------------------------------------

    def add_job(
        self,
        run_id: str,
        device: dict,
        host: str | None = None,
        os: str | None = None,
        node_id: str | None = None,
    ) -> int:
        row = device_row(device, host, os)
        key = row["variant_key"]
        job = {"run_id": run_id, "device_id": self._devices.get(key), "node_id": node_id,
               "started": time.time()}
        try:
            with self._tx() as c:
                if job["device_id"] is None:
                    job["device_id"] = self._device_id(c, row)
                job_id = c.execute(_ADD_JOB, job).scalar_one()
        except IntegrityError:  # the run's foreign key: no such run (the device exists)
            raise FarmError(f"unknown run {run_id!r}: see `farm runs`", EXIT_USAGE) from None
        self._devices[key] = job["device_id"]  # committed: a device row is never removed
        return job_id

    def _device_id(self, c: Connection, row: dict) -> int:
        q = select(m.devices.c.id).where(m.devices.c.variant_key == row["variant_key"])
        found = c.execute(q).scalar()
        if found is not None:
            return found
        try:
            with c.begin_nested():
                return c.execute(insert(m.devices).returning(m.devices.c.id), row).scalar_one()
        except IntegrityError:  # another writer registered the same device first
            return c.execute(q).scalar_one()

    def ingest_events(self, job_id: int, events: Iterable[dict]) -> int:
        """Write one batch of JSONL objects in one transaction; returns the results written.

        Only ``result`` objects carry rows; other types (and unknown ones) are accepted and
        ignored. The run's heartbeat moves with every batch.
        """
        rows = batch_rows(job_id, events)
        with self._tx() as c:
            # The heartbeat first: one statement both moves it and finds the job's run.
            beat = c.execute(_BEAT_JOB, {"job": job_id, "now": time.time()})
            if beat.rowcount != 1:
                raise FarmError(f"unknown job {job_id}: add it with add_job first", EXIT_USAGE)
            if rows.results:
                _insert_results(c, rows)
        return len(rows.results)

    def ingest_many(self, batches: Iterable[tuple[int, Iterable[dict]]]) -> int:
        """`ingest_events` for several jobs' batches in one transaction: what the run loop
        received from every device in one wakeup. One commit and one executemany per table
        for all of them, so the head's cost per batch does not grow with the fleet."""
        rows, jobs = BatchRows(), set()
        for job_id, events in batches:
            jobs.add(job_id)
            batch_rows(job_id, events, into=rows)
        if not jobs:
            return 0
        with self._tx() as c:
            found = dict(c.execute(select(m.jobs.c.id, m.jobs.c.run_id)
                                   .where(m.jobs.c.id.in_(sorted(jobs)))).all())
            if missing := sorted(jobs - set(found)):
                raise FarmError(f"unknown job {missing[0]}: add it with add_job first",
                                EXIT_USAGE)
            c.execute(update(m.runs).where(m.runs.c.id.in_(sorted(set(found.values()))))
                      .values(heartbeat=time.time()))
            if rows.results:
                _insert_results(c, rows)
        return len(rows.results)

    def finish_job(
        self, job_id: int, status: str, error: str | None = None, attempts: int = 1
    ) -> None:
        _check(status, JOB_STATUSES, "job status")
        with self._tx() as c:
            done = c.execute(_FINISH_JOB, {"job": job_id, "status": status, "error": error,
                                           "attempts": attempts, "now": time.time()})
            if done.rowcount == 0:
                raise FarmError(f"unknown job {job_id}", EXIT_USAGE)

    # -- verdicts (for writers that have no status of their own, e.g. a local pytest run) --------

    def job_verdict(self, job_id: int) -> str:
        """``failed`` when any result is an unexpected failure or a crash, else ``passed``."""
        with self.engine.connect() as c:
            bad = c.execute(
                select(func.count()).select_from(m.results).where(
                    m.results.c.job_id == job_id,
                    m.results.c.category.in_(("unexpected_fail", "crashed")),
                )
            ).scalar_one()
        return "failed" if bad else "passed"

    def run_verdict(self, run_id: str) -> str:
        """A run's status from its jobs: any lost job makes it incomplete, any failure failed."""
        with self.engine.connect() as c:
            statuses = set(c.execute(select(m.jobs.c.status).where(m.jobs.c.run_id == run_id))
                           .scalars())
        if not statuses or statuses & {"lost", "running"}:
            return "incomplete"
        return "passed" if statuses == {"passed"} else "failed"

    # -- baselines ------------------------------------------------------------------------------

    def set_baseline(self, run_id: str, variant_keys: Iterable[str]) -> list[str]:
        """Make ``run_id`` the baseline of its own suite on each device variant: a baseline is
        per (suite, variant), since runs of different suites share no test to compare."""
        keys = sorted(set(variant_keys))
        now = time.time()
        with self._tx() as c:
            self._require_run(c, run_id)
            suite = c.execute(select(m.runs.c.suite).where(m.runs.c.id == run_id)).scalar_one()
            c.execute(m.baselines.delete().where(m.baselines.c.suite == suite,
                                                 m.baselines.c.variant_key.in_(keys)))
            if keys:
                c.execute(insert(m.baselines), [{"suite": suite, "variant_key": k,
                                                 "run_id": run_id, "set_at": now} for k in keys])
        return keys

    # -- housekeeping ---------------------------------------------------------------------------

    def abort_stale_runs(self, stale_after: float = STALE_AFTER_S) -> list[str]:
        """Mark ``running`` runs whose writer stopped beating as ``aborted`` (their jobs lost)."""
        cutoff = time.time() - stale_after
        with self._tx() as c:
            stale = list(c.execute(select(m.runs.c.id).where(
                m.runs.c.status == "running", m.runs.c.heartbeat < cutoff)).scalars())
            if stale:
                c.execute(update(m.runs).where(m.runs.c.id.in_(stale))
                          .values(status="aborted", finished=m.runs.c.heartbeat))
                c.execute(update(m.jobs).where(m.jobs.c.run_id.in_(stale),
                                               m.jobs.c.status == "running")
                          .values(status="lost", error="writer stopped: run aborted"))
        return stale

    def abort_orphaned_runs(self, stale_after: float) -> list[str]:
        """Mark ``aborted`` the ``running`` runs of a `farm run` driver that is gone: no
        heartbeat for ``stale_after`` seconds (a driver beats every few seconds from before its
        fleet starts to its last write), their running jobs lost. Runs recorded by a local pytest
        session (``--farm-db``: its jobs have no Ray node) or from a file beat only with their
        result batches, so a slow test would look orphaned: those are ``abort_stale_runs``'s."""
        with self._tx() as c:
            orphans = list(c.execute(_orphans(stale_after)).scalars())
            if orphans:
                c.execute(update(m.runs).where(m.runs.c.id.in_(orphans))
                          .values(status="aborted", finished=m.runs.c.heartbeat))
                c.execute(update(m.jobs).where(m.jobs.c.run_id.in_(orphans),
                                               m.jobs.c.status == "running")
                          .values(status="lost", error=f"driver gone (no heartbeat for "
                                                       f"{stale_after:g}s): run aborted"))
        return orphans

    def _tx(self):
        if not self.writable:
            raise FarmError("this history was opened read-only", EXIT_USAGE)
        return self.engine.begin()

    @staticmethod
    def _require_run(c: Connection, run_id: str) -> None:
        if c.execute(select(m.runs.c.id).where(m.runs.c.id == run_id)).scalar() is None:
            raise FarmError(f"unknown run {run_id!r}: see `farm runs`", EXIT_USAGE)


def _orphans(stale_after: float):
    """``running`` runs of a farm driver (jobs on Ray nodes, not from a file) whose heartbeat
    is older than ``stale_after``."""
    local = select(m.jobs.c.id).where(m.jobs.c.run_id == m.runs.c.id,
                                      m.jobs.c.node_id.is_(None)).exists()
    return select(m.runs.c.id).where(
        m.runs.c.status == "running", m.runs.c.heartbeat < time.time() - stale_after,
        m.runs.c.source_digest.is_(None), ~local)


def _sweep_orphans(loc: Location, read_engine: Engine, write_engine: Engine) -> list[str]:
    """Any command that opens the history marks runs whose driver's lease lapsed ``aborted``,
    so a SIGKILLed `farm run` shows as such within ``DRIVER_LEASE_S``, not after 15 minutes.
    Looked for with a read first: a listing takes the writer lock only when there is one. A
    history this process may not write (a read-only file) is left as it is."""
    with read_engine.connect() as c:
        if c.execute(_orphans(DRIVER_LEASE_S).limit(1)).first() is None:
            return []
    try:
        return History(loc, write_engine, writable=True).abort_orphaned_runs(DRIVER_LEASE_S)
    except (DBAPIError, SQLAlchemyError):
        return []


def _insert_results(c: Connection, rows: BatchRows) -> None:
    """The batch's row tuples in one executemany, straight to the driver: one row per result,
    its details already JSON on it (`db.details`), so no ids are needed back and SQLite and
    PostgreSQL take the same statement (only the driver's parameter marker differs)."""
    _executemany(c, m.results, RESULT_COLUMNS, rows.results)


def _executemany(c: Connection, table, columns: tuple[str, ...], rows: list[tuple]) -> None:
    """Tuples in ``columns`` order into ``table``: through the driver's executemany when it
    takes positional parameters (sqlite3's ``?``, psycopg's ``%s``), else through a Core bulk
    insert of dicts."""
    d = c.dialect
    if d.paramstyle in _MARKS:
        c.exec_driver_sql(_insert_sql(d, table.name, columns), rows)
    else:
        c.execute(insert(table), [dict(zip(columns, r, strict=True)) for r in rows])


_MARKS = {"qmark": "?", "format": "%s", "pyformat": "%s"}
_INSERTS: dict[tuple[str, str, str, tuple[str, ...]], str] = {}


def _insert_sql(dialect, table: str, columns: tuple[str, ...]) -> str:
    """``INSERT INTO table (columns) VALUES (markers)``, quoted as the dialect needs; cached by
    (dialect, marker, table, columns)."""
    key = (dialect.name, dialect.paramstyle, table, columns)
    if (sql := _INSERTS.get(key)) is None:
        q, mark = dialect.identifier_preparer.quote, _MARKS[dialect.paramstyle]
        sql = _INSERTS[key] = (f"INSERT INTO {q(table)} ({', '.join(q(k) for k in columns)}) "
                               f"VALUES ({', '.join([mark] * len(columns))})")
    return sql


def _check(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise FarmError(f"bad {what} {value!r}: one of {', '.join(allowed)}", EXIT_USAGE)


def open_history(
    url_or_path: str | os.PathLike | None = None,
    *,
    write: bool = True,
    stale_after: float = STALE_AFTER_S,
) -> History:
    """Open (creating and migrating) the history; ``write=False`` for listings and queries.

    Every failure a user can cause -- a file that is not a database, a path that cannot be
    created, a schema newer than this code, an unreachable server -- is one ``FarmError`` line.
    """
    loc = resolve(url_or_path)
    where = loc.describe()
    if loc.is_sqlite:
        prepare_file(loc.path, write=write)
        check_integrity(loc.path, write=write)
    try:
        read_engine, write_engine = make_engine(loc, "read"), make_engine(loc, "write")
        upgrade(read_engine, write_engine, where)
        swept = _sweep_orphans(loc, read_engine, write_engine)
        if not write:
            write_engine.dispose()
            h = History(loc, read_engine, writable=False)
            h.swept = swept
            return h
        read_engine.dispose()
        h = History(loc, write_engine, writable=True)
        h.swept = swept
        h.abort_stale_runs(stale_after)
        return h
    except FarmError:
        raise
    except (DBAPIError, SQLAlchemyError) as e:
        raise FarmError(explain(e, where), exit_code(e, loc)) from None
