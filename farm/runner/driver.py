"""`farm run`: resolve, bring a fleet up, run the loop (`loop.Driver`), bring the fleet down.

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
6. Ctrl-C or SIGTERM (`signals`), at any moment from the fleet's start to the summary, cancels
   the jobs, marks the run ``aborted``, stops the fleet (no Ray process left) and ends with one
   line and exit 130 / 143; what arrived is kept. So the run's row is written before an
   embedded fleet starts, and a heartbeat thread keeps it fresh from then on: a ``running`` run
   whose heartbeat is old has lost its driver, and the next `farm run` marks it ``aborted``.
Every ``ray.get``/``ray.wait`` has a deadline. What the run shows meanwhile: `progress`.
"""

from __future__ import annotations

import contextlib
import math
import os
import time

from rich.console import Console

from dflash2.runtime_context import dispatch_env, run_context
from farm.errors import EXIT_USAGE, FarmError
from farm.fleet import shipping
from farm.fleet.devices import check_twins, parse_selectors
from farm.report import summary as report
from farm.runner import signals
from farm.runner.checks import check_arch_env, check_collects
from farm.runner.loop import Driver
from farm.runner.progress import Progress
from farm.runner.record import HEARTBEAT_S, ORPHAN_AFTER_S, RunRecord
from farm.runner.run_types import RunOptions, RunOutcome

__all__ = ["HEARTBEAT_S", "ORPHAN_AFTER_S", "Driver", "RunOptions", "RunOutcome", "RunRecord",
           "run"]


def run(opts: RunOptions, console: Console | None = None) -> RunOutcome:
    """`farm run` as a library call: returns the outcome (``exit_code`` says how it went).

    Interrupted (SIGINT, SIGTERM) at any point, it records the run ``aborted``, stops the fleet,
    prints one line and raises ``signals.Interrupted`` (``exit_code`` 130 / 143, ``reported``).
    """
    console = console or Console(stderr=True)
    t0 = time.monotonic()
    with signals.Guard() as guard:
        try:
            return _run(opts, console, guard)
        except KeyboardInterrupt as e:  # before the run was recorded (after: _run reports)
            if isinstance(e, signals.Interrupted) and e.reported:
                raise
            stop = signals.as_interrupted(e)
            console.print(f"aborted ({stop.name}) after {report.fmt_s(time.monotonic() - t0)}, "
                          f"before the run was recorded", highlight=False, markup=False)
            raise signals.Interrupted(stop.signum, reported=True) from None


def _run(opts: RunOptions, console: Console, guard: signals.Guard) -> RunOutcome:
    from db import open_history
    from farm.fleet import cluster, embedded, executor, warm, warm_start
    from farm.fleet import devices as fleet
    from suites.manifest import resolve_suite

    t0 = time.monotonic()
    # nan compares false with everything, so "<= 0" alone would let it through and switch the
    # watchdog off; inf would do the same by never expiring.
    for flag, value in (("--test-timeout", opts.test_timeout), ("--job-timeout",
                                                                 opts.job_timeout)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise FarmError(f"{flag} must be > 0 seconds and finite (got {value:g})",
                            EXIT_USAGE)
    if opts.retries < 0:
        raise FarmError("--retries must be >= 0", EXIT_USAGE)
    selectors = parse_selectors(opts.devices)
    check_twins(selectors, opts.every)
    check_arch_env()
    root = (opts.root or shipping.find_root()).resolve()
    suite = resolve_suite(opts.suite, root)
    check_collects(suite, root)
    shipping.check_upload_size(root, shipping.shipped_files(root))  # before any history
    address = opts.address or os.environ.get("RAY_ADDRESS") or None
    if address:  # an unreachable cluster is reported before the history is opened (or made)
        cluster.probe(address.removeprefix("ray://"))
    history = open_history(opts.db)
    record, show = RunRecord(history, console), Progress(console)
    stack = contextlib.ExitStack()  # what the run brings up; closed (signals deferred) below
    outcome: RunOutcome | None = None
    driver: Driver | None = None
    stop: signals.Interrupted | None = None
    try:
        revision = shipping.revision(root)
        # The runtime's DFLASH2_* variables travel explicitly (a real cluster's nodes do not
        # inherit the driver's environment) and are recorded with the run (`Driver.context`).
        opts.env = {**dispatch_env(), **opts.env}
        context = run_context(opts.env)  # what changes dispatch, for the history
        staged = stack.enter_context(shipping.staged_tree(root))
        # No address: a warm fleet (`farm fleet up`) when one is up and has the devices.
        kept = None if address else warm.attach(selectors, lambda line: console.print(
            line, highlight=False, markup=False, soft_wrap=True))
        execs: dict = {}
        if address or kept:
            address = address or kept.address
            renv = shipping.runtime_env(staged, opts.env)
            if kept:  # its nodes are this host's: checked here while the driver connects
                prechecks = warm_start.precheck(kept, selectors, staged)
                renv = warm_start.lazy(renv) if kept.executors else renv
            with show.phase(f"connecting to Ray at {address}", plain=False):
                cluster.connect(address, renv, node_ip=embedded.LOOPBACK if kept else None)
            if kept:
                execs = warm_start.executors(kept, prechecks, lambda line: console.print(
                    line, highlight=False, markup=False, soft_wrap=True))
        else:
            devices = embedded.plan(selectors)
            console.print(embedded.describe(devices), highlight=False)
            # The row exists before the fleet starts: an interrupt from here on aborts a run.
            record.open(suite, opts, revision, context)
            with show.phase(f"starting fleet: local Ray, {len(devices)} device node(s)"):
                addr = stack.enter_context(embedded.embedded_fleet(
                    devices, before_start=guard.hold_ray, workdir=staged))
                # Its nodes are this host's and were health-checked here as they started, so
                # no Ray task needs the tree: device jobs go to executors that run the staged
                # tree where it lies, and the driver's job carries no runtime env (Ray then
                # starts workers without its agent's setup, `executor.start`). Ray tasks take
                # the tree only as the job's working_dir: without executors, (re)connect so.
                renv = shipping.runtime_env(staged, opts.env)
                execs, why = {}, f"{executor.ENV_OFF}=0"
                if executor.wanted():
                    cluster.connect(addr, None, node_ip=embedded.LOOPBACK)
                    execs, why = executor.start([d.node_id for d in fleet.live_devices()])
                if why:
                    console.print(f"embedded fleet: {why}: this run's device jobs run as Ray "
                                  "tasks", highlight=False, markup=False, soft_wrap=True)
                    cluster.reconnect(addr, renv, node_ip=embedded.LOOPBACK)
        guard.hold_ray()  # ray.init put Ray's SIGTERM handlers in; ours go back
        guard.check()
        driver = Driver(opts, console, history, suite, revision, record, show, guard, context)
        if execs:
            driver.use_executors(execs, staged, renv["env_vars"])
        outcome = driver.run()
    except KeyboardInterrupt as e:
        guard.handled = True
        stop = signals.as_interrupted(e)
    except BaseException:
        with guard.deferred():
            record.finish("incomplete")  # never left `running` (no-op once finished)
            _close(stack, cluster, history)
        raise
    with guard.deferred():  # a second Ctrl-C does not cut the teardown short
        _close(stack, cluster, history, keep_history=True)
        if stop is None and guard.received is not None:  # a signal during the teardown
            stop = signals.Interrupted(guard.received)
        if stop is not None:
            record.finish("aborted")  # no-op when the run had finished first
            kept = sum(len(j.results) for j in driver.jobs) if driver else 0
            console.print(_abort_line(record, stop, kept, time.monotonic() - t0),
                          highlight=False, markup=False)
        history.close()
    if stop is not None:
        raise signals.Interrupted(stop.signum, reported=True) from None
    return outcome


def _close(stack: contextlib.ExitStack, cluster, history, keep_history: bool = False) -> None:
    from farm.fleet import health

    try:
        stack.close()  # the fleet (every process of it), the staged tree
    finally:
        health.forget()  # checks started for a warm fleet's nodes this run did not use
        cluster.disconnect()
        if not keep_history:
            history.close()


def _abort_line(record: RunRecord, stop: signals.Interrupted, kept: int, seconds: float) -> str:
    if not record.run_id:
        return f"aborted ({stop.name}) after {report.fmt_s(seconds)}, before the run started"
    if record.status != "aborted":
        return (f"run {record.run_id}: interrupted ({stop.name}) after the run ended; "
                f"recorded as {record.status}")
    return (f"run {record.run_id}: aborted ({stop.name}) after {report.fmt_s(seconds)}; "
            f"{kept} result(s) kept")
