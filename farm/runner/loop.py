"""The run loop of `farm run` (`Driver`): check devices, dispatch, stream, store, decide.

The order it keeps and the faults it handles are listed in `farm.runner.driver`, which brings a
fleet up and down around it and owns the run's row.

A job is one device variant. Each device job in flight is a ``Shard`` (its own slot in
``refs``): a job has one, or, when its variant has several idle nodes (twins), one per twin,
all pulling the job's tests from its queue (`farm.runner.twins`, `farm.runner.sharding`); their
results are merged into the one job, each naming its node. What a batch of events means to
its job, and which Ray errors mean a lost device, are `farm.runner.events`' rules; the run's
status and exit code are `farm.runner.verdict`'s.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from pathlib import Path

from rich.console import Console

from farm.errors import EXIT_INFRA, FarmError
from farm.fleet import devices as fleet
from farm.fleet import executor, health, placement
from farm.fleet.devices import Device, check_twins, parse_selectors, twin_cap
from farm.report import summary as report
from farm.runner import events, signals, verdict
from farm.runner.progress import Progress
from farm.runner.record import RunRecord
from farm.runner.run_types import RunOptions, RunOutcome, Shard
from farm.runner.twins import Twins

WAIT_S = 0.25
GET_S = 30.0
JOB_GRACE_S = 60.0  # beyond --job-timeout, for the device's own timeout handling to report
WATCH_S = 2.0  # how often queued jobs are checked for a device that has gone away
DEFAULT_JOB_TIMEOUT = 3600.0


def _job_task():
    """The device job as a Ray streaming generator (made lazily: no Ray import at load)."""
    import ray

    from farm.runner import device_job

    return ray.remote(num_returns="streaming", max_retries=0, num_cpus=0)(device_job.run_job)


class Driver:
    """One run: the state the loop needs, and the loop."""

    def __init__(self, opts: RunOptions, console: Console, history, suite, revision: dict,
                 record: RunRecord, show: Progress, guard: signals.Guard,
                 context: dict | None = None):
        self.opts, self.console = opts, console
        self.history, self.suite, self.revision = history, suite, revision
        self.record, self.show, self.guard = record, show, guard
        self.test_timeout = float(opts.test_timeout or suite.timeout)
        self.job_timeout = float(opts.job_timeout or DEFAULT_JOB_TIMEOUT)
        self.run_id = record.run_id
        self.dead: set[str] = set()
        self.quarantined: dict[str, str] = {}
        self.health: dict[str, dict] = {}
        self.jobs: list[report.JobRecord] = []
        self.refs: dict[int, object] = {}  # slot -> ObjectRefGenerator
        self.pending: list[tuple[int, list[dict]]] = []  # taken, not yet stored (`flush`)
        self.shards: dict[int, Shard] = {}  # slot -> what runs there
        self.deadline: dict[int, float] = {}  # slot -> monotonic deadline
        self._slots = itertools.count()
        self.twins = Twins(self)  # the sharded jobs
        self.job_task = _job_task()
        self.execs: dict[str, object] = {}  # node id -> warm executor (`use_executors`)
        self.exec_run: tuple = ()  # the tree, variables and caller they get (`use_executors`)
        self.via_exec: set[int] = set()  # slots an executor runs
        self.aborting = False  # jobs ended by an abort get no line each: the abort has one
        self.context = context  # what changes dispatch, for the history

    # -- before any job ---------------------------------------------------------------------

    def check_health(self, devices: list[Device]) -> None:
        """Health-check devices not yet checked this run; quarantine the ones that fail."""
        todo = [d for d in devices if d.node_id not in self.health]
        results = {}
        if todo:
            with self.show.phase(f"health-checking {len(todo)} device(s)"):
                results = health.check_devices(todo)
        for d in todo:
            res = results[d.node_id]
            self.health[d.node_id] = res
            if res.get("died"):
                self.dead.add(d.node_id)
            if not res.get("ok"):
                self.quarantined[d.node_id] = res.get("detail", "health check failed")
                self.console.print(f"quarantined {d.short} for this run: {res.get('detail')}",
                                   highlight=False)

    def healthy_device(self, kind: tuple[str, bool], first: Device | None) -> Device | None:
        """``first`` if it passes its health check, else another live device of its kind."""
        cand = first
        while cand is not None:
            self.check_health([cand])
            if cand.node_id not in self.quarantined:
                return cand
            avoid = self.dead | set(self.quarantined)
            cand = placement.replacement(kind, fleet.live_devices(self.dead), avoid)
        return None

    # -- dispatch ---------------------------------------------------------------------------

    def spec(self, job: report.JobRecord, device: Device, shard: dict | None = None) -> dict:
        return {"suite": self.suite.name, "pytest_args": self.suite.pytest_args(),
                "test_timeout": self.test_timeout, "job_timeout": self.job_timeout,
                "device": {"arch": device.arch, "emulated": device.emulated},
                "deselect": [] if shard else sorted(job.results), "attempt": job.attempt,
                "env": self.opts.env, **({"shard": shard} if shard else {})}

    def place(self, i: int, device: Device) -> None:
        """Point job ``i`` at ``device`` (its record, its history row on first use)."""
        job = self.jobs[i]
        job.node_id, job.host, job.state, job.current = device.node_id, device.host, "queued", ""
        job.end, job.streaming = None, None
        if device.node_id not in job.nodes or not self.twins.sharded(i):
            job.nodes.append(device.node_id)
        h = self.health.get(device.node_id, {})
        job.device = h.get("identity") or device.identity().to_json()
        if job.job_id is None:
            job.job_id = self.history.add_job(self.run_id, job.device, device.host,
                                              h.get("os"), device.node_id)

    def use_executors(self, execs: dict[str, object], tree: Path, env: dict[str, str]) -> None:
        """Device jobs on these nodes go to their executors (`farm.fleet.executor`), run in
        ``tree`` (the staged tree, on this host) with the run's variables ``env``."""
        self.execs, self.exec_run = dict(execs), (str(tree), dict(env), executor.caller())

    def launch(self, i: int, device: Device, shard: dict | None = None) -> int:
        """Start one device job of job ``i`` on ``device``; returns its slot."""
        slot = next(self._slots)
        self.shards[slot] = Shard(i, device, (shard or {}).get("name", ""))
        spec = self.spec(self.jobs[i], device, shard)
        if (ex := self.execs.get(device.node_id)) is not None:
            self.via_exec.add(slot)
            self.refs[slot] = ex.run.options(num_returns="streaming").remote(spec, *self.exec_run)
        else:
            opts = {**placement.pinned(device), "resources": {fleet.RESOURCE: 1}}
            self.refs[slot] = self.job_task.options(**opts).remote(spec)
        self.deadline[slot] = time.monotonic() + self.job_timeout + JOB_GRACE_S
        return slot

    def dispatch(self, i: int, device: Device) -> None:
        """Job ``i``, whole, on ``device`` (what a job that is not sharded runs as)."""
        self.place(i, device)
        self.launch(i, device)

    def cancel(self, slot: int) -> None:
        """Stop the device job in ``slot`` (its process tree dies either way); never raises."""
        import ray

        ref = self.refs.get(slot)
        if ref is None:
            return
        if slot in self.via_exec:
            executor.cancel(ref)
            return
        with contextlib.suppress(Exception):  # a fleet going down: the job ends anyway
            ray.cancel(ref, force=True)

    def drop(self, slot: int) -> Shard | None:
        self.via_exec.discard(slot)
        self.refs.pop(slot, None)
        self.deadline.pop(slot, None)
        return self.shards.pop(slot, None)

    def slots_of(self, i: int) -> list[int]:
        return [s for s, sh in self.shards.items() if sh.job == i]

    def finish(self, i: int, status: str, error: str | None = None) -> None:
        job = self.jobs[i]
        if job.status:
            return  # finished once
        job.status, job.error, job.state, job.current = status, error, "done", ""
        for slot in self.slots_of(i):
            self.drop(slot)
        if job.job_id is not None:
            self.history.finish_job(job.job_id, status, error, attempts=job.attempt)
        if not self.aborting:
            self.show.job_done(job)

    def node_lost(self, slot: int, why: str) -> None:
        """A device job's node died (or its task could not run there): a twin's tests go to
        the job's other twins; a whole job is retried elsewhere, or lost."""
        sh = self.drop(slot)
        if sh is None:
            return
        self.dead.add(sh.device.node_id)
        if sh.name:
            self.twins.lost(sh, why)
            return
        i, job = sh.job, self.jobs[sh.job]
        dead_dev = f"{job.label}@{job.node_id[:8]}"
        if job.attempt <= self.opts.retries:
            avoid = self.dead | set(self.quarantined)
            target = placement.replacement(job.kind, fleet.live_devices(self.dead), avoid)
            target = self.healthy_device(job.kind, target) if target else None
            if target is not None:
                job.attempt += 1
                self.console.print(f"{dead_dev} died ({why}); retrying the {job.label} job on "
                                   f"{target.short} with the tests not yet reported",
                                   highlight=False)
                self.dispatch(i, target)
                return
            why += f"; no other live {job.label} device to retry on"
        self.console.print(f"{dead_dev} lost: {why}", highlight=False)
        self.finish(i, "lost", f"node {job.node_id[:8]} died: {why}")

    # -- the stream -------------------------------------------------------------------------

    def take(self, slot: int, batch: list[dict]) -> None:
        sh = self.shards[slot]
        job = self.jobs[sh.job]
        store = events.absorb(job, sh, batch)
        if store:
            self.pending.append((job.job_id, store))
        if sh.name:
            self.twins.progress(sh.job)

    def step(self) -> None:
        import ray

        if not self.refs:
            return
        order = list(self.refs)
        gens = [self.refs[s] for s in order]
        ready, _ = ray.wait(gens, num_returns=1, timeout=WAIT_S)
        if ready and len(gens) > 1:  # and every other stream with a batch waiting
            ready, _ = ray.wait(gens, num_returns=len(gens), timeout=0)
        ready_ids = {id(r) for r in ready}
        try:
            for slot in order:
                gen = self.refs.get(slot)
                if gen is None or id(gen) not in ready_ids:
                    continue
                try:
                    ref = next(gen)
                except StopIteration:
                    self.ended(slot)
                    continue
                try:
                    self.take(slot, ray.get(ref, timeout=GET_S))
                except ray.exceptions.RayError as e:
                    if events.node_died(e):
                        self.node_lost(slot, type(e).__name__)
                    else:
                        self.failed(slot, events.failure_line(e))
        finally:  # whatever happened after them, what arrived is stored: one write per wakeup
            self.flush()

    def flush(self) -> None:
        """Store every batch taken since the last write, all devices' in one transaction, so
        the head's cost per wakeup stays flat as the fleet grows (bench/sim_scale.py)."""
        pending, self.pending = self.pending, []
        if pending:
            self.history.ingest_many(pending)

    def failed(self, slot: int, error: str) -> None:
        """A device job raised (not a node death): its job ends in error, or, for a twin, the
        twin leaves its job with that error."""
        sh = self.drop(slot)
        if sh is None:
            return
        if sh.name:
            self.twins.ended(sh, "error", error)
        else:
            self.finish(sh.job, "error", error)

    def ended(self, slot: int) -> None:
        sh = self.shards.get(slot)
        if sh is None:
            return
        if sh.end is None:
            # A device job's last yield is its farm_job_end, after every cleanup: a stream that
            # stops before it is a worker (or node) that died, whichever way Ray reported it,
            # so the job moves on or is lost as for Ray's own death errors.
            self.node_lost(slot, "its device job ended without its final event")
            return
        self.drop(slot)
        end = sh.end
        if sh.name:
            self.twins.ended(sh, end.get("status"), end.get("error"))
            return
        self.finish(sh.job, events.end_status(self.jobs[sh.job], end), end.get("error"))

    def watch(self) -> None:
        """Jobs past their deadline, and jobs whose node left the cluster before streaming."""

        now = time.monotonic()
        alive = {d.node_id for d in fleet.live_devices()}
        for slot in list(self.refs):
            sh = self.shards.get(slot)
            if sh is None:
                continue
            if now > self.deadline[slot]:
                self.cancel(slot)
                why = (f"no end of job within --job-timeout {self.job_timeout:g}s + "
                       f"{JOB_GRACE_S:g}s")
                if sh.name:
                    self.drop(slot)
                    self.twins.ended(sh, "timeout", why)
                else:
                    self.finish(sh.job, "timeout", why)
            elif sh.device.node_id not in alive:
                self.cancel(slot)
                self.node_lost(slot, "node left the cluster")

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        t0 = time.monotonic()
        opts = self.opts
        selectors = parse_selectors(opts.devices)
        check_twins(selectors, opts.every)
        devices = fleet.live_devices()
        missing = fleet.unmatched(devices, selectors)
        if missing:
            names = ", ".join(repr(s.text) for s in missing)
            raise FarmError(f"no live device matches {names}; {fleet.describe(devices)}",
                            EXIT_INFRA)
        match = fleet.matching(devices, selectors)
        groups = placement.choose_twins(match, every=opts.every,
                                        cap=lambda d: twin_cap(d, selectors))
        chosen = [g[0] for g in groups]
        if not self.record.run_id:  # on a given cluster: once a device matches
            self.record.open(self.suite, opts, self.revision, self.context)
        self.run_id = self.record.run_id
        self.console.print(f"run {self.run_id}: suite {self.suite.name} on "
                           f"{', '.join(' + '.join(d.short for d in g) for g in groups)}"
                           f"{' (twins share a job)' if any(len(g) > 1 for g in groups) else ''}"
                           f" (revision "
                           f"{(self.revision['git_sha'] or 'no git')[:10]}"
                           f"{'+dirty' if self.revision['dirty'] else ''}, tree "
                           f"{self.revision['tree_hash'][:12]})", highlight=False)
        status = "incomplete"  # unless the loop ends normally or is aborted
        try:
            if any(len(g) > 1 for g in groups):
                self.twins.prepare()
            self.check_health([d for g in groups for d in g])
            for d in chosen:
                self.jobs.append(report.JobRecord(key=d.short, kind=d.kind,
                                                  device=d.identity().to_json(),
                                                  node_id=d.node_id, host=d.host))
            used: set[str] = set()
            for i, d in enumerate(chosen):
                avoid = self.dead | set(self.quarantined) | (used if opts.every else set())
                healthy = [t for t in groups[i] if t.node_id not in avoid]
                if len(healthy) > 1:
                    used.update(t.node_id for t in healthy)
                    self.twins.start(i, healthy)
                    continue
                target = healthy[0] if healthy else self.healthy_device(
                    d.kind, placement.replacement(d.kind, fleet.live_devices(self.dead), avoid))
                if target is None:
                    job = self.jobs[i]
                    job.job_id = self.history.add_job(self.run_id, job.device, d.host, None,
                                                      d.node_id)
                    self.finish(i, "error", "quarantined: " + self.quarantined.get(
                        d.node_id, "no healthy device of this kind"))
                    continue
                used.add(target.node_id)
                self.dispatch(i, target)
            self.loop()
            status = verdict.run_status(self.jobs)
        except KeyboardInterrupt as e:
            self.guard.handled = True  # from here on a signal is noted, not raised
            status, self.aborting = "aborted", True
            self.stop_all("error", f"cancelled: the run was aborted "
                                   f"({signals.as_interrupted(e).name})")
            raise
        finally:
            self.stop_all("error", "the driver stopped before this job ended")
            self.record.finish(status)
        flags = self.regressions()
        code = verdict.exit_code(self.jobs, flags)
        return RunOutcome(self.run_id, status, code, self.jobs, flags, self.revision,
                          time.monotonic() - t0, self.compared)

    def loop(self) -> None:
        """Stream until every job has ended (the run's heartbeat is ``RunRecord``'s thread)."""
        watched = time.monotonic()
        with self.show.view(self.jobs) as view:
            while self.refs:
                self.guard.check()
                self.step()
                now = time.monotonic()
                if now - watched > WATCH_S:
                    self.watch()
                    watched = now
                view.update()

    def stop_all(self, status: str, error: str) -> None:
        """Cancel every job still in flight and record it as ended with ``status``."""

        jobs = sorted({sh.job for sh in self.shards.values()})
        for slot in list(self.refs):  # every twin of a job, before its job is finished
            self.cancel(slot)
        for i in jobs:
            self.finish(i, status, error)
        self.twins.close()

    def regressions(self) -> list[dict]:
        from db.regressions import analyse

        try:
            rep = analyse(self.history, self.run_id)
        except FarmError as e:
            self.console.print(f"regression check skipped: {e}", highlight=False)
            self.compared = False
            return []
        self.compared = rep.compared
        return [f.to_json() for f in rep.regressions]
