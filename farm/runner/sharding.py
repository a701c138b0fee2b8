"""Where a sharded job's tests go: one suite split across twin nodes (the xdist `scheduler/` idea).

Twins are live nodes that advertise the same device variant; a job on several of them is still
one job of that variant, and each test runs on exactly one twin. The policy is plain data: the
driver hosts one instance per sharded job in a small Ray actor (`farm.runner.shard_queue`) that
the twins' device jobs pull from, a test at a time, so stealing needs no message to the node
being stolen from: what a twin has not pulled yet is not started.

``WorkSteal`` is pytest-xdist's ``worksteal`` policy: once the suite is collected, each twin
gets a contiguous share (neighbouring tests often share module fixtures); a twin whose share is
used up takes the un-started half of the busiest twin's remaining share. A twin that leaves
(its node died, or its device job ended) gives back what it holds: its un-started share and any
test it pulled but never reported; those go to whichever twin asks next, whole.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Scheduler(Protocol):
    """What a sharding policy answers (xdist's ``scheduler/protocol.py``, for pulled tests)."""

    def add_node(self, shard: str) -> None:
        """A twin: before the suite is collected it will get a share; after, it starts
        empty and steals."""

    def register(self, shard: str, collected: list[str]) -> None:
        """A twin collected ``collected``; the first to report schedules the suite (a test
        the others did not collect is reported as such by the twin it is handed to)."""

    def next(self, shard: str) -> str | None:
        """The next test for ``shard`` to run, or None: nothing left for anyone."""

    def remove_node(self, shard: str, done: list[str]) -> int:
        """``shard`` is gone; what it held and is not in ``done`` goes back. Returns the number
        of tests no twin holds now (a twin must be started for them)."""

    def state(self) -> dict:
        """JSON-ready counts, for progress lines and tests."""


class WorkSteal:
    """xdist's ``worksteal``: contiguous shares, an idle twin steals half the busiest share."""

    def __init__(self, shards: list[str]):
        self.pending: dict[str, deque[str]] = {s: deque() for s in shards}
        self.handed: dict[str, list[str]] = {s: [] for s in shards}
        self.gone: set[str] = set()
        self.free: deque[str] = deque()  # given back by twins that left: no owner
        self.collected: list[str] | None = None
        self.steals = 0

    def add_node(self, shard: str) -> None:
        if shard not in self.gone:  # a name is used once: one that left stays gone
            self.pending.setdefault(shard, deque())
            self.handed.setdefault(shard, [])

    def _live(self) -> list[str]:
        return [s for s in self.pending if s not in self.gone]

    def register(self, shard: str, collected: list[str]) -> None:
        self.add_node(shard)
        if self.collected is None:
            self.collected = list(dict.fromkeys(collected))  # pytest's order, no duplicates
            self._schedule(self.collected)

    def _schedule(self, ids: list[str]) -> None:
        """Contiguous shares, in the order the twins were given, sizes differing by one."""
        live = self._live()
        if not live:
            self.free.extend(ids)
            return
        n, k = len(ids), len(live)
        for j, s in enumerate(live):
            self.pending[s].extend(ids[j * n // k:(j + 1) * n // k])

    def next(self, shard: str) -> str | None:
        if shard in self.gone:
            return None
        if shard not in self.pending:
            self.add_node(shard)
        own = self.pending[shard]
        if not own:
            self._steal(shard)
        if not own:
            return None
        test = own.popleft()
        self.handed[shard].append(test)
        return test

    def _steal(self, thief: str) -> None:
        own = self.pending[thief]
        if self.free:  # nobody is working on these: take them all
            own.extend(self.free)
            self.free.clear()
            return
        victims = [s for s in self._live() if s != thief and self.pending[s]]
        if not victims:
            return
        victim = max(victims, key=lambda s: len(self.pending[s]))
        q = self.pending[victim]
        take = max(1, len(q) // 2)  # the un-started tail half (the last one too: it waits)
        stolen = [q.pop() for _ in range(take)]
        own.extend(reversed(stolen))
        self.steals += 1

    def remove_node(self, shard: str, done: list[str]) -> int:
        if shard not in self.gone:
            self.gone.add(shard)
            self.pending.setdefault(shard, deque())
            self.handed.setdefault(shard, [])
            finished = set(done)
            back = [t for t in self.handed[shard] if t not in finished]
            self.free.extend(back + list(self.pending[shard]))
            self.pending[shard].clear()
            self.handed[shard] = [t for t in self.handed[shard] if t in finished]
        return len(self.free)

    def state(self) -> dict:
        return {"collected": None if self.collected is None else len(self.collected),
                "pending": {s: len(q) for s, q in self.pending.items()},
                "handed": {s: len(h) for s, h in self.handed.items()},
                "free": len(self.free), "gone": sorted(self.gone), "steals": self.steals}
