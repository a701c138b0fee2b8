"""Sharded jobs in the run loop (driver side): one job's tests split across its twins.

A job whose device variant has several idle nodes (`placement.choose_twins`) starts one device
job per twin, each pulling tests from the job's queue in the run's queue actor
(`shard_queue`). Every twin's results land in the one job (the `Driver` merges them, each with
its node). When a twin leaves (its device job ended, or its node died) what it held and did not
report goes back to the queue: the twins still at work pull it, and if none is left a new twin
is started on a live node of the group, else on another device of the kind (a retry, counted
against ``--retries``), else the job is ``lost``. The job ends when its last twin has left and
the queue holds nothing: every collected test then has exactly one result.
"""

from __future__ import annotations

import contextlib
import itertools

from farm.fleet import devices as fleet
from farm.fleet import placement
from farm.fleet.devices import Device
from farm.runner import shard_queue


class Twins:
    """The driver's sharded jobs: their twins, their queue, their ends."""

    def __init__(self, driver):
        self.d = driver
        self.actor = None
        self.queue = ""  # the queue actor's name
        self.group: dict[int, list[Device]] = {}  # job -> the twins it started on
        self.problems: dict[int, list[tuple[str, str]]] = {}  # job -> (status, error) of twins
        self.relaunched: dict[int, int] = {}
        self._names = itertools.count(1)

    def sharded(self, i: int) -> bool:
        return i in self.group

    def _call(self, i: int, method: str, *args):
        """One call to the queue actor; a queue that is gone ends the job in error."""
        import ray

        try:
            return shard_queue.call(getattr(self.actor, method), str(i), *args)
        except (ray.exceptions.RayError, AttributeError) as e:
            self.d.finish(i, "error", f"test queue: {type(e).__name__}: "
                                      f"{str(e).strip().splitlines()[-1][:300]}")
            return None

    def _launch(self, i: int, device: Device) -> None:
        name = f"{device.node_id[:12]}-{next(self._names)}"
        self.actor.add_node.remote(str(i), name)  # ordered before the twin can ask (same caller)
        self.d.launch(i, device, {"queue": self.queue, "job": str(i), "name": name})

    def prepare(self) -> None:
        """Start the run's queue actor (its worker boots while the devices are health-checked;
        nothing waits for it: Ray queues the calls made before it is up)."""
        if self.actor is None:
            self.queue = f"farm-shards-{self.d.run_id}"
            self.actor = shard_queue.start(self.queue)

    def start(self, i: int, devices: list[Device]) -> None:
        """Job ``i`` on ``devices`` (two or more twins), each starting with a contiguous share."""
        self.prepare()
        self.group[i] = list(devices)
        self.d.place(i, devices[0])
        job = self.d.jobs[i]
        job.nodes = [dev.node_id for dev in devices]
        for dev in devices:
            self._launch(i, dev)

    def progress(self, i: int) -> None:
        """Every test has a result: twins that have not started yet (queued behind another
        run's job on their device) are not needed."""
        job = self.d.jobs[i]
        if job.total is None or len(job.results) < job.total:
            return
        for slot in self.d.slots_of(i):
            sh = self.d.shards[slot]
            if not sh.started:
                self.d.cancel(slot)
                self.d.drop(slot)
                self._left(sh)

    def lost(self, sh, why: str) -> None:
        """A twin's node died: what it held goes to the job's other twins."""
        self.d.console.print(f"{sh.device.short} died ({why}); its unfinished tests of the "
                             f"{self.d.jobs[sh.job].label} job go to its twins", highlight=False)
        self._left(sh)

    def ended(self, sh, status: str | None, error: str | None) -> None:
        """A twin's device job ended (``status`` from its farm_job_end)."""
        if status != "completed":
            self.problems.setdefault(sh.job, []).append(
                (status if status in ("timeout", "error") else "error",
                 f"{sh.device.short}: {error or status}"))
        self._left(sh)

    def _left(self, sh) -> None:
        i, job = sh.job, self.d.jobs[sh.job]
        if job.status:
            return
        left = self._call(i, "remove_node", sh.name, list(job.results))
        if left is None or self.d.slots_of(i):
            return  # the job ended (queue gone), or twins still at work pull what is left
        problems = self.problems.get(i, [])
        if left and not problems:
            target = self._target(i)
            if target is not None:
                self.relaunched[i] = self.relaunched.get(i, 0) + 1
                if target.node_id not in job.nodes:
                    job.nodes.append(target.node_id)
                self.d.console.print(f"{left} test(s) of the {job.label} job move to "
                                     f"{target.short}", highlight=False)
                self._launch(i, target)
                return
        if problems:
            status, error = problems[0]
            more = f"; {left} test(s) never ran" if left else ""
            self.d.finish(i, status, error + more)
        elif left:
            self.d.finish(i, "lost", f"{left} test(s) never ran: no live {job.label} device "
                                     f"left to run them")
        else:
            c = job.counts()
            bad = c["unexpected_fail"] + c["unexpected_pass"] + c["crashed"]
            self.d.finish(i, "failed" if bad else "passed")

    def _target(self, i: int) -> Device | None:
        """A live twin of the job's group, else (a retry) another healthy device of its kind."""
        d, job = self.d, self.d.jobs[i]
        if self.relaunched.get(i, 0) > 2 * len(self.group[i]) + d.opts.retries:
            return None  # every way to run the rest was tried
        avoid = d.dead | set(d.quarantined)
        live = fleet.live_devices(d.dead)
        ids = {t.node_id for t in self.group[i]}
        for dev in live:
            if dev.node_id in ids and dev.node_id not in avoid:
                return dev
        if job.attempt > d.opts.retries:
            return None
        target = d.healthy_device(job.kind, placement.replacement(job.kind, live, avoid))
        if target is not None:
            job.attempt += 1
            self.group[i].append(target)  # a twin of the job from now on
        return target

    def close(self) -> None:
        """The run is over: the queue actor goes (it would die with the driver anyway)."""
        import ray

        if self.actor is not None:
            with contextlib.suppress(Exception):
                ray.kill(self.actor)
            self.actor = None
