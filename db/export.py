"""One run written out for other tools: JUnit XML (CI dashboards), JSON (scripts), CSV (sheets).

JUnit comes from `db.junit` (its docstring says how results map); JSON is `farm show`'s
document with every result and its children instead of the matrix.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict

from db import junit
from db.errors import EXIT_USAGE, FarmError
from db.history import History
from db.queries import run_jobs, run_results, show_run

FORMATS = ("junit", "json", "csv")
CSV_COLUMNS = ("run_id", "device", "variant_key", "arch", "emulated", "host", "nodeid",
               "test_id", "params", "outcome", "category", "expected", "link", "duration",
               "message", "measurements")


def export_run(h: History, run_id: str, fmt: str) -> str:
    if fmt not in FORMATS:
        raise FarmError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}",
                        EXIT_USAGE)
    return {"junit": to_junit, "json": to_json, "csv": to_csv}[fmt](h, run_id)


def to_json(h: History, run_id: str) -> str:
    doc = show_run(h, run_id)
    by_job: dict[int, list[dict]] = defaultdict(list)
    for r in run_results(h, run_id):
        r = dict(r)
        r.pop("device")
        by_job[r["job_id"]].append(r)
    for job in doc["jobs"]:
        job["results"] = by_job[job["id"]]
    doc.pop("matrix")
    doc.pop("selections")  # each result carries its own selections (with impl) here
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _measurements(r: dict) -> str:
    return ";".join(f"{x['name']}={'' if x['value'] is None else repr(x['value'])}"
                    for x in r["measurements"])


def to_csv(h: History, run_id: str) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in run_results(h, run_id):
        d = r["device"]
        w.writerow([run_id, d["label"], d["variant_key"], d["arch"], d["emulated"], d["host"],
                    r["nodeid"], r["test_id"], r["params"], r["outcome"], r["category"],
                    r["expected"] or "", r["link"] or "", r["duration"], r["message"] or "",
                    _measurements(r)])
    return buf.getvalue()


def to_junit(h: History, run_id: str) -> str:
    """Through `db.junit`, the writer `farm run --junit` and `pytest --farm-junit` use too."""
    run = show_run(h, run_id)["run"]
    by_job: dict[int, list[dict]] = defaultdict(list)
    for r in run_results(h, run_id):
        by_job[r["job_id"]].append(r)
    suites = [junit.Suite(
        name=job["device"]["label"], cases=[junit.Case.from_row(r) for r in by_job[job["id"]]],
        hostname=job["device"]["host"], started=job["started"],
        properties=junit.device_properties(job["device"], run_id=run_id, suite=run["suite"],
                                           job_status=job["status"], attempts=job["attempts"]),
        system_err=f"{job['status']}: {job['error']}" if job["error"] else "")
        for job in run_jobs(h, run_id)]
    return junit.to_xml(suites, f"farm run {run_id}")
