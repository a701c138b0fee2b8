"""Warm executors: one long-lived Ray actor per node of a warm fleet, so a run starts no worker.

Every `farm run` is a new Ray driver, hence a new Ray job, and Ray starts fresh worker
processes for each job (and for each runtime env): on this 2-core host about 0.9 s before a
run's first task runs on a node, on the critical path of every run. A warm fleet (`farm fleet
up`) exists to make the second run cheap, so its keeper starts one *executor* per node once: a
detached, named async actor (``farm-exec-<node id>``) in the keeper's job. A run attached to the
fleet looks the executors up (a GCS lookup) and has each device job run by its node's executor
instead of a Ray task. The embedded fleet, being this host's too, uses executors of the run's
own job (`start`): not for a second run, but because a Ray job without a ``working_dir`` gets its
workers without the runtime-env agent's setup, about half the worker start.

The executor runs nothing of its own version: it starts ``python -m farm.runner.exec_entry``
in the run's staged tree (the driver's copy; a warm fleet is on the driver's host by
construction), with the tree first on the path and the run's variables set, and relays the
event batches that process writes, one JSON line each, as a Ray streaming generator. So the
code that runs is the run's, as with a Ray ``working_dir``; the executor is only the process
that is already up. One job per device at a time (the lock stands in for the device resource a
task asks for); a cancelled call kills its process group, and so does the death of the driver
that made the call (``caller``: its pid and start time; a Ray task dies with its driver's job,
an executor's call would otherwise run on, holding the device, until the job's own timeout).

The pipes carry the spec down (one JSON line on stdin) and, for a twin of a sharded job, its
test queue: the entry asks on stdout (``{"queue": "register" | "next", "args": [...]}``) and
the executor, already a Ray worker, calls the run's queue actor and answers on stdin. So no
job process connects to Ray itself.

``VERSION`` names the protocol between a driver and an executor; a fleet whose executors speak
another (started by an older checkout) is used through Ray tasks, as before, and the run says
why in one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys

from farm.fleet.cluster import NAMESPACE

VERSION = 2
PREFIX = "farm-exec-"
ENTRY = "farm.runner.exec_entry"  # run in the run's tree, by name: nothing of it imported here
LINE_LIMIT = 1 << 28  # one batch per line; a failure's captured output can be large
READY_S = 60.0  # how long the keeper waits for its executors to answer
QUEUE_CALLS = ("register", "next")  # what an entry may ask of its job's queue
QUEUE_CALL_S = 30.0  # deadline on each (Ray waits forever otherwise)
CALLER_POLL_S = 1.0  # how often a job's executor looks for its driver
# Ray's per-worker variables: the entry is a plain process (or a driver of its own), not a worker
_WORKER_ONLY = ("RAY_JOB_ID", "RAY_RAYLET_PID", "RAY_NODE_ID", "RAY_RUNTIME_ENV_HOOK",
                "RAY_WORKER_ID")


ENV_OFF = "FARM_EXECUTORS"  # "0": a local fleet's device jobs run as Ray tasks (as on real Macs)


def wanted() -> bool:
    """Whether this run uses executors where a local fleet has them (``FARM_EXECUTORS=0``: the
    Ray-task path instead, to compare the two or to rule the executors out)."""
    return os.environ.get(ENV_OFF, "1") != "0"


def name(node_id: str) -> str:
    return PREFIX + node_id


class NodeExecutor:
    """The actor's body (async: calls interleave; a job waits for the device's lock)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.lock = asyncio.Lock()

    async def version(self) -> int:
        return VERSION

    async def run(self, spec: dict, tree: str, env: dict[str, str], caller: dict | None = None):
        """The device job of ``spec`` (`farm.runner.device_job.run_job`'s), run in ``tree``
        (a directory of this host) with ``env`` added; yields its event batches. ``caller``:
        the driver's ``{"pid", "started"}`` (`caller`), whose end ends the job."""
        async with self.lock:
            if caller and not _alive(caller):
                return  # queued behind another job, and its driver is gone meanwhile
            async for batch in self._entry(spec, tree, env, caller):
                yield batch

    async def _entry(self, spec: dict, tree: str, env: dict[str, str], caller: dict | None):
        full = {k: v for k, v in os.environ.items() if k not in _WORKER_ONLY}
        # As Ray gives a task's worker (it sets it when unset): the same job, the same threads,
        # whether a task or an executor runs it.
        full.setdefault("OMP_NUM_THREADS", "1")
        full.update(env)
        full["PYTHONPATH"] = os.pathsep.join(p for p in (tree, full.get("PYTHONPATH")) if p)
        full["FARM_EXEC_NODE"] = self.node_id
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", ENTRY, cwd=tree, env=full, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, limit=LINE_LIMIT, start_new_session=True)
        watch = asyncio.create_task(_end_with(caller, proc)) if caller else None
        queue: dict = {}  # the run's queue actor, looked up once per job (`_ask`)
        try:
            proc.stdin.write(json.dumps(spec).encode() + b"\n")
            await proc.stdin.drain()
            while line := await proc.stdout.readline():
                msg = json.loads(line)
                if isinstance(msg, dict):  # a twin's question to its queue
                    answer = await _ask(spec.get("shard") or {}, msg, queue)
                    proc.stdin.write(json.dumps(answer).encode() + b"\n")
                    await proc.stdin.drain()
                    continue
                yield msg
            await proc.wait()
        finally:  # cancelled (ray.cancel), or the driver is gone: nothing of the job is left
            if watch is not None:
                watch.cancel()
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()


def caller() -> dict:
    """This process as the caller of an executor's job (the driver's side)."""
    from farm.fleet.reaping import psutil_module

    return {"pid": os.getpid(), "started": psutil_module().Process().create_time()}


def _alive(who: dict) -> bool:
    from farm.fleet.reaping import same_process

    return same_process(who["pid"], who["started"]) is not None


async def _end_with(who: dict, proc) -> None:
    """Kill the job's process group once its driver is gone (checked every second)."""
    while proc.returncode is None:
        await asyncio.sleep(CALLER_POLL_S)
        if not _alive(who):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            return


async def _ask(shard: dict, msg: dict, queue: dict) -> dict:
    """One queue call for the entry: ``{"value": ...}`` or ``{"error": "..."}``. ``queue``
    keeps the actor's handle between a job's calls (a twin asks once per test)."""
    import ray

    method = msg.get("queue")
    if method not in QUEUE_CALLS or not shard.get("queue"):
        return {"error": f"no such queue call {method!r} for this job"}
    try:
        if "actor" not in queue:
            queue["actor"] = ray.get_actor(shard["queue"], namespace=NAMESPACE)
        ref = getattr(queue["actor"], method).remote(str(shard["job"]), str(shard["name"]),
                                            *(msg.get("args") or []))
        return {"value": await asyncio.wait_for(ref, QUEUE_CALL_S)}
    except Exception as e:  # noqa: BLE001 -- the queue is gone: the job says so and ends
        return {"error": f"{type(e).__name__}: {str(e).strip()[-300:]}"}


def _create(node_ids: list[str], **options) -> dict[str, object]:
    """One executor actor per node, pinned to it: node id -> handle."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cls = ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(NodeExecutor)
    return {n: cls.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n, soft=False),
                           **{k: (v(n) if callable(v) else v) for k, v in options.items()},
                           ).remote(n) for n in node_ids}


def start_all(node_ids: list[str], timeout: float = READY_S) -> None:
    """The keeper's part (connected to its fleet as a driver): one executor per node, pinned
    to it, detached (it outlives the keeper's driver; the fleet's end kills it), each
    answering before this returns."""
    import ray

    actors = _create(node_ids, name=name, namespace=NAMESPACE, lifetime="detached",
                     get_if_exists=True)
    ray.get([a.version.remote() for a in actors.values()], timeout=timeout)


def start(node_ids: list[str], timeout: float = READY_S) -> tuple[dict[str, object], str | None]:
    """For a driver that starts its own fleet on this host (the embedded fleet): executors of
    this driver's job, which end with it; node id -> handle, or ({}, why) when they did not
    answer (why: the module docstring)."""
    import ray

    actors = _create(node_ids)
    why = _unusable(actors, timeout)
    if why:
        for a in actors.values():
            with contextlib.suppress(Exception):
                ray.kill(a)
        return {}, why
    return actors, None


def find(node_ids: list[str]) -> tuple[dict[str, object], str | None]:
    """For a driver attached to a warm fleet: node id -> its executor's handle, for every node
    whose executor speaks this ``VERSION``; and why none is used, when that is so."""
    import ray

    found = {}
    for n in node_ids:
        with contextlib.suppress(ValueError):
            found[n] = ray.get_actor(name(n), namespace=NAMESPACE)
    if not found:
        return {}, ("no executor on its nodes (a fleet started by an older checkout, or its "
                    "executors were stopped)")
    why = _unusable(found, 10)
    return ({}, why) if why else (found, None)


def _unusable(actors: dict[str, object], timeout: float) -> str | None:
    """Why these executors cannot serve this checkout's runs (None: they can)."""
    import ray

    try:
        versions = ray.get([a.version.remote() for a in actors.values()], timeout=timeout)
    except (ray.exceptions.RayError, TimeoutError) as e:
        return f"its executors did not answer ({type(e).__name__}: {str(e).strip()[:200]})"
    bad = sorted({v for v in versions if v != VERSION})
    return f"its executors speak protocol {bad}, this checkout {VERSION}" if bad else None


def cancel(ref) -> None:
    """Cancel an executor's job: its call is cancelled (force is for tasks only), which kills
    the job's process group."""
    import ray

    with contextlib.suppress(Exception):
        ray.cancel(ref)

