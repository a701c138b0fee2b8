"""pytest plugin: `--farm-db PATH` records a local run in the history.

It implements `pytest_farm_event` (the hook `suites.plugin` calls with every results-stream
object): `session_start` opens a run and a job on the device it names, results are written in
batches (every ``FLUSH_EVERY`` results or ``FLUSH_AFTER_S`` seconds, one transaction each, so a
crash loses at most the unflushed tail), and `session_finish` closes both with their verdict.
The hook is optional, so this plugin loads whether or not the suites plugin is present.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the history (SQLAlchemy, Alembic) loads only when --farm-db is given:
    from db.history import History  # this plugin is active in every pytest session
    from db.ingest import JobWriter

FLUSH_EVERY = 50
FLUSH_AFTER_S = 5.0
KEY = pytest.StashKey["Recorder"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dflash2-farm-db", "dflash2 farm results history")
    group.addoption("--farm-db", metavar="PATH", default=None,
                    help="record this session in the farm history at PATH (file or SQLAlchemy "
                         "URL); see `farm runs`")


class Recorder:
    """One pytest session's writer into the history."""

    def __init__(self, h: History, root: Path):
        self.h, self.root = h, root
        self.run_id: str | None = None
        self.writer: JobWriter | None = None
        self.last_flush = time.monotonic()

    def event(self, ev: dict) -> None:
        kind = ev.get("type")
        if kind == "session_start" and self.run_id is None:
            from db.ingest import JobWriter
            from db.revision import current_revision

            dev = ev.get("device") if isinstance(ev.get("device"), dict) else {}
            started = ev.get("time") if isinstance(ev.get("time"), (int, float)) else None
            self.run_id = self.h.start_run(str(ev.get("suite") or "local"),
                                           str(dev.get("arch", "")),
                                           current_revision(self.root), started=started)
            self.writer = JobWriter(self.h, self.run_id, batch=FLUSH_EVERY)
        if self.writer is None:
            return
        self.writer.feed(ev)
        if self.writer.pending and time.monotonic() - self.last_flush > FLUSH_AFTER_S:
            self.writer.flush()
        if not self.writer.pending:
            self.last_flush = time.monotonic()
        if kind == "session_finish":
            self.close()

    def close(self) -> None:
        if self.writer is not None and self.run_id is not None:
            self.writer.close()
            self.h.finish_run(self.run_id, self.h.run_verdict(self.run_id))
            self.writer = None
        self.h.close()


@pytest.hookimpl(trylast=True)  # after the suites plugin has refused a bad option or file,
def pytest_configure(config: pytest.Config) -> None:  # so such a session creates no history
    target = config.getoption("farm_db", None)
    if not target or hasattr(config, "workerinput"):  # xdist workers: the controller records
        return
    from db.errors import FarmError
    from db.history import open_history

    try:
        h = open_history(target)
    except FarmError as e:
        raise pytest.UsageError(f"--farm-db: {e}") from None
    config.stash[KEY] = Recorder(h, Path(__file__).resolve().parent.parent)


@pytest.hookimpl(optionalhook=True)
def pytest_farm_event(config: pytest.Config, event: dict) -> None:
    rec = config.stash.get(KEY, None)
    if rec is not None and isinstance(event, dict):
        rec.event(event)


def pytest_unconfigure(config: pytest.Config) -> None:
    rec = config.stash.get(KEY, None)
    if rec is not None:
        rec.close()  # a session that never sent session_finish: its job is recorded as lost
        del config.stash[KEY]
