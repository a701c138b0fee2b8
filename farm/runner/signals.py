"""SIGINT and SIGTERM during `farm run`: one abort path, whatever the signal and the moment.

A CI cancel or `timeout` sends SIGTERM; a user presses Ctrl-C. Both must end a run the same way:
recorded ``aborted``, the fleet torn down, one line, exit 128 + the signal (130, 143). So while a
run is guarded, both signals raise ``Interrupted`` (a ``KeyboardInterrupt`` carrying the signal)
in the main thread, and every ``except KeyboardInterrupt`` of the run loop handles SIGTERM too.

Ray would take SIGTERM over: an in-process head node installs a handler that kills its processes
and exits 1, ``ray.init`` one that exits, and the driver's core worker a C++ handler that prints a
stack dump. ``hold_ray`` keeps Ray's Python handlers from being installed and puts ours back at
the OS level; the driver calls it whenever Ray has been imported or initialised since.

A signal can land in code that swallows the exception (a callback of Ray's that logs and goes on):
the guard remembers it, and ``check`` raises it again at the run loop's next safe point. While the
fleet is torn down after an interrupt, ``deferred`` keeps a second Ctrl-C from cutting the
teardown short (it is remembered, not raised).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Self

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A run interrupted by ``signum``; ``reported`` once its one line has been printed."""

    def __init__(self, signum: int = signal.SIGINT, reported: bool = False):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)
        self.reported = reported

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def as_interrupted(e: BaseException) -> Interrupted:
    """``e`` (an Interrupted, or the plain KeyboardInterrupt of an unguarded Ctrl-C)."""
    return e if isinstance(e, Interrupted) else Interrupted(signal.SIGINT)


class Guard:
    """Installs the handlers on enter (main thread only: elsewhere Python delivers no signal),
    restores the previous ones, and Ray's handler setter, on exit."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.handled = False  # the run's abort path has taken the interrupt
        self._defer = 0
        self._previous: dict[int, object] = {}
        self._ray_utils = None
        self._ray_setter = None
        self.active = False

    def __enter__(self) -> Self:
        if threading.current_thread() is not threading.main_thread():
            return self
        self.active = True
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        self.hold_ray()
        return self

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        if self._ray_utils is not None:
            self._ray_utils.set_sigterm_handler = self._ray_setter
            self._ray_utils = self._ray_setter = None
        for sig, prev in self._previous.items():
            signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
        self.active = False

    def _handle(self, signum: int, frame) -> None:
        if self.received is None:
            self.received = signum
        if self._defer or self.handled:  # tearing down, or the abort is under way
            return
        raise Interrupted(signum)

    def hold_ray(self) -> None:
        """Keep Ray from installing its SIGTERM handlers, and re-install ours over whatever Ray
        put in place since (its core worker's C++ handler replaces ours at ``ray.init``)."""
        if not self.active:
            return
        utils = sys.modules.get("ray._private.utils")
        if utils is not None and self._ray_utils is None:
            self._ray_utils, self._ray_setter = utils, utils.set_sigterm_handler
            utils.set_sigterm_handler = _ignore_handler
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    def check(self) -> None:
        """Raise the interrupt a swallowed signal asked for (a no-op otherwise)."""
        if self.received is not None and not self.handled and not self._defer:
            raise Interrupted(self.received)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Signals arriving inside are remembered, not raised (a teardown runs to its end)."""
        self._defer += 1
        try:
            yield
        finally:
            self._defer -= 1


def _ignore_handler(handler) -> None:
    """Ray's ``set_sigterm_handler`` while a run is guarded: the run's handler stays."""
