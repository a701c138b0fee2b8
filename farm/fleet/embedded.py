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

Teardown leaves no process behind, whenever it happens (a Ctrl-C while Ray is still starting
included, when Ray's own bookkeeping of what it started is incomplete): Ray's dashboard and
runtime-env agents ignore SIGTERM and outlive a raylet that dies first. So the fleet's processes
are found three ways -- this process's descendants that were not there before (on Linux this
process is made a child subreaper, so an orphaned agent stays a descendant), any process that
carries the fleet's own ``FARM_FLEET_ID`` in its environment (Ray's processes inherit it), and
any renamed ``ray::`` process holding files open in the fleet's session directory -- stopped
(SIGSTOP, so none can start another), then killed (SIGKILL) and reaped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterator

from dflash2.device import DeviceIdentity, Selector, current_device, emulated_identity
from farm.errors import EXIT_USAGE, FarmError
from farm.fleet.cluster import free_ports, use_token_auth
from farm.fleet.devices import RESOURCE, device_labels

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node; results are small JSON batches
LOOPBACK = "127.0.0.1"
ENV_MULTI_HOST = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR
ENV_FLEET = "FARM_FLEET_ID"  # in every process of one embedded fleet (they inherit it)
REAP_S = 10.0  # how long teardown waits for killed processes to be gone
_SESSION = re.compile(r"(/[^\s=:]*/session_\d{4}-\d\d-\d\d_[\d_-]+)(?=/|\s|$)")


def plan(selectors: list[Selector], native: DeviceIdentity | None = None) -> list[DeviceIdentity]:
    """The devices an embedded fleet needs for ``selectors``, native first, no duplicates."""
    native = native or current_device("")
    out: list[DeviceIdentity] = []
    if any(s.matches(native) for s in selectors):
        out.append(native)
    for s in selectors:
        if s.matches(native):
            continue
        target = s.emulation_target()
        if target is None:
            raise FarmError(f"device selector {s.text!r} matches nothing on this host "
                            f"({native.label}) and cannot be emulated: pass --address of a "
                            f"cluster that has one, or use an Apple GPU selector such as g13s",
                            EXIT_USAGE)
        if all(d.arch != target or not d.emulated for d in out):
            out.append(emulated_identity(target))
    return out


def describe(devices: list[DeviceIdentity]) -> str:
    names = [d.label if d.emulated else f"{d.label} (this host)" for d in devices]
    return f"embedded fleet (no --address or RAY_ADDRESS): local Ray with {', '.join(names)}"


@contextlib.contextmanager
def embedded_fleet(devices: list[DeviceIdentity],
                   before_start: Callable[[], None] | None = None) -> Iterator[str]:
    """Start a head plus one node per device; yield the address; tear everything down after.

    ``before_start`` runs once Ray is imported, before any Ray process starts (the run's signal
    guard uses it to keep Ray's SIGTERM handler out).
    """
    use_token_auth(secrets.token_hex(32))
    saved_env = {k: os.environ.get(k) for k in (ENV_MULTI_HOST, ENV_FLEET)}
    os.environ[ENV_MULTI_HOST] = "0"  # before Ray reads it: loopback (see above)
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    saved_mode, ray_constants.ENABLE_RAY_CLUSTER = ray_constants.ENABLE_RAY_CLUSTER, False
    ray_log = logging.getLogger("ray")  # its INFO lines ("Overwriting previous Ray address")
    saved_level = ray_log.level
    ray_log.setLevel(logging.WARNING)
    if before_start is not None:
        before_start()
    fleet_id = secrets.token_hex(8)
    before = _descendants()
    was_reaper = _child_subreaper(True)
    os.environ[ENV_FLEET] = fleet_id
    cluster = None
    try:
        # Ray's fixed defaults (GCS 6379, client server 10001, dashboard 8265, dashboard agent
        # 52365) would clash with any other Ray on this host; its other ports are chosen free
        # by Ray itself, and the device nodes' dashboard agent ports by Cluster.add_node.
        gcs, client, agent, dashboard = free_ports(4)
        cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
            "num_cpus": 1, "include_dashboard": False, "object_store_memory": OBJECT_STORE_BYTES,
            "gcs_server_port": gcs, "ray_client_server_port": client,
            "dashboard_agent_listen_port": agent, "dashboard_port": dashboard,
            "node_ip_address": LOOPBACK,
        })
        for dev in devices:
            cluster.add_node(wait=False, num_cpus=1, resources={RESOURCE: 1},
                             labels=device_labels(dev), object_store_memory=OBJECT_STORE_BYTES,
                             node_ip_address=LOOPBACK)
        cluster.wait_for_nodes(timeout=60)
        yield cluster.address
    finally:
        try:
            with contextlib.suppress(Exception):
                import ray

                ray.shutdown()
            kill_fleet(fleet_id, before)
            if cluster is not None:
                with contextlib.suppress(Exception):
                    cluster.shutdown()  # Ray's own bookkeeping: its processes are gone already
        finally:
            ray_constants.ENABLE_RAY_CLUSTER = saved_mode
            ray_log.setLevel(saved_level)
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            if not was_reaper:
                _child_subreaper(False)


def _psutil():
    """psutil as Ray ships it (on sys.path once ``ray`` is imported)."""
    import importlib

    import ray  # noqa: F401

    return importlib.import_module("psutil")


def _descendants() -> set[tuple[int, float]]:
    """(pid, start time) of every process below this one."""
    psutil = _psutil()
    out = set()
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            out.add((p.pid, p.create_time()))
    return out


def fleet_processes(fleet_id: str, before: set[tuple[int, float]] = frozenset(),
                    sessions: set[str] | None = None) -> list:
    """The live processes of the fleet ``fleet_id`` (psutil.Process objects).

    ``sessions`` collects the fleet's Ray session directories (named on its processes' command
    lines): a process Ray renamed (``ray::DashboardAgent``; its environment is overwritten by
    the new title too) and that lost its parent is still found by the logs it holds open there.
    """
    psutil = _psutil()
    sessions = set() if sessions is None else sessions
    me = os.getpid()
    found: dict[int, object] = {}
    for p in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if (p.pid, p.create_time()) not in before:
                found[p.pid] = p
    renamed = []
    for p in psutil.process_iter():
        if p.pid == me or p.pid in found:
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get(ENV_FLEET) == fleet_id:
                found[p.pid] = p
            elif p.cmdline()[:1] and p.cmdline()[0].startswith("ray::"):
                renamed.append(p)
    for p in found.values():
        with contextlib.suppress(psutil.Error):
            sessions.update(_SESSION.findall(" ".join(p.cmdline())))
    inside = tuple(d + "/" for d in sessions)
    for p in renamed if sessions else ():
        with contextlib.suppress(psutil.Error):
            if any(f.path.startswith(inside) for f in p.open_files()):
                found[p.pid] = p
    return list(found.values())


def kill_fleet(fleet_id: str, before: set[tuple[int, float]] = frozenset(),
               timeout: float = REAP_S) -> list[int]:
    """Stop, then kill, every process of the fleet; wait (bounded) until they are gone.

    Returns the pids still alive after ``timeout`` (none, unless the kernel refuses).
    """
    psutil = _psutil()
    seen: dict[int, object] = {}
    sessions: set[str] = set()
    for _ in range(5):  # stopped parents start nothing: a few passes find the whole tree
        new = [p for p in fleet_processes(fleet_id, before, sessions) if p.pid not in seen]
        if not new:
            break
        for p in new:
            seen[p.pid] = p
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGSTOP)
    for p in seen.values():
        with contextlib.suppress(psutil.Error):
            p.kill()
    deadline = time.monotonic() + timeout
    alive = list(seen.values())
    while alive and time.monotonic() < deadline:
        _reap()
        _, alive = psutil.wait_procs(alive, timeout=0.2)
        alive = [p for p in alive if _running(p, psutil)]
    _reap()
    return [p.pid for p in alive]


def _running(p, psutil) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _reap() -> None:
    """Collect exited children (the orphans a subreaper inherits are ours to wait for)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _child_subreaper(on: bool) -> bool:
    """Linux: make this process (or stop it being) the reaper of its orphaned descendants.
    Returns whether it was one before (elsewhere: False, nothing done)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    was = ctypes.c_int(0)
    with contextlib.suppress(Exception):
        libc.prctl(37, ctypes.byref(was), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
        libc.prctl(36, 1 if on else 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    return bool(was.value)
