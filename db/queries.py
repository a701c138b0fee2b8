"""Questions asked of the history: runs, one run's matrix, one test's series, user SQL.

Each returns plain JSON-able data; the CLI renders it (rich table or ``--json``). Device
filters are predicates over a device dict, so selector grammar stays in `devices.identity`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select, union
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from db import models as m
from db.details import COLUMNS as DETAIL_COLUMNS
from db.details import LAYOUTS, decode, decode_rows
from db.errors import EXIT_USAGE, FarmError
from db.events import CATEGORIES
from db.history import History

DeviceFilter = Callable[[dict], bool]
SELECTION_COLUMNS = LAYOUTS["selections"]
DEVICE_COLUMNS = ("id", "variant_key", "lineage_key", "arch", "generation", "size", "chip",
                  "backend", "host", "os", "mlx_version", "emulated")


def device_label(d: dict) -> str:
    """What a person reads in a column header: arch, emulation always visible, and host."""
    label = d["arch"] + (" (emulated)" if d["emulated"] else "")
    return f"{label} @{d['host']}" if d.get("host") else label


def devices(h: History) -> dict[int, dict]:
    with h.engine.connect() as c:
        rows = c.execute(select(*(m.devices.c[k] for k in DEVICE_COLUMNS))).mappings().all()
    out = {}
    for r in rows:
        d = dict(r)
        d["emulated"] = bool(d["emulated"])
        d["label"] = device_label(d)
        out[d["id"]] = d
    return out


def resolve_run(h: History, ref: str | None) -> str:
    """A run id from an exact id, a unique prefix, or ``latest`` / nothing for the newest run."""
    with h.engine.connect() as c:
        if not ref or ref in ("latest", "last"):
            run_id = c.execute(select(m.runs.c.id).order_by(m.runs.c.started.desc(),
                                                            m.runs.c.id.desc()).limit(1)).scalar()
            if run_id is None:
                raise FarmError("the history has no runs yet: record one with `farm run`",
                                EXIT_USAGE)
            return run_id
        if c.execute(select(m.runs.c.id).where(m.runs.c.id == ref)).scalar() is not None:
            return ref
        like = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        found = list(c.execute(select(m.runs.c.id).where(m.runs.c.id.like(like, escape="\\"))
                               .limit(3)).scalars())
    if len(found) == 1:
        return found[0]
    if not found:
        raise FarmError(f"unknown run {ref!r}: see `farm runs`", EXIT_USAGE)
    raise FarmError(f"run prefix {ref!r} is ambiguous ({', '.join(found[:2])}, ...): "
                    f"give more characters", EXIT_USAGE)


def run_suite(h: History, run_id: str) -> str:
    """The suite a run ran (its baselines and comparisons are that suite's)."""
    with h.engine.connect() as c:
        return c.execute(select(m.runs.c.suite).where(m.runs.c.id == run_id)).scalar_one()


def _counts(c, job_ids: list[int]) -> dict[int, dict[str, int]]:
    out: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(CATEGORIES, 0))
    if not job_ids:
        return out
    q = (select(m.results.c.job_id, m.results.c.category, func.count())
         .where(m.results.c.job_id.in_(job_ids))
         .group_by(m.results.c.job_id, m.results.c.category))
    for job_id, cat, n in c.execute(q):
        out[job_id][cat] = out[job_id].get(cat, 0) + n
    return out


def _run_dict(r: Any) -> dict:
    # "run_id", as in every other --json output (docs/RESULTS_FORMAT.md), never a bare "id".
    return {"run_id": r.id, "suite": r.suite, "selector": r.selector, "status": r.status,
            "started": r.started, "finished": r.finished, "heartbeat": r.heartbeat,
            "git_sha": r.git_sha, "dirty": None if r.dirty is None else bool(r.dirty),
            "tree_hash": r.tree_hash}


def list_runs(h: History, *, suite: str | None = None, device: DeviceFilter | None = None,
              limit: int = 20) -> list[dict]:
    devs = devices(h)
    with h.engine.connect() as c:
        q = select(m.runs).order_by(m.runs.c.started.desc(), m.runs.c.id.desc())
        if suite:
            q = q.where(m.runs.c.suite == suite)
        if device is not None:
            wanted = [i for i, d in devs.items() if device(d)]
            q = q.where(m.runs.c.id.in_(select(m.jobs.c.run_id)
                                        .where(m.jobs.c.device_id.in_(wanted))))
        runs = c.execute(q.limit(max(limit, 0))).all()
        ids = [r.id for r in runs]
        jobs = c.execute(select(m.jobs.c.id, m.jobs.c.run_id, m.jobs.c.device_id)
                         .where(m.jobs.c.run_id.in_(ids))).all() if ids else []
        counts = _counts(c, [j.id for j in jobs])
    out = []
    for r in runs:
        d = _run_dict(r)
        mine = [j for j in jobs if j.run_id == r.id]
        d["devices"] = [devs[j.device_id]["label"] for j in mine]
        total = dict.fromkeys(CATEGORIES, 0)
        for j in mine:
            for k, v in counts[j.id].items():
                total[k] = total.get(k, 0) + v
        d["counts"] = total
        out.append(d)
    return out


def run_jobs(h: History, run_id: str) -> list[dict]:
    devs = devices(h)
    with h.engine.connect() as c:
        jobs = c.execute(select(m.jobs).where(m.jobs.c.run_id == run_id)
                         .order_by(m.jobs.c.id)).all()
    return [{"id": j.id, "device": devs[j.device_id], "node_id": j.node_id,
             "attempts": j.attempts, "status": j.status, "error": j.error,
             "started": j.started, "finished": j.finished} for j in jobs]


def show_run(h: History, run_id: str) -> dict:
    """The run, its jobs, the test x device matrix of category counts, and the kernel
    selections each job made (with the implementation that executed them)."""
    with h.engine.connect() as c:
        run = _run_dict(c.execute(select(m.runs).where(m.runs.c.id == run_id)).one())
    jobs = run_jobs(h, run_id)
    job_ids = [j["id"] for j in jobs]
    matrix: dict[str, dict[int, dict[str, int]]] = defaultdict(dict)
    with h.engine.connect() as c:
        counts = _counts(c, job_ids)
        if job_ids:
            q = (select(m.results.c.test_id, m.results.c.job_id, m.results.c.category,
                        func.count())
                 .where(m.results.c.job_id.in_(job_ids))
                 .group_by(m.results.c.test_id, m.results.c.job_id, m.results.c.category))
            for test_id, job_id, cat, n in c.execute(q):
                matrix[test_id].setdefault(job_id, {})[cat] = n
        selections = _job_selections(c, jobs)
    for j in jobs:
        j["counts"] = counts[j["id"]]
    return {"run": run, "jobs": jobs,
            "matrix": [{"test_id": t, "cells": {str(k): v for k, v in sorted(cells.items())}}
                       for t, cells in sorted(matrix.items())],
            "selections": selections}


def _job_selections(c, jobs: list[dict]) -> list[dict]:
    """Each job's distinct selections, with how many results made each, in job then shape
    order. ``impl`` is null where it is unknown (recorded before results carried it). Read from
    the results' JSON (`db.details`) and counted here: one indexed read of the jobs' rows."""
    if not jobs:
        return []
    r = m.results.c
    tests: dict[tuple, int] = defaultdict(int)
    q = (select(r.job_id, r.selections_json)
         .where(r.job_id.in_([j["id"] for j in jobs]), r.selections_json.is_not(None)))
    for job_id, text in c.execute(q):
        for sel in {tuple(x) for x in decode_rows("selections", text)}:
            tests[(job_id, *sel)] += 1
    labels = {j["id"]: j["device"]["label"] for j in jobs}
    out = [{"job_id": k[0], "device": labels[k[0]],
            **dict(zip(SELECTION_COLUMNS, k[1:], strict=True)), "tests": n}
           for k, n in tests.items()]
    order = {j["id"]: i for i, j in enumerate(jobs)}
    out.sort(key=lambda d: (order[d["job_id"]], d["op"], d["dtype"], d["M"], d["K"], d["N"],
                            d["variant"], d["impl"] or "", d["reason"] or "", d["role"] or ""))
    return out


DETAILS = ("measurements", "selections", "fingerprints")


def result_details(h: History, result_ids: list[int], kinds: tuple[str, ...] = DETAILS
                   ) -> dict[int, dict[str, list[dict]]]:
    """Measurements, selections and fingerprints (those of ``kinds``) of the given results, by
    result id, each in the order the test made them (from the results' JSON, `db.details`)."""
    out: dict[int, dict[str, list[dict]]] = defaultdict(
        lambda: {"measurements": [], "selections": [], "fingerprints": []})
    if not result_ids:
        return out
    wanted = [k for k in DETAILS if k in kinds]
    r = m.results.c
    cols = [r[DETAIL_COLUMNS[k]] for k in wanted]
    with h.engine.connect() as c:
        for chunk in _chunks(result_ids, 500):
            for rid, *texts in c.execute(select(r.id, *cols).where(r.id.in_(chunk))):
                d = out[rid]
                for kind, text in zip(wanted, texts, strict=True):
                    if text:
                        d[kind] = decode(kind, text)
    return out


def _chunks(xs: list, n: int):
    for i in range(0, len(xs), n):
        yield xs[i:i + n]


def run_results(h: History, run_id: str) -> list[dict]:
    """Every result of a run with its children, device and job (for export and analysis): the
    results' columns, the JSON columns decoded into ``measurements``, ``selections`` and
    ``fingerprints`` (`db.details`) in the same read."""
    jobs = {j["id"]: j for j in run_jobs(h, run_id)}
    with h.engine.connect() as c:
        rows = c.execute(select(m.results).where(m.results.c.job_id.in_(list(jobs)))
                         .order_by(m.results.c.id)).mappings().all() if jobs else []
    out = []
    for r in rows:
        d = dict(r)
        for kind, column in DETAIL_COLUMNS.items():
            d[kind] = decode(kind, d.pop(column))
        d["device"] = jobs[r["job_id"]]["device"]
        out.append(d)
    return out


def test_history(h: History, test: str, *, device: DeviceFilter | None = None,
                 limit: int = 50) -> list[dict]:
    """One test's outcomes and measurements over runs, newest last (a series to read down).

    The newest ``limit`` results of the test (by run start, then result id): runs are read
    newest first, in growing chunks that never split runs started at the same time, and each
    chunk's results of the test are looked up by job in ``ix_results_job_id_nodeid`` -- the
    node id ``test``, or the node ids of its parameters, ``test[...`` -- until ``limit`` are
    found: the cost grows with the runs read, not with the history. (Reading every result of
    the test and sorting them all took 160 ms at a million results.)
    """
    devs = devices(h)
    r, j, ru = m.results.c, m.jobs.c, m.runs.c
    q = (select(r.id, r.nodeid, r.params, r.outcome, r.category, r.duration, r.message,
                j.device_id, ru.id.label("run_id"), ru.started)
         .select_from(m.runs).join(m.jobs, j.run_id == ru.id).join(m.results, r.job_id == j.id))
    if device is not None:
        q = q.where(j.device_id.in_([i for i, d in devs.items() if device(d)]))

    def of_runs(ids: list[str]):
        # A UNION, not an OR: each side is its own lookup in (job_id, nodeid).
        mine = q.where(j.run_id.in_(ids))
        return union(mine.where(r.nodeid == test),
                     mine.where(_params_of(r.nodeid, test, h.engine.dialect.name),
                                r.test_id == test))

    limit = max(limit, 0)
    rows: list = []
    with h.engine.connect() as c:
        newest = c.execute(select(ru.id, ru.started).order_by(ru.started.desc(), ru.id.desc()))
        chunk, size = newest.fetchmany(8), 8
        while chunk and len(rows) < limit:
            nxt = newest.fetchone()
            while nxt is not None and nxt.started == chunk[-1].started:
                chunk.append(nxt)
                nxt = newest.fetchone()
            rows += c.execute(of_runs([x.id for x in chunk])).mappings().all()
            size = min(size * 4, 512)
            chunk = ([nxt] if nxt is not None else []) + newest.fetchmany(size - 1)
        newest.close()
    rows.sort(key=lambda x: (x["started"], x["id"]), reverse=True)
    rows = rows[:limit]
    if not rows:
        raise FarmError(f"no results for test {test!r}"
                        f"{' on the selected devices' if device else ''} in the history "
                        f"(ids look like suites/test_x.py::test_name)", EXIT_USAGE)
    details = result_details(h, [x["id"] for x in rows], kinds=("measurements",))
    out = []
    for x in reversed(rows):
        d = {k: x[k] for k in ("run_id", "started", "nodeid", "params", "outcome", "category",
                               "duration", "message")}
        d["device"] = devs[x["device_id"]]["label"]
        d["variant_key"] = devs[x["device_id"]]["variant_key"]
        d["measurements"] = details[x["id"]]["measurements"]
        out.append(d)
    return out


def _params_of(nodeid, test: str, dialect: str):
    """``nodeid`` is one of ``test``'s parametrized node ids (``test[...]``). On SQLite, whose
    text compares bytewise, as a range (``test[`` <= nodeid < ``test\\``, ``\\`` being the
    byte after ``[``), which an index on (job_id, nodeid) serves; elsewhere a collation may not
    sort by bytes, so a prefix LIKE (served by that index under a C collation, else read from
    the job's index entries)."""
    if dialect == "sqlite":
        return (nodeid >= test + "[") & (nodeid < test + "\\")
    return nodeid.startswith(test + "[", autoescape=True)


def run_query(h: History, sql: str) -> tuple[list[str], list[list[Any]]]:
    """User SQL on a connection the database keeps read-only; its errors are one line.

    The statement goes to the driver's own cursor without parameters, so its text is the user's
    exactly (no bind-marker parsing: `LIKE 'a%'` works on every driver), inside the read-only
    transaction the query engine opens, and is rolled back whatever it did.
    """
    try:
        with h.query_engine().connect() as c:
            dbapi_error = c.dialect.loaded_dbapi.Error
            tx = c.begin()
            cur = c.connection.dbapi_connection.cursor()
            # psycopg: a prepared statement holds exactly one command, so `COMMIT; DELETE ...`
            # cannot step out of the read-only transaction (sqlite3 allows one statement anyway).
            extra = {"prepare": True} if c.dialect.driver == "psycopg" else {}
            try:
                cur.execute(sql, **extra)
                if cur.description is None:
                    return [], []
                return [d[0] for d in cur.description], [list(r) for r in cur.fetchall()]
            except dbapi_error as e:
                raise FarmError(_query_error(e), EXIT_USAGE) from None
            finally:
                cur.close()
                tx.rollback()
    except (DBAPIError, SQLAlchemyError) as e:
        raise FarmError(_query_error(e), EXIT_USAGE) from None


def _query_error(e: Exception) -> str:
    orig = getattr(e, "orig", None) or e
    msg = " ".join(str(orig).split())
    low = msg.lower()
    if "readonly" in low or "read-only" in low or "read only" in low or "query_only" in low:
        return f"refused: `farm query` is read-only ({msg})"
    if "not authorized" in low:  # the query engine's authorizer (db/engine.py)
        return (f"refused: `farm query` reads this history only; ATTACH and DETACH are not "
                f"allowed ({msg})")
    if "multiple commands" in low or "one statement at a time" in low:
        return f"invalid SQL: give one statement at a time ({msg})"
    return f"invalid SQL: {msg[:300]}"
