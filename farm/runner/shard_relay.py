"""A twin's device job between its pytest subprocess and the job's queue (device side).

The subprocess (`farm.runner.pytest_shard`) asks over a pipe pair; this answers from the queue
(`shard_queue.Client`, or anything with ``register`` and ``next``). Tests handed to a subprocess
that died before reporting them (an interpreter crash, a hang that was killed) are not lost:
the next subprocess of the same job gets them first (``carry``), before pulling new ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
from collections import deque

# The pipe pair's fds in the subprocess (read by `pytest_shard`); here, so the device side's
# Ray worker does not import pytest for a name.
ENV_SHARD_FDS = "FARM_SHARD_FDS"


class Relay:
    """One pytest subprocess's pipes; ``serve`` answers its requests as they come."""

    def __init__(self, queue, carry: list[str] | None = None):
        self.queue = queue
        self.carry = deque(carry or [])
        self.handed: list[str] = []  # given to this subprocess, in order
        self.collected: int | None = None
        self._req_r, child_w = os.pipe()  # requests: child -> us
        child_r, self._rep_w = os.pipe()  # answers: us -> child
        self.child_fds: tuple[int, ...] = (child_r, child_w)
        self._buf = b""
        self._open = True

    def env(self) -> dict[str, str]:
        return {ENV_SHARD_FDS: f"{self.child_fds[0]},{self.child_fds[1]}"}

    def started(self) -> None:
        """The subprocess has its ends: close ours of them (its exit then reads as EOF)."""
        for fd in self.child_fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds = ()  # never closed twice: the numbers may belong to another file by then

    def serve(self, timeout: float) -> list[str]:
        """Wait up to ``timeout`` for requests and answer them; returns the ids the subprocess
        said it did not collect (the caller reports them)."""
        if not self._open:
            return []
        ready, _, _ = select.select([self._req_r], [], [], timeout)
        if not ready:
            return []
        chunk = os.read(self._req_r, 1 << 20)
        if not chunk:
            self._open = False
            return []
        self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        missing: list[str] = []
        for line in lines:
            msg = json.loads(line) if line.strip() else {}
            op = msg.get("op")
            if op == "collected":
                self.collected = len(msg.get("ids") or [])
                self.queue.register(list(msg.get("ids") or []))
            elif op == "next":
                self._answer(self._next())
            elif op == "missing":
                missing.append(str(msg.get("id")))
        return missing

    def _next(self) -> str | None:
        test = self.carry.popleft() if self.carry else self.queue.next()
        if test is not None:
            self.handed.append(test)
        return test

    def _answer(self, test: str | None) -> None:
        with contextlib.suppress(OSError):  # the subprocess died: its exit is handled
            os.write(self._rep_w, (json.dumps({"id": test}) + "\n").encode())

    def unreported(self, done: set[str]) -> list[str]:
        """What this subprocess was handed and never reported, then what it was not yet given
        of its own carry: the next subprocess's carry."""
        return [t for t in self.handed if t not in done] + [t for t in self.carry
                                                           if t not in done]

    def close(self) -> None:
        self.started()
        for fd in (self._req_r, self._rep_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._req_r = self._rep_w = -1
        self._open = False
