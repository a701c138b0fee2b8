"""pytest plugin: `--farm-db PATH` records a local run in the history, `--farm-junit PATH`
writes it as JUnit XML (through `db.junit`, the writer `farm export` and `farm run` use).

Both name the run after the suite its ``session_start`` names: the suites plugin works it out
from the manifest (`suites.session`: `pytest suites/test_parity.py` is `m8-parity`), so the
history never reads the suites package.

`--farm-db` implements `pytest_farm_event` (the hook `suites.plugin` calls with every results-stream
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
JUNIT_KEY = pytest.StashKey["JunitReport"]()
ROOT = Path(__file__).resolve().parent.parent  # the checkout whose revision is recorded


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dflash2-farm-db", "dflash2 farm results history")
    group.addoption("--farm-db", metavar="PATH", default=None,
                    help="record this session in the farm history at PATH (file or SQLAlchemy "
                         "URL); see `farm runs`")
    group.addoption("--farm-junit", metavar="PATH", default=None,
                    help="write this session as JUnit XML at PATH (one <testsuite> for the "
                         "device), the same format as `farm export --format junit`")


def suite_name(config: pytest.Config) -> str:
    """The suite to record until the session says which it is: the suites plugin's
    ``session_start`` names it (`suites.session.suite_name`, from the manifest); without that
    plugin, the paths given."""
    given = config.getoption("farm_suite", None)
    return str(given) if given else (" ".join(map(str, config.args)) or ".")[:200]


class Recorder:
    """One pytest session's writer into the history."""

    def __init__(self, h: History, root: Path, suite: str = "local"):
        self.h, self.root, self.suite = h, root, suite
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
            self.run_id = self.h.start_run(str(ev.get("suite") or self.suite),
                                           str(dev.get("arch", "")),
                                           current_revision(self.root), started=started,
                                           context=ev.get("context")
                                           if isinstance(ev.get("context"), dict) else None)
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


class JunitReport:
    """The session's result events, written as JUnit when it finishes (or is torn down)."""

    def __init__(self, path: Path, suite: str):
        self.path, self.suite = path, suite
        self.start: dict = {}
        self.results: dict[str, dict] = {}
        self.done = False

    def event(self, ev: dict) -> None:
        kind = ev.get("type")
        if kind == "session_start":
            self.start = ev
        elif kind == "result" and isinstance(ev.get("nodeid"), str):
            self.results[ev["nodeid"]] = ev
        elif kind == "session_finish":
            self.write()

    def write(self) -> None:
        if self.done:
            return
        self.done = True
        from db import junit
        from db.queries import device_label

        dev = self.start.get("device") if isinstance(self.start.get("device"), dict) else {}
        host = str(self.start.get("host") or "")
        facts = {**dev, "host": host, "os": self.start.get("os")}
        started = self.start.get("time")
        suite = str(self.start.get("suite") or self.suite)
        junit.write(self.path, [junit.Suite(
            name=device_label({"arch": "unknown", "emulated": False, **facts}),
            cases=[junit.Case.from_event(ev) for ev in self.results.values()],
            hostname=host, started=started if isinstance(started, (int, float)) else None,
            properties=junit.device_properties(facts, suite=suite))], suite)


@pytest.hookimpl(trylast=True)  # after the suites plugin has refused a bad option or file,
def pytest_configure(config: pytest.Config) -> None:  # so such a session creates no history
    target = config.getoption("farm_db", None)
    junit_path = config.getoption("farm_junit", None)
    if hasattr(config, "workerinput") or not (target or junit_path):  # xdist workers: the
        return  # controller records
    suite = suite_name(config)
    if junit_path:
        try:  # refused now, in one line, rather than as a traceback once the tests have run
            Path(junit_path).parent.mkdir(parents=True, exist_ok=True)
            Path(junit_path).touch()
        except OSError as e:
            raise pytest.UsageError(f"--farm-junit: cannot write {junit_path}: "
                                    f"{e.strerror or e}") from None
        config.stash[JUNIT_KEY] = JunitReport(Path(junit_path), suite)
    if not target:
        return
    from db.errors import FarmError
    from db.history import open_history

    try:
        h = open_history(target)
    except FarmError as e:
        raise pytest.UsageError(f"--farm-db: {e}") from None
    config.stash[KEY] = Recorder(h, ROOT, suite)


@pytest.hookimpl(optionalhook=True)
def pytest_farm_event(config: pytest.Config, event: dict) -> None:
    if not isinstance(event, dict):
        return
    for key in (KEY, JUNIT_KEY):
        sink = config.stash.get(key, None)
        if sink is not None:
            sink.event(event)


def pytest_unconfigure(config: pytest.Config) -> None:
    rec = config.stash.get(KEY, None)
    if rec is not None:
        rec.close()  # a session that never sent session_finish: its job is recorded as lost
        del config.stash[KEY]
    report = config.stash.get(JUNIT_KEY, None)
    if report is not None:
        del config.stash[JUNIT_KEY]
        report.write()  # what a session that never finished did run
