"""The embedded fleet: with no cluster given, a local Ray instance that lives for one run.

Its device nodes are this host's own device (when a selector matches it) plus one emulated
profile for each selector nothing real matches (``g13s`` -> applegpu_g13s, ``g14`` -> its
representative applegpu_g14g, see ``Selector.emulation_target``). Each node carries the same
labels and ``dflash2_device`` resource a `farm agent` node does, so the run loop cannot tell
the difference. Token auth stays on, with a token made for the run and kept in memory. Every
node, and the driver that connects to it, uses the loopback address: nothing leaves the host.
(Ray maps 127.0.0.1 to the host's outward address unless it runs in its single-host mode,
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which only `ray start` reads otherwise: an embedded fleet
is one host, so its processes and the driver run in that mode.)

Fast start (`start_local_fleet`, shared with the warm fleet of `farm fleet up`): only what a run
needs is started. The head is the first device's node (no node without a device); no dashboard,
API server, autoscaler monitor, log monitor or Ray client server; each node's dashboard agent in
Ray's minimal mode. Every node's processes are started at once, each node with a temp dir of its
own, and the registrations (a raylet registers once its agents are up: the seconds of a start)
are awaited together instead of one node after the other. Meanwhile each device's health check
(`farm.fleet.health.check`: the same subprocess, environment and shipped tree a node runs it
with, this host being every node's host) runs beside the start, and its result is handed to the
run for the node started for that device. The run then connects without a runtime env and
hands its device jobs to executors of its own job (`farm.fleet.executor.start`): a job with a
``working_dir`` gets its workers only after Ray's runtime-env agent has set it up. The nodes
die with the process that started them (Ray's kernel fate sharing), and a watchdog kills the
rest of the fleet at once when that process is gone (`start_watchdog`).

Teardown leaves no process behind, whenever it happens (a Ctrl-C while Ray is still starting
included): `farm.fleet.reaping` finds every process of the fleet and kills it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from devices.identity import DeviceIdentity, Selector, current_device, emulated_identity
from farm.errors import EXIT_INFRA, EXIT_USAGE, FarmError
from farm.fleet.cluster import free_ports, use_token_auth
from farm.fleet.devices import RESOURCE, device_labels
from farm.fleet.reaping import (
    ENV_FLEET,
    child_subreaper,
    descendants,
    kill_fleet,
    start_watchdog,
)
from farm.tempdirs import owned_tmpdir

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node; results are small JSON batches
LOOPBACK = "127.0.0.1"
ENV_MULTI_HOST = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # ray_constants.ENABLE_RAY_CLUSTER_ENV_VAR
ENV_USAGE_STATS = "RAY_USAGE_STATS_ENABLED"
ENV_PRESTART = "RAY_prestart_worker_first_driver"
START_S = 60.0  # deadline for the whole fleet to be up
TEMP_PREFIX = "farm-fleet-"  # + creator pid: swept once the creator is gone (farm.tempdirs)


def plan(selectors: list[Selector], native: DeviceIdentity | None = None) -> list[DeviceIdentity]:
    """The devices an embedded fleet needs for ``selectors``, native first: one per selector,
    or N twins of it for ``SELECTOR*N`` (emulated: this host has one native device)."""
    native = native or current_device("")
    out: list[DeviceIdentity] = []
    if any(s.matches(native) for s in selectors):
        out.append(native)
    for s in selectors:
        want = getattr(s, "twins", None) or 1
        have = sum(1 for d in out if s.matches(d))
        if have >= want:
            continue
        if s.matches(native):
            raise FarmError(f"{s.text!r} asks for {want} twins of this host's own device "
                            f"({native.label}), and an embedded fleet has one: start `farm "
                            f"agent`s of it and pass --address", EXIT_USAGE)
        target = s.emulation_target()
        if target is None:
            raise FarmError(f"device selector {s.text!r} matches nothing on this host "
                            f"({native.label}) and cannot be emulated: pass --address of a "
                            f"cluster that has one, or use an Apple GPU selector such as g13s",
                            EXIT_USAGE)
        out.extend(emulated_identity(target) for _ in range(want - have))
    return out


def describe(devices: list[DeviceIdentity]) -> str:
    names = [d.label if d.emulated else f"{d.label} (this host)" for d in devices]
    return f"embedded fleet (no --address or RAY_ADDRESS): local Ray with {', '.join(names)}"


@contextlib.contextmanager
def single_host_ray() -> Iterator[None]:
    """Ray imported and set for one host on loopback (see above); restored on exit. Usage
    stats off too: nothing of a local fleet reaches out of the host. And no worker prestarted
    for a node's first driver: a run's tasks carry the run's runtime env (its shipped tree), so
    a worker started without one is never used, only paid for, while the run starts."""
    saved = {k: os.environ.get(k) for k in (ENV_MULTI_HOST, ENV_USAGE_STATS, ENV_PRESTART)}
    os.environ[ENV_MULTI_HOST] = "0"  # before Ray reads it: loopback (see above)
    os.environ[ENV_USAGE_STATS] = "0"
    os.environ[ENV_PRESTART] = "0"  # the nodes started inside inherit it
    from ray._private import ray_constants

    saved_mode, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    ray_log = logging.getLogger("ray")  # its INFO lines ("Overwriting previous Ray address")
    saved_level = ray_log.level
    ray_log.setLevel(logging.WARNING)
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_mode
        ray_log.setLevel(saved_level)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _lean_nodes() -> Iterator[None]:
    """While nodes start: no API server on the head (`include_dashboard=False` still starts
    one, and the head waits for it), dashboard agents in Ray's minimal mode (the raylet waits
    for its agent; the minimal one imports and serves less). Nothing the farm uses needs either:
    it reads the GCS (``ray.nodes()``) and runs tasks. The Ray version is pinned; should these
    hooks be gone in another one, the nodes start as Ray starts them."""
    from ray._private import node as ray_node
    from ray._private import utils as ray_utils

    with _hooks(((ray_node.Node, "start_api_server", lambda self, **kw: None),
                 (ray_utils, "get_dashboard_dependency_error",
                  lambda: ImportError("farm: minimal dashboard agent")))):
        yield


@contextlib.contextmanager
def _hooks(replacements) -> Iterator[None]:
    """Each (owner, name, value) set while the block runs, then restored; one whose name the
    owner lacks (another Ray version) is left alone."""
    saved = {}
    for owner, name, value in replacements:
        if hasattr(owner, name):
            saved[owner, name] = getattr(owner, name)
            setattr(owner, name, value)
    try:
        yield
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


def _node_params(dev: DeviceIdentity, temp_dir: Path, **extra):
    from ray._private.parameter import RayParams

    return RayParams(num_cpus=1, resources={RESOURCE: 1}, labels=device_labels(dev),
                     object_store_memory=OBJECT_STORE_BYTES, node_ip_address=LOOPBACK,
                     include_log_monitor=False, dashboard_agent_listen_port=None,
                     node_manager_port=0, min_worker_port=0, max_worker_port=0,
                     temp_dir=str(temp_dir), **extra)


def _answers(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), timeout=0.2):
        return True
    return False


@contextlib.contextmanager
def _no_node_wait(head: list) -> Iterator[None]:
    """While nodes are made, Ray's ``Node`` waits for nothing registered: it returns once its
    processes are started, instead of waiting (alone, up to 30 s) for its raylet to register,
    and a node other than the head takes the head's directories from the head's ``Node``
    (``head``, once made) instead of polling the GCS (every 2 s) until the head's raylet has
    registered. `start_local_fleet` waits for every registration at once, interruptibly. (The
    ports a node would read from its registration are its own business: the farm talks to the
    GCS.) Hooks that are gone (another Ray) are left alone: nodes then start as Ray starts
    them, one after the other."""
    from ray._private import node as ray_node
    from ray._private import services
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    def head_info(*args, **kwargs) -> list:
        h = head[0]
        return [GcsNodeInfo(state=GcsNodeInfo.GcsNodeState.ALIVE,
                            temp_dir=h.get_temp_dir_path(),
                            session_dir=h.get_session_dir_path())]

    def no_wait(gcs_address, node_id) -> dict:
        return {"labels": {}, "node_manager_port": 0, "runtime_env_agent_port": 0,
                "metrics_agent_port": 0, "metrics_export_port": 0,
                "dashboard_agent_listen_port": 0}

    with _hooks(((services, "get_node", no_wait),
                 (ray_node, "get_all_node_info_until_retrieved", head_info))):
        yield


def _alive(gcs) -> set[str]:
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    try:
        infos = gcs.get_all_node_info(timeout=2, state_filter=GcsNodeInfo.GcsNodeState.ALIVE)
    except Exception:  # noqa: BLE001 -- not yet: asked again until the deadline
        return set()
    return {getattr(k, "hex", lambda k=k: k)() for k in infos}


def start_local_fleet(devices: list[DeviceIdentity], base: Path, timeout: float = START_S,
                      ) -> tuple[str, dict[str, DeviceIdentity]]:
    """Start one Ray node per device on loopback, the first one the head; return the address
    and node id -> device once every node has registered. Ray must be imported under
    `single_host_ray`, token auth set.

    The head starts the GCS; every node's processes are then started at once (a node's own
    start is quick; its raylet's registration, which waits for the node's agents, is what takes
    seconds), and their registrations are awaited together (interruptibly). Ray's exit hooks
    are off (they install signal handlers); its kernel fate sharing is on: the
    nodes' processes die with this process (Linux ``PR_SET_PDEATHSIG``), and the caller kills
    the fleet (`kill_fleet`)."""
    from ray._private.node import Node

    if not devices:
        raise FarmError("no device to start a fleet with", EXIT_USAGE)
    deadline = time.monotonic() + timeout
    address = f"{LOOPBACK}:{free_ports(1)[0]}"
    nodes: list = []
    try:
        with _lean_nodes(), _no_node_wait(nodes):
            for i, dev in enumerate(devices):
                where = ({"gcs_server_port": int(address.rpartition(":")[2]),
                          "include_dashboard": False, "no_monitor": True} if i == 0 else
                         {"gcs_address": address})
                nodes.append(Node(_node_params(dev, base / str(i), **where), head=i == 0,
                                  shutdown_at_exit=False, spawn_reaper=True))
    except (FarmError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 -- Ray's own failure, in one line
        why = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FarmError(f"local Ray fleet failed to start ({devices[len(nodes)].label} node): "
                        f"{why[:300]}", EXIT_INFRA) from None
    gcs = nodes[0].get_gcs_client()
    ids = [n.node_id for n in nodes]
    while True:
        up = _alive(gcs)
        if all(i in up for i in ids):
            break
        if time.monotonic() > deadline:
            late = [d.label for d, i in zip(devices, ids, strict=True) if i not in up]
            raise FarmError(f"local Ray fleet failed to start: {', '.join(late)} not up within "
                            f"{timeout:g}s", EXIT_INFRA)
        time.sleep(0.05)
    return address, dict(zip(ids, devices, strict=True))


@contextlib.contextmanager
def embedded_fleet(devices: list[DeviceIdentity],
                   before_start: Callable[[], None] | None = None,
                   workdir: Path | None = None) -> Iterator[str]:
    """Start one node per device (the first one the head); yield the address once every node
    is up; tear everything down after.

    ``before_start`` runs once Ray is imported, before any Ray process starts (the run's signal
    guard uses it to keep Ray's SIGTERM handler out). ``workdir``: the shipped tree; when
    given, each device's health check runs beside the start (`farm.fleet.health.precheck`).
    (The driver connects once every node is up: a ray.init made while the fleet still starts
    brings in Ray's core worker, whose C++ signal handler would take a Ctrl-C or SIGTERM that
    lands there.)
    """
    from farm.fleet import health

    use_token_auth(secrets.token_hex(32))
    saved_fleet = os.environ.get(ENV_FLEET)
    fleet_id = secrets.token_hex(8)
    before = descendants()
    was_reaper = child_subreaper(True)
    os.environ[ENV_FLEET] = fleet_id  # the prechecks' subprocesses are the fleet's too
    base = None
    try:
        prechecks = {id(d): health.precheck(d, workdir) for d in devices} if workdir else {}
        with single_host_ray():
            if before_start is not None:
                before_start()
            base = owned_tmpdir(TEMP_PREFIX)
            watchdog = start_watchdog(base)  # noqa: F841 -- lives as long as the fleet
            address, nodes = start_local_fleet(devices, base)
            for node_id, dev in nodes.items():
                if id(dev) in prechecks:
                    health.adopt(node_id, prechecks.pop(id(dev)))
            yield address
    finally:
        try:
            with contextlib.suppress(Exception):
                import ray

                ray.shutdown()
            kill_fleet(fleet_id, before, roots={str(base)} if base else set())
        finally:
            health.forget()
            if base is not None:
                shutil.rmtree(base, ignore_errors=True)
            if saved_fleet is None:
                os.environ.pop(ENV_FLEET, None)
            else:
                os.environ[ENV_FLEET] = saved_fleet
            if not was_reaper:
                child_subreaper(False)
