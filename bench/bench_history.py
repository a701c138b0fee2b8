#!/usr/bin/env python
"""History benchmark (issue 6): ingestion rate and `farm show/history/regressions` latency.

Builds synthetic runs of the shipped suites' shape -- devices x tests x measurements, with the
kernel selections and fingerprints the suites emit (docs/RESULTS_FORMAT.md) -- in a fresh SQLite
file in a temporary directory, and grows it through the real library API the farm uses
(`History.start_run / add_job / ingest_events / finish_job / finish_run`) to each size of
``--sizes``. At each size it times

* ingestion (results/s over the segment just grown; event generation is outside the timer),
  and beside it, in turns at that size, the library against plain sqlite3 executemany of the
  same row tuples (same schema, pragmas and transactions per job): what SQLAlchemy and the
  library's own calls cost over the driver,
* the library calls behind the commands (`db.queries.show_run`, `db.queries.test_history`,
  `db.regressions.find_regressions`), median of ``--repeat`` on a read-only History,
* the real CLI (`farm show latest`, `farm history TEST`, `farm regressions latest`, each with
  ``--db``), median of 3, wall time including interpreter start, and the child's CPU time,

and checks the query plan (EXPLAIN QUERY PLAN) of every SQL statement those calls issue,
captured with a SQLAlchemy ``before_cursor_execute`` listener: a SCAN of a large table without
an index is reported as a finding. Prints a table and writes bench/results/history.{json,md}.

    /work/venv/bin/python bench/bench_history.py --sizes 10000,100000
    /work/venv/bin/python bench/bench_history.py            # 10k, 100k, 1M

Never run as a unit test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # the history_bench package
sys.path.insert(0, str(ROOT))

import sqlalchemy
from history_bench.ingest import Ingest, beside, ingest_run, profile_ingest, small_db_comparison
from history_bench.measure import measure_size
from history_bench.plans import schema_indexes
from history_bench.report import (
    TARGET_INGEST,
    TARGET_REGRESSIONS_S,
    fmt_ms,
    markdown,
    plan_summary,
    render,
    verdicts,
)
from history_bench.synthetic import (
    BASELINED,
    CASES,
    DEVICES,
    HISTORY_NODE,
    HISTORY_TEST,
    MLX_EVERY,
    RESULTS_PER_RUN,
)

from db import open_history

RESULTS_DIR = ROOT / "bench" / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="10000,100000,1000000",
                    help="comma-separated result counts to measure at (default: %(default)s)")
    ap.add_argument("--max-results", type=int, default=1_000_000,
                    help="never grow beyond this many results (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=5, help="library timings: median of N")
    ap.add_argument("--batch", type=int, default=500,
                    help="results per ingest_events call at most (db.ingest.BATCH is 500; a "
                         "job of this suite has 177)")
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI subprocess timings")
    ap.add_argument("--beside-rounds", type=int, default=3,
                    help="at each size, this many turns of one run by the library and one by "
                         "plain sqlite3 (0 = skip; their results count towards the size)")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile ingestion and the queries at the largest size")
    ap.add_argument("--compare-batches", default="1,10,100,500",
                    help="small-db comparison: library at these batch sizes, and plain sqlite3 "
                         "('' = skip)")
    ap.add_argument("--keep", metavar="DIR", help="build the database in DIR and keep it")
    ap.add_argument("--out", default=str(RESULTS_DIR), help="where history.json/.md go")
    ap.add_argument("--note", action="append", default=[],
                    help="a line for the report's Notes section (repeatable)")
    a = ap.parse_args()

    sizes = sorted({min(int(x), a.max_results) for x in a.sizes.split(",") if x.strip()})
    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench-history-"))
    tmp.mkdir(parents=True, exist_ok=True)
    db_path = tmp / "history.db"
    for q in tmp.glob("history.db*"):
        q.unlink()
    doc = {"benchmark": "history", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "machine": {"platform": platform.platform(), "python": platform.python_version(),
                       "cpus": os.cpu_count(), "load_avg_start": os.getloadavg(),
                       "sqlite": sqlite3.sqlite_version, "sqlalchemy": sqlalchemy.__version__},
           "shape": {"devices": len(DEVICES), "tests_per_device": len(CASES),
                     "results_per_run": RESULTS_PER_RUN, "batch": a.batch,
                     "history_test": HISTORY_TEST, "history_node": HISTORY_NODE,
                     "baselined_devices": len(BASELINED), "mlx_upgrade_every_runs": MLX_EVERY},
           "targets": {"ingest_results_per_s": TARGET_INGEST,
                       "regressions_s_at_1M": TARGET_REGRESSIONS_S},
           "sizes": [], "notes": [f"- {n}" for n in a.note]}
    print(f"history benchmark: {len(DEVICES)} devices x {len(CASES)} tests = "
          f"{RESULTS_PER_RUN} results per run; db {db_path}", flush=True)
    try:
        total = Ingest()  # the growth segments (the library, timed)
        run = in_db = 0  # run numbers used; results in the database (beside runs included)
        # The writer is closed while the commands are measured: opening a second History in
        # a process that holds a connection to the file drops that connection's POSIX locks
        # (db.opening.prepare_file reads the header with open()/close()), and the next CLI
        # process to exit then deletes the WAL under the writer -- see the report's notes.
        for size in sizes:
            seg = Ingest()
            load0 = os.getloadavg()[0]
            with open_history(str(db_path)) as h:
                while in_db + seg.results < size:
                    ingest_run(h, run, seg, a.batch)
                    run += 1
            for k in ("runs", "results", "child_rows", "seconds", "cpu_seconds",
                      "gen_seconds"):
                setattr(total, k, getattr(total, k) + getattr(seg, k))
            in_db += seg.results
            entry = {"size": size, "results": in_db, "runs": run,
                     "ingest": {"segment_results": seg.results,
                                "segment_child_rows": seg.child_rows,
                                "segment_seconds": seg.seconds,
                                "results_per_s": seg.results / seg.seconds,
                                "cpu_results_per_s": seg.results / seg.cpu_seconds,
                                "rows_per_s": (seg.results + seg.child_rows) / seg.seconds,
                                "cumulative_results_per_s": total.results / total.seconds,
                                "generation_seconds_untimed": seg.gen_seconds,
                                "load_avg_1m": [load0, os.getloadavg()[0]]}}
            entry["ingest"]["ingest_events_results_per_s"] = seg.results / seg.events_seconds
            print(f"  {in_db:,} results ({run} runs): ingest "
                  f"{entry['ingest']['results_per_s']:,.0f} results/s "
                  f"({entry['ingest']['cpu_results_per_s']:,.0f}/s of CPU time); "
                  f"beside raw sqlite3...", flush=True)
            if a.beside_rounds:
                b = beside(db_path, run, a.beside_rounds, 1, a.batch)
                run += b["runs"]
                in_db += b["library"]["results"] + b["raw_sqlite3"]["results"]
                entry["beside"] = b
                entry["results"], entry["runs"] = in_db, run
                print(f"    library {b['library']['results_per_s']:,.0f}/s "
                      f"(ingest_events {b['library']['ingest_events_results_per_s']:,.0f}/s), "
                      f"raw sqlite3 {b['raw_sqlite3']['results_per_s']:,.0f}/s; measuring...",
                      flush=True)
            last = size == sizes[-1]
            entry.update(measure_size(db_path, a.repeat, not a.no_cli, a.profile and last))
            entry["indexes"] = schema_indexes(db_path)
            if a.profile and last:
                with open_history(str(db_path)) as h:
                    entry["profiles"]["profile_ingest"] = profile_ingest(
                        h, run + 100_000, 3, a.batch)
            doc["sizes"].append(entry)
            print("    " + "  ".join(f"{k} {fmt_ms(v['median_s'])}"
                                     for k, v in entry["library"].items()), flush=True)
        if a.compare_batches:
            doc["small_db_comparison"] = small_db_comparison(
                tmp, [int(x) for x in a.compare_batches.split(",")], runs=3)
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)

    doc["findings"], doc["indexes_unused_by_these_commands"] = plan_summary(doc)
    doc["verdicts"] = verdicts(doc)
    doc["machine"]["load_avg_end"] = os.getloadavg()
    text, md = render(doc)
    print()
    print(text)
    print()
    for v in doc["verdicts"]:
        print(" - " + v)
    print("query-plan findings at the largest size:" if doc["findings"] else
          "query plans: no full scan of a large table")
    for f in doc["findings"]:
        print(" - " + f)
    print("indexes none of these statements used: "
          + (", ".join(doc["indexes_unused_by_these_commands"]) or "none"))
    for k, v in doc.get("small_db_comparison", {}).items():
        print(f"small db, {k}: {v['results_per_s']:,.0f} results/s "
              f"({v['cpu_results_per_s']:,.0f}/s of CPU time)")
    if a.profile:
        for k, v in doc["sizes"][-1]["profiles"].items():
            print(f"\n== {k} (largest size)\n{v}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "history.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (out / "history.md").write_text(markdown(doc, md))
    print(f"wrote {out / 'history.json'} and {out / 'history.md'}")


if __name__ == "__main__":
    main()
