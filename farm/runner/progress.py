"""What `farm run` shows while it runs, on stderr: a status with its elapsed seconds while a step
blocks (the fleet starting, devices being health-checked), then per device done/total and an ETA.

On a terminal, rich redraws it in place (transient: the summary replaces it). Elsewhere (a CI
log, a pipe) nothing is redrawn: a line when a step starts and every ``every`` seconds while it
lasts, a progress line when the jobs start and at most every ``every`` seconds after, and one line
when each device's job ends. Nothing goes to stdout, which ``--json`` owns.

Renderables drawn by rich's refresh thread read only immutable data (a status's text and start
time); the jobs table is built on the main thread, which owns the job records.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from farm.report import summary as report

PLAIN_EVERY_S = 10.0


class _Status:
    """A spinner, the step, and its elapsed seconds (rendered by rich's refresh thread)."""

    def __init__(self, text: str):
        self.text, self.t0 = text, time.monotonic()
        self.spinner = Spinner("dots")

    def __rich__(self) -> Spinner:
        self.spinner.update(text=Text(f"{self.text} ({time.monotonic() - self.t0:.0f}s)"))
        return self.spinner


class Progress:
    """The run's live view; ``live`` (default: stderr is a terminal) picks redraw or lines."""

    def __init__(self, console: Console, live: bool | None = None,
                 every: float = PLAIN_EVERY_S):
        self.console = console
        self.live = console.is_terminal if live is None else live
        self.every = every
        self.t0 = time.monotonic()
        self.jobs: list[report.JobRecord] = []
        self._view: Live | None = None  # the jobs view, while it is up
        self._plain_at = 0.0

    def line(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    @contextlib.contextmanager
    def phase(self, text: str, plain: bool = True) -> Iterator[None]:
        """A step that blocks the main thread. Inside the jobs view (a health check on a retry)
        the view itself stays up, so nothing more is shown; ``plain=False``: a terminal's
        spinner only (a short step whose failure must stay the one line on stderr)."""
        if self._view is not None or not (self.live or plain):
            yield
            return
        if self.live:
            with Live(_Status(text), console=self.console, transient=True,
                      refresh_per_second=8):
                yield
            return
        t0 = time.monotonic()
        self.line(f"{text} ...")
        stop = threading.Event()

        def still() -> None:
            while not stop.wait(self.every):
                self.line(f"{text}: {time.monotonic() - t0:.0f}s")

        beat = threading.Thread(target=still, name="farm-progress", daemon=True)
        beat.start()
        try:
            yield
        finally:
            stop.set()
            beat.join(timeout=1.0)

    @contextlib.contextmanager
    def view(self, jobs: list[report.JobRecord]) -> Iterator[Progress]:
        """The jobs' progress while they run; call ``update`` from the run loop."""
        self.jobs = jobs
        if not self.live:
            self._plain()
            yield self
            return
        with Live(report.progress_table(jobs), console=self.console, transient=True,
                  refresh_per_second=4) as live:
            self._view = live
            try:
                yield self
            finally:
                self._view = None

    def update(self) -> None:
        now = time.monotonic()
        if self._view is not None:
            self._view.update(report.progress_table(self.jobs, now))
        elif not self.live and now - self._plain_at >= self.every:
            self._plain()

    def job_done(self, job: report.JobRecord) -> None:
        """A device's job ended (the live table shows it; a log gets a line)."""
        if self.live:
            return
        nodes = len(set(job.nodes))  # twins sharing the job, or the nodes of its attempts
        self.line(f"{job.label}@{job.node_id[:8]}: {job.status} {report.done_text(job)} "
                  f"in {report.fmt_s(time.monotonic() - job.started)}"
                  + (f" on {nodes} nodes" if nodes > 1 else ""))

    def _plain(self) -> None:
        self._plain_at = time.monotonic()
        self.line(report.progress_line(self.jobs, self._plain_at - self.t0, self._plain_at))
