"""What a run shows: live progress per device, the device x category matrix, JSON and JUnit.

Pure presentation over the run loop's job records; nothing here talks to Ray or the history.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from db import junit
from db.events import CATEGORIES, category_of
from db.queries import device_label

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
    total: int | None = None  # tests the job will report (the device's collected count)
    streaming: float | None = None  # monotonic time the current attempt started on its device
    done_before: int = 0  # results already in when the current attempt started

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


def done_text(j: JobRecord) -> str:
    """``done/total`` (``done/?`` until the device has collected its tests)."""
    return f"{len(j.results)}/{'?' if j.total is None else j.total}"


def eta_s(j: JobRecord, now: float | None = None) -> float | None:
    """Seconds until the job's last test, at the pace of its current attempt; None: unknown."""
    if j.status or j.total is None or j.streaming is None:
        return None
    left = j.total - len(j.results)
    if left <= 0:
        return 0.0
    pace_n = len(j.results) - j.done_before
    if pace_n <= 0:
        return None
    return left * ((now if now is not None else time.monotonic()) - j.streaming) / pace_n


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    m, s = divmod(round(seconds), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def run_eta_s(jobs: list[JobRecord], now: float | None = None) -> float | None:
    """The run's ETA: its slowest unfinished job's (None while any unfinished one is unknown)."""
    etas = [eta_s(j, now) for j in jobs if not j.status]
    return None if not etas or None in etas else max(etas)


def progress_table(jobs: list[JobRecord], now: float | None = None) -> Table:
    """The live view of a run: one row per device job, done/total and its ETA."""
    from rich.text import Text  # cells as plain text: node ids carry [params]

    eta = run_eta_s(jobs, now)
    t = Table(title="farm run" + ("" if eta is None else f" (eta {fmt_s(eta)})"), expand=False)
    for col in ("device", "state", "done", "pass", "fail", "crash", "skip", "eta", "test"):
        t.add_column(col)
    for j in jobs:
        c = j.counts()
        state = (j.status or j.state) + (f" (x{j.attempt})" if j.attempt > 1 else "")
        t.add_row(*(Text(x) for x in (
            f"{j.label}@{j.node_id[:8]}", state, done_text(j),
            str(c["expected_pass"] + c["expected_fail"]),
            str(c["unexpected_fail"] + c["unexpected_pass"]), str(c["crashed"]),
            str(c["skipped"]), "" if j.status else fmt_s(eta_s(j, now)),
            (j.current or "").rpartition("::")[2][-40:])))
    return t


def progress_line(jobs: list[JobRecord], elapsed: float, now: float | None = None) -> str:
    """The same, as one plain line (stderr that is not a terminal: CI logs)."""
    parts = [f"{j.label}@{j.node_id[:8]} {j.status or j.state} {done_text(j)}" for j in jobs]
    eta = run_eta_s(jobs, now)
    return (f"progress [{fmt_s(elapsed)}]: " + ", ".join(parts)
            + ("" if eta is None or all(j.status for j in jobs) else f"; eta {fmt_s(eta)}"))


def matrix_table(jobs: list[JobRecord]) -> Table:
    t = Table(title="device x category (pass/xfail as expected; FAIL, XPASS, crash are not)")
    t.add_column("device")
    t.add_column("host")
    t.add_column("job")
    for cat in CATEGORIES:
        t.add_column(SHORT[cat], justify="right")
    for j in jobs:
        c = j.counts()
        t.add_row(escape(j.label), escape(j.host),
                  escape(j.status + (f" (x{j.attempt})" if j.attempt > 1 else "")),
                  *[str(c[cat]) for cat in CATEGORIES])
    return t


def print_summary(console: Console, jobs: list[JobRecord], flags: list[dict],
                  run_id: str, exit_code: int, compared: bool = True) -> None:
    """The matrix, then every job error and unexpected result on one line each.

    Node ids carry ``[params]`` and errors carry arbitrary text (``[/`` included): every such
    string is escaped, so rich neither eats it as markup nor raises after the run is stored.
    """
    console.print(matrix_table(jobs))
    for j in jobs:
        if j.error:
            console.print(f"[bold]{escape(j.label)}[/]: {escape(j.status)}: {escape(j.error)}",
                          markup=True, highlight=False)
        for ev in j.results.values():
            if j.category(ev) in ("unexpected_fail", "unexpected_pass", "crashed"):
                msg = (ev.get("message") or "").splitlines()[:1]
                console.print(escape(f"  {j.label}: {ev.get('outcome')}: {ev.get('nodeid')}"
                                     + (f": {msg[0][:160]}" if msg else "")), highlight=False)
    if flags:
        console.print(f"regressions ({len(flags)}):")
        for f in flags:
            console.print(f"  [{f.get('severity')}] {f.get('kind')} {f.get('device')} "
                          f"{f.get('subject')}: {f.get('evidence')}", highlight=False,
                          markup=False)
    elif compared:
        console.print("regressions: none")
    else:  # "none" would claim a comparison that never happened
        console.print("regressions: no comparable earlier run (same suite, same device): "
                      "nothing compared")
    console.print(escape(f"run {run_id}: exit {exit_code}"), highlight=False)


def write_junit(path: Path, jobs: list[JobRecord], run_id: str, suite: str | None = None
                ) -> None:
    """The run as JUnit through `db.junit`, the writer `farm export --format junit` uses, so
    both files name, count and judge the same run the same way."""
    suites = [junit.Suite(
        name=device_label({**j.device, "host": j.host}),
        cases=[junit.Case.from_event(ev) for ev in j.results.values()],
        hostname=j.host,
        started=min((ev["time"] for ev in j.results.values()
                     if isinstance(ev.get("time"), (int, float))), default=None),
        properties=junit.device_properties({**j.device, "host": j.host}, run_id=run_id,
                                           suite=suite, job_status=j.status or j.state,
                                           attempts=j.attempt),
        system_err=f"{j.status}: {j.error}" if j.error else "")
        for j in jobs]
    junit.write(path, suites, f"farm run {run_id}")
