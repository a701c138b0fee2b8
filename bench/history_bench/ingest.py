"""Growing the database: runs through the library the farm uses, timed inside its calls only
(event generation outside the timer), and the same rows by plain sqlite3 beside it, so what the
library costs over the driver is measured at the same size and load."""

from __future__ import annotations

import cProfile
import io
import pstats
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from db import open_history
from history_bench.synthetic import BASELINED, RUN_EVERY_S, T0, _digest, run_events


@dataclass
class Ingest:
    runs: int = 0
    results: int = 0
    child_rows: int = 0
    seconds: float = 0.0  # inside the library calls only (wall)
    cpu_seconds: float = 0.0  # ... and this process's CPU time there
    gen_seconds: float = 0.0
    events_seconds: float = 0.0  # inside `ingest_events` only (wall): the rows' own cost


def ingest_run(h, run: int, st: Ingest, batch: int) -> str:
    g0 = time.perf_counter()
    per_device = run_events(run)
    st.gen_seconds += time.perf_counter() - g0
    t0, c0 = time.perf_counter(), time.process_time()
    run_id = h.start_run("all", "g13s,g14g,g15s,g16d,g14,g15",
                         {"git_sha": _digest("rev", run)[:40], "dirty": False,
                          "tree_hash": _digest("tree", run)[:40]},
                         started=T0 + run * RUN_EVERY_S)
    failed = False
    for dev, host, evs in per_device:
        job = h.add_job(run_id, dev, host, evs[0]["os"], f"node-{host}")
        e0 = time.perf_counter()
        for k in range(0, len(evs), batch):
            h.ingest_events(job, evs[k:k + batch])
        st.events_seconds += time.perf_counter() - e0
        bad = any(e.get("expectation", {}).get("category") == "unexpected_fail" for e in evs)
        failed |= bad
        h.finish_job(job, "failed" if bad else "passed")
    h.finish_run(run_id, "failed" if failed else "passed")
    st.seconds += time.perf_counter() - t0
    st.cpu_seconds += time.process_time() - c0
    st.runs += 1
    for _, _, evs in per_device:
        for e in evs:
            if e["type"] == "result":
                st.results += 1
                st.child_rows += (len(e["measurements"]) + len(e["selections"])
                                  + len(e["fingerprints"]))
    if run == 0:
        first_keys = []
        from db.events import device_row
        for i in BASELINED:
            dev, host, evs = per_device[i]
            first_keys.append(device_row(dev, host, evs[0]["os"])["variant_key"])
        h.set_baseline(run_id, first_keys)
    return run_id


def profile_ingest(h, first_run: int, n_runs: int, batch: int) -> str:
    """cProfile of ``n_runs`` more runs into the grown database (events made beforehand)."""
    per = [run_events(first_run + k) for k in range(n_runs)]
    pr = cProfile.Profile()
    pr.enable()
    for k, per_device in enumerate(per):
        run_id = h.start_run("all", "x", None, started=T0 + (first_run + k) * RUN_EVERY_S)
        for dev, host, evs in per_device:
            job = h.add_job(run_id, dev, host, evs[0]["os"], f"node-{host}")
            for b in range(0, len(evs), batch):
                h.ingest_events(job, evs[b:b + batch])
            h.finish_job(job, "passed")
        h.finish_run(run_id, "passed")
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).strip_dirs().sort_stats("tottime").print_stats(22)
    return s.getvalue()


def _raw_insert(con: sqlite3.Connection, job_id: int, evs: list[dict]) -> int:
    """What `ingest_events` writes, by plain sqlite3: the same row tuples
    (`db.events.batch_rows`, built inside the timer as the library builds them: each result's
    details as JSON on its row, schema 0006), one executemany, one transaction with the
    heartbeat."""
    from db.events import RESULT_COLUMNS, batch_rows

    rows = batch_rows(job_id, evs)
    con.execute("BEGIN IMMEDIATE")
    con.execute("UPDATE runs SET heartbeat = ? WHERE id = (SELECT run_id FROM jobs WHERE id = ?)",
                (time.time(), job_id))
    names = ", ".join(f'"{c}"' for c in RESULT_COLUMNS)
    con.executemany(f"INSERT INTO results ({names}) VALUES "
                    f"({', '.join('?' * len(RESULT_COLUMNS))})", rows.results)
    con.execute("COMMIT")
    return len(rows.results)


def raw_runs(db_path: Path, first_run: int, n_runs: int) -> Ingest:
    """``n_runs`` runs into ``db_path`` by plain sqlite3 (`_raw_insert`, one transaction per
    job), the runs and jobs made beforehand through the library, outside the timer; the same
    pragmas as the library's writer (WAL, synchronous NORMAL, foreign keys)."""
    st = Ingest()
    plan = []
    with open_history(str(db_path)) as h:
        for r in range(first_run, first_run + n_runs):
            run_id = h.start_run("all", "raw", None, started=T0 + r * RUN_EVERY_S)
            for dev, host, evs in run_events(r):
                plan.append((h.add_job(run_id, dev, host, evs[0]["os"], None), evs))
                st.child_rows += sum(len(e["measurements"]) + len(e["selections"])
                                     + len(e["fingerprints"]) for e in evs[1:-1])
    con = sqlite3.connect(db_path, isolation_level=None)
    for pragma in ("journal_mode = WAL", "synchronous = NORMAL", "foreign_keys = ON"):
        con.execute("PRAGMA " + pragma)
    t0, c0 = time.perf_counter(), time.process_time()
    for job_id, evs in plan:
        st.results += _raw_insert(con, job_id, evs)
    st.seconds, st.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    st.events_seconds = st.seconds
    con.close()
    st.runs = n_runs
    return st


def beside(db_path: Path, first_run: int, rounds: int, per: int, batch: int) -> dict:
    """The library and plain sqlite3 in turns (``rounds`` x ``per`` runs each) into the grown
    database, so both meet the same size and the same load: the rates to compare."""
    lib, raw = Ingest(), Ingest()
    run = first_run
    for _ in range(rounds):
        with open_history(str(db_path)) as h:
            for _ in range(per):
                ingest_run(h, run, lib, batch)
                run += 1
        r = raw_runs(db_path, run, per)
        run += per
        for k in ("runs", "results", "child_rows", "seconds", "cpu_seconds", "events_seconds"):
            setattr(raw, k, getattr(raw, k) + getattr(r, k))
    return {"runs": run - first_run,
            "library": _rates(lib), "raw_sqlite3": _rates(raw),
            "library_over_raw": (lib.results / lib.seconds) / (raw.results / raw.seconds)}


def _rates(st: Ingest) -> dict:
    return {"results": st.results, "seconds": st.seconds,
            "results_per_s": st.results / st.seconds,
            "cpu_results_per_s": st.results / st.cpu_seconds,
            "ingest_events_results_per_s": st.results / st.events_seconds}


def small_db_comparison(tmp: Path, batches: list[int], runs: int) -> dict:
    """Into an empty database, ``runs`` runs each: the library at several batch sizes (the farm
    stores whatever arrived per poll), and plain sqlite3 executemany of the same rows, same
    schema and pragmas, one transaction per job (the ceiling the library can approach)."""
    out: dict[str, dict] = {}
    for b in batches:
        path = tmp / f"batch-{b}.db"
        with open_history(str(path)) as h:
            st = Ingest()
            for r in range(runs):
                ingest_run(h, 10_000 + r, st, b)
        out[f"library, batch {b}"] = {"results": st.results, "seconds": st.seconds,
                                      "results_per_s": st.results / st.seconds,
                                      "cpu_results_per_s": st.results / st.cpu_seconds}
        for q in tmp.glob(path.name + "*"):
            q.unlink()
    path = tmp / "raw.db"
    st = raw_runs(path, 10_000, runs)
    n, wall, cpu = st.results, st.seconds, st.cpu_seconds
    out["raw sqlite3 executemany, one tx per job"] = {
        "results": n, "seconds": wall, "results_per_s": n / wall, "cpu_results_per_s": n / cpu}
    for q in tmp.glob(path.name + "*"):
        q.unlink()
    return out
