"""The embedded fleet: with no cluster given, a local Ray instance that lives for one run.

Its device nodes are this host's own device (when a selector matches it) plus one emulated
profile for each selector nothing real matches (``g13s`` -> applegpu_g13s, ``g14`` -> its
representative applegpu_g14g, see ``Selector.emulation_target``). Each node carries the same
labels and ``dflash2_device`` resource a `farm agent` node does, so the run loop cannot tell
the difference. Token auth stays on, with a token made for the run and kept in memory.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
from collections.abc import Iterator

from dflash2.device import DeviceIdentity, Selector, current_device, emulated_identity
from farm.errors import EXIT_USAGE, FarmError
from farm.fleet.cluster import free_ports, use_token_auth
from farm.fleet.devices import RESOURCE, device_labels

OBJECT_STORE_BYTES = 100 * 1024 * 1024  # per node; results are small JSON batches


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
def embedded_fleet(devices: list[DeviceIdentity]) -> Iterator[str]:
    """Start a head plus one node per device; yield the address; tear everything down after."""
    use_token_auth(secrets.token_hex(32))
    if sys.platform == "darwin":  # Ray refuses multi-node clusters on macOS without it
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")
    from ray.cluster_utils import Cluster

    # Ray's fixed defaults (GCS 6379, client server 10001, dashboard agent 52365) would clash
    # with any other Ray on this host; its other ports are chosen free by Ray itself, and the
    # device nodes' dashboard agent ports by Cluster.add_node.
    gcs, client, agent = free_ports(3)
    cluster = Cluster(initialize_head=True, shutdown_at_exit=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False, "object_store_memory": OBJECT_STORE_BYTES,
        "gcs_server_port": gcs, "ray_client_server_port": client,
        "dashboard_agent_listen_port": agent,
    })
    try:
        for dev in devices:
            cluster.add_node(wait=False, num_cpus=1, resources={RESOURCE: 1},
                             labels=device_labels(dev), object_store_memory=OBJECT_STORE_BYTES)
        cluster.wait_for_nodes(timeout=60)
        yield cluster.address
    finally:
        with contextlib.suppress(Exception):
            import ray

            ray.shutdown()
        cluster.shutdown()
