"""The driver loop of `farm run`: resolve, connect, check, dispatch, stream, store, report.

Order matters for the promises the farm makes:
1. suite, selectors and history are resolved before any cluster work (usage errors are instant);
2. live matching devices are checked before anything is scheduled: Ray waits forever on work no
   node can take, so a selector nothing matches fails here, listing the live devices;
3. each chosen device passes a health check before its first job (else it is quarantined and
   another device of its kind is tried);
4. every job is a Ray streaming generator pinned to its device node; every batch it yields is
   written to the history as it arrives, so nothing received is lost whatever happens later;
5. a node that dies mid-job: the job continues on another live device of its kind with the tests
   not yet reported (``--retries`` times), else it is ``lost``. Ray's own ``max_retries`` is
   off for jobs: it would re-run the whole generator (duplicating every result already
   stored) and, with no matching node left, wait forever instead of reporting ``lost``;
6. Ctrl-C cancels the jobs and marks the run ``aborted``; what arrived is kept.
Every ``ray.get``/``ray.wait`` has a deadline.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.live import Live

from dflash2.device import parse_selectors
from farm.errors import EXIT_FLAGGED, EXIT_INFRA, EXIT_OK, EXIT_USAGE, FarmError
from farm.fleet import devices as fleet
from farm.fleet import health, placement, shipping
from farm.fleet.devices import Device
from farm.report import summary as report

WAIT_S = 0.25
GET_S = 30.0
HEARTBEAT_S = 5.0
JOB_GRACE_S = 60.0  # beyond --job-timeout, for the device's own timeout handling to report
WATCH_S = 2.0  # how often queued jobs are checked for a device that has gone away
DEFAULT_JOB_TIMEOUT = 3600.0
_DIED = ("NodeDiedError", "WorkerCrashedError", "ObjectLostError", "OwnerDiedError",
         "ObjectFetchTimedOutError", "TaskUnschedulableError", "RaySystemError",
         "ActorDiedError", "LocalRayletDiedError", "ReferenceCountingAssertionError",
         "OutOfMemoryError", "GetTimeoutError")


@dataclass
class RunOptions:
    suite: str
    devices: str = "all"
    every: bool = False
    address: str | None = None
    db: str | None = None
    retries: int = 1
    test_timeout: float | None = None
    job_timeout: float | None = None
    json: bool = False
    junit: Path | None = None
    root: Path | None = None  # the checkout to ship (default: around the cwd)
    env: dict[str, str] = field(default_factory=dict)  # extra environment for device jobs


@dataclass
class RunOutcome:
    run_id: str
    status: str
    exit_code: int
    jobs: list[report.JobRecord]
    flags: list[dict]
    revision: dict
    seconds: float

    def to_json(self) -> dict:
        return {"run_id": self.run_id, "status": self.status, "exit_code": self.exit_code,
                "revision": self.revision, "seconds": round(self.seconds, 2),
                "jobs": [j.to_json() for j in self.jobs], "regressions": self.flags}


def _job_task():
    """The device job as a Ray streaming generator (made lazily: no Ray import at load)."""
    import ray

    from farm.runner import device_job

    return ray.remote(num_returns="streaming", max_retries=0, num_cpus=0)(device_job.run_job)


class Driver:
    """One run: the state the loop needs, and the loop."""

    def __init__(self, opts: RunOptions, console: Console, history, suite, revision: dict):
        self.opts, self.console = opts, console
        self.history, self.suite, self.revision = history, suite, revision
        self.test_timeout = float(opts.test_timeout or suite.timeout)
        self.job_timeout = float(opts.job_timeout or DEFAULT_JOB_TIMEOUT)
        self.run_id = ""
        self.dead: set[str] = set()
        self.quarantined: dict[str, str] = {}
        self.health: dict[str, dict] = {}
        self.jobs: list[report.JobRecord] = []
        self.refs: dict[int, object] = {}  # index in self.jobs -> ObjectRefGenerator
        self.deadline: dict[int, float] = {}
        self.job_task = _job_task()

    # -- before any job ---------------------------------------------------------------------

    def check_health(self, devices: list[Device]) -> None:
        """Health-check devices not yet checked this run; quarantine the ones that fail."""
        todo = [d for d in devices if d.node_id not in self.health]
        results = health.check_devices(todo) if todo else {}
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

    def spec(self, job: report.JobRecord, device: Device) -> dict:
        return {"suite": self.suite.name, "pytest_args": self.suite.pytest_args(),
                "test_timeout": self.test_timeout, "job_timeout": self.job_timeout,
                "device": {"arch": device.arch, "emulated": device.emulated},
                "deselect": sorted(job.results), "attempt": job.attempt, "env": self.opts.env}

    def dispatch(self, i: int, device: Device) -> None:
        job = self.jobs[i]
        job.node_id, job.host, job.state, job.current = device.node_id, device.host, "queued", ""
        job.end = None
        job.nodes.append(device.node_id)
        h = self.health.get(device.node_id, {})
        job.device = h.get("identity") or device.identity().to_json()
        if job.job_id is None:
            job.job_id = self.history.add_job(self.run_id, job.device, device.host,
                                              h.get("os"), device.node_id)
        opts = {**placement.pinned(device), "resources": {fleet.RESOURCE: 1}}
        self.refs[i] = self.job_task.options(**opts).remote(self.spec(job, device))
        self.deadline[i] = time.monotonic() + self.job_timeout + JOB_GRACE_S

    def finish(self, i: int, status: str, error: str | None = None) -> None:
        job = self.jobs[i]
        job.status, job.error, job.state, job.current = status, error, "done", ""
        self.refs.pop(i, None)
        self.deadline.pop(i, None)
        if job.job_id is not None:
            self.history.finish_job(job.job_id, status, error, attempts=job.attempt)

    def node_lost(self, i: int, why: str) -> None:
        """The job's node died (or its task could not run there): retry elsewhere, or lost."""
        job = self.jobs[i]
        self.dead.add(job.node_id)
        self.refs.pop(i, None)
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

    def take(self, i: int, batch: list[dict]) -> None:
        job = self.jobs[i]
        store: list[dict] = []
        for ev in batch:
            kind = ev.get("type")
            if kind == "farm_job_start":
                job.state = "running"
            elif kind == "farm_job_end":
                job.end = ev
            elif kind == "result":
                ev["farm_node"], ev["farm_attempt"] = job.node_id, job.attempt  # provenance
                job.results[ev.get("nodeid", "")] = ev
                job.current = ev.get("nodeid", "")
                store.append(ev)
            elif kind in ("session_start", "session_finish"):
                store.append(ev)
        if store:
            self.history.ingest_events(job.job_id, store)

    def step(self) -> None:
        import ray

        if not self.refs:
            return
        order = list(self.refs)
        ready, _ = ray.wait([self.refs[i] for i in order], num_returns=1, timeout=WAIT_S)
        ready_ids = {id(r) for r in ready}
        for i in order:
            gen = self.refs.get(i)
            if gen is None or id(gen) not in ready_ids:
                continue
            try:
                ref = next(gen)
            except StopIteration:
                self.ended(i)
                continue
            try:
                self.take(i, ray.get(ref, timeout=GET_S))
            except ray.exceptions.RayError as e:
                name = type(e).__name__
                cause = getattr(e, "cause", None)
                if name in _DIED or type(cause).__name__ in _DIED:
                    self.node_lost(i, name)
                else:
                    self.finish(i, "error", f"{name}: {str(e).strip().splitlines()[-1][:300]}")

    def ended(self, i: int) -> None:
        job = self.jobs[i]
        end = job.end
        if end is None:
            self.finish(i, "error", "the device job ended without its final event")
            return
        status = end.get("status")
        if status == "completed":
            c = job.counts()
            bad = c["unexpected_fail"] + c["unexpected_pass"] + c["crashed"]
            self.finish(i, "failed" if bad else "passed", end.get("error"))
        else:
            self.finish(i, status if status in ("timeout", "error") else "error",
                        end.get("error"))

    def watch(self) -> None:
        """Jobs past their deadline, and jobs whose node left the cluster before streaming."""
        import ray

        now = time.monotonic()
        alive = {d.node_id for d in fleet.live_devices()}
        for i in list(self.refs):
            job = self.jobs[i]
            if now > self.deadline[i]:
                ray.cancel(self.refs[i], force=True)
                self.finish(i, "timeout", f"no end of job within --job-timeout "
                                          f"{self.job_timeout:g}s + {JOB_GRACE_S:g}s")
            elif job.node_id not in alive:
                ray.cancel(self.refs[i], force=True)
                self.node_lost(i, "node left the cluster")

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> RunOutcome:
        t0 = time.monotonic()
        opts = self.opts
        selectors = parse_selectors(opts.devices)
        devices = fleet.live_devices()
        missing = fleet.unmatched(devices, selectors)
        if missing:
            names = ", ".join(repr(s.text) for s in missing)
            raise FarmError(f"no live device matches {names}; {fleet.describe(devices)}",
                            EXIT_INFRA)
        match = fleet.matching(devices, selectors)
        chosen = placement.choose_devices(match, every=opts.every)
        self.run_id = self.history.start_run(self.suite.name, opts.devices, self.revision)
        self.console.print(f"run {self.run_id}: suite {self.suite.name} on "
                           f"{', '.join(d.short for d in chosen)} (revision "
                           f"{(self.revision['git_sha'] or 'no git')[:10]}"
                           f"{'+dirty' if self.revision['dirty'] else ''}, tree "
                           f"{self.revision['tree_hash'][:12]})", highlight=False)
        status = "incomplete"  # unless the loop ends normally or is aborted
        try:
            self.check_health(chosen)
            for d in chosen:
                self.jobs.append(report.JobRecord(key=d.short, kind=d.kind,
                                                  device=d.identity().to_json(),
                                                  node_id=d.node_id, host=d.host))
            used: set[str] = set()
            for i, d in enumerate(chosen):
                avoid = self.dead | set(self.quarantined) | (used if opts.every else set())
                target = d if d.node_id not in avoid else self.healthy_device(
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
            status = self.verdict()
        except KeyboardInterrupt:
            self.abort()
            status = "aborted"
            raise
        finally:
            self.stop_all("error", "the driver stopped before this job ended")
            self.history.finish_run(self.run_id, status)
        flags = self.regressions()
        code = self.exit_code(flags)
        return RunOutcome(self.run_id, status, code, self.jobs, flags, self.revision,
                          time.monotonic() - t0)

    def loop(self) -> None:
        live_ok = sys.stderr.isatty() and not self.opts.json
        beat = watched = time.monotonic()
        with Live(report.progress_table(self.jobs), console=self.console, refresh_per_second=4,
                  transient=True, auto_refresh=live_ok) as live:
            while self.refs:
                self.step()
                now = time.monotonic()
                if now - watched > WATCH_S:
                    self.watch()
                    watched = now
                if now - beat > HEARTBEAT_S:
                    self.history.heartbeat(self.run_id)
                    beat = now
                if live_ok:
                    live.update(report.progress_table(self.jobs))

    def stop_all(self, status: str, error: str) -> None:
        """Cancel every job still in flight and record it as ended with ``status``."""
        import ray

        for i in list(self.refs):
            ray.cancel(self.refs[i], force=True)
            self.finish(i, status, error)

    def abort(self) -> None:
        self.stop_all("error", "cancelled: the run was aborted (Ctrl-C)")
        self.console.print(report.matrix_table(self.jobs))
        self.console.print(f"run {self.run_id} aborted; the results received are kept",
                           highlight=False)

    def verdict(self) -> str:
        statuses = {j.status for j in self.jobs}
        if statuses & {"lost", "error"}:
            return "incomplete"
        return "passed" if statuses <= {"passed"} else "failed"

    def regressions(self) -> list[dict]:
        from db.regressions import find_regressions

        try:
            flags = find_regressions(self.history, self.run_id)
        except FarmError as e:
            self.console.print(f"regression check skipped: {e}", highlight=False)
            return []
        return [f.to_json() for f in flags if f.is_regression]

    def exit_code(self, flags: list[dict]) -> int:
        if any(j.status in ("lost", "error") for j in self.jobs):
            return EXIT_INFRA
        if flags or any(j.status != "passed" for j in self.jobs):
            return EXIT_FLAGGED
        return EXIT_OK


def run(opts: RunOptions, console: Console | None = None) -> RunOutcome:
    """`farm run` as a library call: returns the outcome (``exit_code`` says how it went)."""
    from db import open_history
    from farm.fleet import cluster, embedded
    from suites.manifest import resolve_suite

    console = console or Console(stderr=True)
    if opts.test_timeout is not None and opts.test_timeout <= 0:
        raise FarmError("--test-timeout must be > 0 seconds", EXIT_USAGE)
    if opts.job_timeout is not None and opts.job_timeout <= 0:
        raise FarmError("--job-timeout must be > 0 seconds", EXIT_USAGE)
    if opts.retries < 0:
        raise FarmError("--retries must be >= 0", EXIT_USAGE)
    selectors = parse_selectors(opts.devices)
    _check_arch_env()
    root = (opts.root or shipping.find_root()).resolve()
    suite = resolve_suite(opts.suite, root)
    _check_collects(suite, root)
    address = opts.address or os.environ.get("RAY_ADDRESS") or None
    if address:  # an unreachable cluster is reported before the history is opened (or made)
        cluster.probe(address.removeprefix("ray://"))
    history = open_history(opts.db)
    revision = shipping.revision(root)
    try:
        with shipping.staged_tree(root) as staged:
            if address:
                cluster.connect(address, shipping.runtime_env(staged))
                return _drive(opts, console, history, suite, revision)
            devices = embedded.plan(selectors)
            console.print(embedded.describe(devices), highlight=False)
            with embedded.embedded_fleet(devices) as addr:
                cluster.connect(addr, shipping.runtime_env(staged))
                return _drive(opts, console, history, suite, revision)
    finally:
        cluster.disconnect()
        history.close()


def _check_arch_env() -> None:
    """A malformed DFLASH2_DEVICE_ARCH in the driver's environment is the user's to fix now,
    not an error in every device job's pytest after the fleet has started."""
    from dflash2.device import ENV_ARCH, parse_apple_arch

    arch = os.environ.get(ENV_ARCH, "").strip()
    if arch:
        try:
            parse_apple_arch(arch)
        except ValueError as e:
            raise FarmError(f"{ENV_ARCH}={arch!r} in the environment: {e}; unset it "
                            f"(`farm run` picks devices with --devices)", EXIT_USAGE) from None


def _check_collects(suite, root: Path) -> None:
    """A suite given as a path to a test file that defines no test: refused before any cluster
    work (a job that collects nothing would otherwise report a green, empty run)."""
    import ast

    for p in suite.paths:
        rel = p.partition("::")[0]
        full = root / rel
        if full.suffix != ".py" or not full.is_file():
            continue  # a directory: pytest's collection decides
        try:
            tree = ast.parse(full.read_text(encoding="utf-8"), filename=str(full))
        except (OSError, SyntaxError, ValueError):
            continue  # pytest reports it on the device, as a collection error
        if not any((isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                    and n.name.startswith("test"))
                   or (isinstance(n, ast.ClassDef) and n.name.startswith("Test"))
                   for n in tree.body):
            raise FarmError(f"suite path {rel!r} collects no tests: it defines no test_* "
                            f"function or Test* class", EXIT_USAGE)


def _drive(opts: RunOptions, console: Console, history, suite, revision: dict) -> RunOutcome:
    return Driver(opts, console, history, suite, revision).run()
