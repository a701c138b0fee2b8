"""One run written out for other tools: JUnit XML (CI dashboards), JSON (scripts), CSV (sheets).

Devices become JUnit test suites, so a dashboard shows the same device x test split as
`farm show`; expected failures are reported as passing cases with their tracking link, exactly
as the farm judges them.
"""

from __future__ import annotations

import csv
import io
import json
import xml.etree.ElementTree as ET
from collections import defaultdict

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
    root = ET.Element("testsuites", name=run_id)
    by_job: dict[int, list[dict]] = defaultdict(list)
    for r in run_results(h, run_id):
        by_job[r["job_id"]].append(r)
    for job in run_jobs(h, run_id):
        results = by_job[job["id"]]
        suite = ET.SubElement(root, "testsuite", name=job["device"]["label"],
                              tests=str(len(results)),
                              failures=str(sum(r["category"] == "unexpected_fail"
                                               for r in results)),
                              errors=str(sum(r["category"] == "crashed" for r in results)),
                              skipped=str(sum(r["category"] == "skipped" for r in results)),
                              time=f"{sum(r['duration'] or 0 for r in results):.3f}")
        props = ET.SubElement(suite, "properties")
        for k in ("variant_key", "arch", "chip", "host", "os", "mlx_version", "emulated"):
            ET.SubElement(props, "property", name=k, value=str(job["device"][k]))
        for r in results:
            suite.append(_case(r))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _case(r: dict) -> ET.Element:
    path, _, name = r["nodeid"].partition("::")
    case = ET.Element("testcase", classname=path.removesuffix(".py").replace("/", "."),
                      name=name or path, time=f"{r['duration'] or 0:.3f}")
    msg = r["message"] or ""
    cat = r["category"]
    if cat == "unexpected_fail":
        ET.SubElement(case, "failure", message=msg.splitlines()[0] if msg else r["outcome"]
                      ).text = msg
    elif cat == "crashed":
        ET.SubElement(case, "error", message=r["outcome"]).text = msg
    elif cat == "skipped":
        ET.SubElement(case, "skipped", message=msg)
    props = ET.SubElement(case, "properties")
    ET.SubElement(props, "property", name="category", value=cat)
    if r["link"]:
        ET.SubElement(props, "property", name="expectation", value=r["link"])
    for x in r["measurements"]:
        ET.SubElement(props, "property", name=x["name"],
                      value="" if x["value"] is None else repr(x["value"]))
    return case
