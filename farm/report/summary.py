"""What a run shows: live progress per device, the device x category matrix, JSON and JUnit.

Pure presentation over the run loop's job records; nothing here talks to Ray or the history.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from db.events import CATEGORIES, category_of

# Column headings, pytest's words: expected pass/fail, unexpected FAIL / XPASS (a stale
# expectation), crashed (interpreter died), skipped.
SHORT = {"expected_pass": "pass", "expected_fail": "xfail", "unexpected_fail": "FAIL",
         "unexpected_pass": "XPASS", "crashed": "crash", "skipped": "skip"}


@dataclass
class JobRecord:
    """One job of a run as the driver tracks it (one device kind; retries keep the record)."""

    key: str  # the device it started on, arch@node
    kind: tuple[str, bool]
    device: dict  # DeviceIdentity JSON of the current device
    node_id: str
    host: str = ""
    job_id: int | None = None
    attempt: int = 1
    state: str = "health"  # health | queued | running | retrying | done
    status: str = ""  # the history's job status once done: passed failed lost timeout error
    error: str | None = None
    results: dict[str, dict] = field(default_factory=dict)  # nodeid -> result event
    current: str = ""
    started: float = field(default_factory=time.monotonic)
    nodes: list[str] = field(default_factory=list)  # every node an attempt ran on
    end: dict | None = None  # the device's farm_job_end event, once it arrived

    def category(self, ev: dict) -> str:
        return category_of(ev.get("outcome", ""), ev.get("expectation") or {})

    def counts(self) -> Counter:
        return Counter(self.category(ev) for ev in self.results.values())

    @property
    def label(self) -> str:
        arch = self.device.get("arch", "?")
        return f"{arch} (emulated)" if self.device.get("emulated") else arch

    def to_json(self) -> dict:
        return {"device": self.device, "host": self.host, "node_id": self.node_id,
                "nodes": self.nodes, "job_id": self.job_id, "attempts": self.attempt,
                "status": self.status, "error": self.error, "counts": dict(self.counts()),
                "results": list(self.results.values())}


def progress_table(jobs: list[JobRecord]) -> Table:
    t = Table(title="farm run", expand=False)
    for col in ("device", "node", "state", "attempt", "pass", "fail", "crash", "skip", "test"):
        t.add_column(col)
    for j in jobs:
        c = j.counts()
        state = j.status or j.state
        t.add_row(j.label, j.node_id[:8], state, str(j.attempt),
                  str(c["expected_pass"] + c["expected_fail"]),
                  str(c["unexpected_fail"] + c["unexpected_pass"]), str(c["crashed"]),
                  str(c["skipped"]), (j.current or "")[-60:])
    return t


def matrix_table(jobs: list[JobRecord]) -> Table:
    t = Table(title="device x category (pass/xfail as expected; FAIL, XPASS, crash are not)")
    t.add_column("device")
    t.add_column("host")
    t.add_column("job")
    for cat in CATEGORIES:
        t.add_column(SHORT[cat], justify="right")
    for j in jobs:
        c = j.counts()
        t.add_row(j.label, j.host, j.status + (f" (x{j.attempt})" if j.attempt > 1 else ""),
                  *[str(c[cat]) for cat in CATEGORIES])
    return t


def print_summary(console: Console, jobs: list[JobRecord], flags: list[dict],
                  run_id: str, exit_code: int) -> None:
    console.print(matrix_table(jobs))
    for j in jobs:
        if j.error:
            console.print(f"[bold]{j.label}[/]: {j.status}: {j.error}", markup=True,
                          highlight=False)
        for ev in j.results.values():
            if j.category(ev) in ("unexpected_fail", "unexpected_pass", "crashed"):
                msg = (ev.get("message") or "").splitlines()[:1]
                console.print(f"  {j.label}: {ev['outcome']}: {ev['nodeid']}"
                              + (f": {msg[0][:160]}" if msg else ""), highlight=False)
    if flags:
        console.print(f"regressions ({len(flags)}):")
        for f in flags:
            console.print(f"  [{f.get('severity')}] {f.get('kind')} {f.get('device')} "
                          f"{f.get('subject')}: {f.get('evidence')}", highlight=False,
                          markup=False)
    else:
        console.print("regressions: none")
    console.print(f"run {run_id}: exit {exit_code}", highlight=False)


def write_junit(path: Path, jobs: list[JobRecord], run_id: str) -> None:
    """One <testsuite> per device job; crashed/timeout/unexpected results are <failure>s."""
    root = ET.Element("testsuites", name=f"farm run {run_id}")
    for j in jobs:
        res = list(j.results.values())
        suite = ET.SubElement(root, "testsuite", name=j.label, hostname=j.host,
                              tests=str(len(res)))
        fails = skips = 0
        for ev in res:
            nodeid = ev.get("nodeid", "")
            module, _, name = nodeid.rpartition("::")
            case = ET.SubElement(suite, "testcase", classname=module.replace("/", "."),
                                 name=name or nodeid, time=f"{ev.get('duration') or 0:.3f}")
            cat = j.category(ev)
            if cat == "skipped":
                skips += 1
                ET.SubElement(case, "skipped", message=(ev.get("message") or "")[:500])
            elif cat in ("unexpected_fail", "unexpected_pass", "crashed"):
                fails += 1
                ET.SubElement(case, "failure", type=ev.get("outcome", ""),
                              message=(ev.get("message") or cat)[:500])
        suite.set("failures", str(fails))
        suite.set("skipped", str(skips))
        if j.error:
            ET.SubElement(suite, "system-err").text = f"{j.status}: {j.error}"
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
