"""Where jobs go: a small policy over the matching devices (the xdist `scheduler/` idea).

A job is one suite run on one device kind. By default a run wants one job per kind (architecture,
real or emulated) because devices of one kind are interchangeable; ``--every`` wants a job on each
device. A job may run on several twins: the preferred device plus the other idle devices of
exactly its variant (every field of its identity equal), up to a cap (``--devices g14*2``); they
share its tests (`farm.runner.sharding`). A retry goes to another live device of the job's kind.
Ray enforces the rest: each device node has one ``dflash2_device`` unit, so a device runs one job
at a time and a second one queues.
"""

from __future__ import annotations

from collections.abc import Callable

from farm.fleet.devices import LABEL_ARCH, Device


def _preference(d: Device) -> tuple[bool, str, str]:
    return (d.busy, d.host, d.node_id)  # idle devices first, then a stable order


def choose_devices(matching: list[Device], *, every: bool,
                   avoid: set[str] | frozenset[str] = frozenset()) -> list[Device]:
    """The devices a run starts jobs on; ``avoid`` holds quarantined or dead node ids."""
    usable = [d for d in matching if d.node_id not in avoid]
    if every:
        return usable
    chosen: dict[tuple[str, bool], Device] = {}
    for d in sorted(usable, key=_preference):
        chosen.setdefault(d.kind, d)
    return [d for d in usable if chosen.get(d.kind) is d]


def twins(a: Device, b: Device) -> bool:
    """Two nodes of one device variant: their results are interchangeable."""
    return a.node_id != b.node_id and a.identity() == b.identity()


def choose_twins(matching: list[Device], *, every: bool,
                 cap: Callable[[Device], int | None] | None = None,
                 avoid: set[str] | frozenset[str] = frozenset()) -> list[list[Device]]:
    """One group of devices per job: its preferred device first, then its idle twins (at most
    ``cap(first)`` devices in all; None: no cap). With ``every``: one device per job."""
    usable = [d for d in matching if d.node_id not in avoid]
    firsts = choose_devices(usable, every=every)
    if every:
        return [[d] for d in firsts]
    groups = []
    for first in firsts:
        more = [d for d in sorted(usable, key=_preference) if not d.busy and twins(d, first)]
        n = cap(first) if cap else None
        groups.append([first, *more][:n] if n else [first, *more])
    return groups


def replacement(kind: tuple[str, bool], devices: list[Device],
                avoid: set[str] | frozenset[str]) -> Device | None:
    """Another live device of ``kind`` for a job whose device died or failed its health check."""
    candidates = [d for d in devices if d.kind == kind and d.node_id not in avoid]
    return min(candidates, key=_preference) if candidates else None


def pinned(device: Device) -> dict:
    """Ray task options that put a task on ``device`` only: hard node affinity (it fails fast
    when the node is gone, where a label-only match would wait forever) plus the device's arch
    label as a cross-check."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(device.node_id, soft=False),
            "label_selector": {LABEL_ARCH: device.arch}}
