"""Where jobs go: a small policy over the matching devices (the xdist `scheduler/` idea).

A job is one suite run on one device. By default a run wants one device per kind (architecture,
real or emulated) because devices of one kind are interchangeable; ``--every`` wants them all.
A retry goes to another live device of the job's kind. Ray enforces the rest: each device node
has one ``dflash2_device`` unit, so a device runs one job at a time and a second one queues.
"""

from __future__ import annotations

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
