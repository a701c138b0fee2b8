"""The run's row in the history while `farm run` goes on: written once, kept fresh, finished once.

A driver's heartbeat thread updates ``runs.heartbeat`` every ``HEARTBEAT_S`` from the moment the
row exists (before an embedded fleet starts) to its last write, whatever the main thread is
blocked in. A ``running`` run whose heartbeat is ``ORPHAN_AFTER_S`` old has lost its driver
(killed, its machine gone): the next `farm run` marks it ``aborted``
(`db.history.History.abort_orphaned_runs`).
"""

from __future__ import annotations

import contextlib
import threading

from rich.console import Console

from db.history import DRIVER_LEASE_S

HEARTBEAT_S = 5.0
ORPHAN_AFTER_S = DRIVER_LEASE_S  # a running run this long without a heartbeat: driver gone


class RunRecord:
    """The run's row: written once (``open``), kept fresh by a heartbeat thread until it is
    finished once (``finish``; later calls are no-ops, so every exit path may call it)."""

    def __init__(self, history, console: Console, every: float = HEARTBEAT_S):
        self.history, self.console, self.every = history, console, every
        self.run_id = ""
        self.status: str | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def open(self, suite, opts, revision: dict, context: dict | None) -> str:
        # The history's open already swept (``swept``); a run that lapsed since is swept now.
        orphans = [*getattr(self.history, "swept", []),
                   *self.history.abort_orphaned_runs(ORPHAN_AFTER_S)]
        if orphans:
            self.console.print(f"marked {len(orphans)} orphaned run(s) aborted (no driver "
                               f"heartbeat for {ORPHAN_AFTER_S:g}s): {', '.join(orphans)}",
                               highlight=False, markup=False)
        self.run_id = self.history.start_run(suite.name, opts.devices, revision,
                                             context=context)
        self._beat = threading.Thread(target=self._beating, name="farm-heartbeat", daemon=True)
        self._beat.start()
        return self.run_id

    def _beating(self) -> None:
        while not self._stop.wait(self.every):
            with contextlib.suppress(Exception):  # a missed beat is harmless; the next comes
                self.history.heartbeat(self.run_id)

    def finish(self, status: str) -> None:
        if not self.run_id or self.status is not None:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=2.0)
        self.history.finish_run(self.run_id, status)
        self.status = status
