"""Recording a results file (JSONL, docs/CONTRACTS.md) from a device outside the cluster.

Each ``session_start`` opens a job on the device it names; results are written in batches, each
batch its own transaction. A truncated last line (the writer died mid-line) or a line that is
not JSON is skipped, not fatal: everything readable is kept. A file is refused whole, before
anything is written, when it is not a results stream or when a kernel selection names an
implementation this farm does not know (a file from a newer farm: its selections could not be
compared like with like); a selection with no implementation (an older file) is recorded with
``impl`` NULL.

Ingest is idempotent: a run records the digest of the events it was made from, and the same
results ingested again (the same file, or a copy) return that run instead of a second one.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from db import models as m
from db.errors import EXIT_USAGE, FarmError
from db.events import scrub, unknown_impl
from db.history import History
from db.validate import line_problems, refusal
from kernels.recorder import IMPLEMENTATIONS

BATCH = 500


def read_jsonl(path: Path) -> Iterator[dict]:
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                yield _scrubbed(obj, line)


def load_jsonl(path: str | os.PathLike) -> list[dict]:
    """A results file's objects, refused (one line) when unreadable or not a results stream;
    callers check it before opening the history, so a bad file creates or changes nothing."""
    p = Path(path)
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            lines = [(n, s.strip()) for n, s in enumerate(f, 1) if s.strip()]
    except OSError as e:
        raise FarmError(f"cannot read {p}: {e.strerror or e}", EXIT_USAGE) from None
    events: list[dict] = []
    problems: list[str] = []
    for i, (n, line) in enumerate(lines):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            obj = None
        problems += line_problems(n, obj, last=i == len(lines) - 1)
        if isinstance(obj, dict):
            events.append(_scrubbed(obj, line))
    if not any(e.get("type") == "session_start" for e in events):
        check_events(p, events)  # the clearer refusal: not a results stream at all
    if problems:
        raise FarmError(f"{p}: {refusal(problems)}: not what docs/RESULTS_FORMAT.md describes; "
                        f"nothing was recorded", EXIT_USAGE)
    check_events(p, events)
    return events


def _scrubbed(obj: dict, line: str) -> dict:
    """`scrub` of a decoded line, skipped when it cannot change anything: the file is read
    with ``errors="replace"``, so a lone surrogate can only come from a ``\\uDxxx`` escape."""
    return scrub(obj) if "\\ud" in line or "\\uD" in line else obj


def check_events(p: Path, events: list[dict]) -> None:
    """Refuse (one line, exit 2) a file that is not a results stream or that names a kernel
    implementation outside `kernels.recorder.IMPLEMENTATIONS`."""
    if not any(e.get("type") == "session_start" for e in events):
        raise FarmError(f"{p} has no session_start line: not a results stream from "
                        f"`pytest --results-jsonl`", EXIT_USAGE)
    for ev in events:
        if (bad := unknown_impl(ev)) is not None:
            raise FarmError(f"{p}: result {ev.get('nodeid')} has a kernel selection with impl "
                            f"{bad!r}, not one of {', '.join(IMPLEMENTATIONS)}: a file from a "
                            f"newer farm? upgrade dflash2-farm to ingest it", EXIT_USAGE)


def events_digest(events: list[dict]) -> str:
    """sha256 of the events as canonical JSON: the same results, however the file was copied or
    its keys ordered, have one digest."""
    h = hashlib.sha256()
    for ev in events:
        h.update(json.dumps(ev, sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()


def ingested_run(h: History, digest: str) -> str | None:
    """The run already made from events with this digest, if any."""
    with h.engine.connect() as c:
        return c.execute(select(m.runs.c.id).where(m.runs.c.source_digest == digest)).scalar()


def ingest_jsonl(h: History, path: str | os.PathLike, *, suite: str | None = None,
                 events: Iterable[dict] | None = None) -> str:
    """Record one results file as one run (``events``: its `load_jsonl`, when read already);
    returns the run id: the existing run when these results were ingested before (see
    `ingested_run` to tell the two apart)."""
    p = Path(path)
    if events is None:
        events = load_jsonl(p)
    else:
        events = list(events)
        check_events(p, events)  # before the run is started: a refused file writes nothing
    digest = events_digest(events)
    if (done := ingested_run(h, digest)) is not None:
        return done
    starts = [e for e in events if e.get("type") == "session_start"]
    first = starts[0]
    device = first.get("device") if isinstance(first.get("device"), dict) else {}
    revision = first.get("revision") if isinstance(first.get("revision"), dict) else None
    started = first.get("time") if isinstance(first.get("time"), (int, float)) else None
    context = first.get("context") if isinstance(first.get("context"), dict) else None
    try:
        run_id = h.start_run(suite or str(first.get("suite") or p.stem),
                             str(device.get("arch", "")), revision, started=started,
                             context=context, source_digest=digest)
    except IntegrityError:  # a concurrent ingest of the same results won the race
        if (done := ingested_run(h, digest)) is not None:
            return done
        raise
    writer = JobWriter(h, run_id)
    try:
        for ev in events:
            writer.feed(ev)
        writer.close()
    except BaseException:
        # What was written stays; the run is ended, never left `running` for ever.
        h.finish_run(run_id, "incomplete")
        raise
    h.finish_run(run_id, h.run_verdict(run_id))
    return run_id


class JobWriter:
    """Feeds events to the history job by job, flushing every ``batch`` results.

    Shared by file ingestion and the pytest plugin: a session_start opens a job, a
    session_finish closes it with its verdict, and a session that never finished is ``lost``.
    """

    def __init__(self, h: History, run_id: str, batch: int = BATCH):
        self.h, self.run_id, self.batch = h, run_id, batch
        self.job_id: int | None = None
        self.pending: list[dict] = []

    def feed(self, ev: dict) -> None:
        kind = ev.get("type")
        if kind == "session_start":
            self._close_job("lost")
            dev = ev.get("device") if isinstance(ev.get("device"), dict) else {}
            self.job_id = self.h.add_job(self.run_id, dev, _s(ev.get("host")), _s(ev.get("os")),
                                         _s(ev.get("node_id")))
        elif kind == "result" and self.job_id is not None:
            self.pending.append(ev)
            if len(self.pending) >= self.batch:
                self.flush()
        elif kind == "session_finish" and self.job_id is not None:
            self.flush()
            self._close_job(None)

    def flush(self) -> None:
        if self.job_id is not None and self.pending:
            self.h.ingest_events(self.job_id, self.pending)
        self.pending = []

    def close(self) -> None:
        """End of stream: a job still open never saw its session_finish."""
        self._close_job("lost")

    def _close_job(self, status: str | None) -> None:
        if self.job_id is None:
            return
        self.flush()
        verdict = self.h.job_verdict(self.job_id)
        self.h.finish_job(self.job_id, status or verdict,
                          error="session ended without session_finish" if status else None)
        self.job_id = None


def _s(v: object) -> str | None:
    return None if v is None else str(v)
