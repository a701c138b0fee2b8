"""Node discovery: which devices the Ray cluster has, alive, and which ones a selector picks.

A farm node advertises exactly one device as Ray node labels (written by `farm agent` or the
embedded fleet) plus one unit of the ``dflash2_device`` resource, so a job holding that unit is
the only suite job on the device. Everything here reads ``ray.nodes()``; nothing is scheduled, so
listing a fleet never waits on the cluster.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from devices.errors import Dflash2Error
from devices.identity import DeviceIdentity, Selector, parse_selector

RESOURCE = "dflash2_device"  # one unit per device node: one suite job at a time
LABEL_PREFIX = "dflash2/"
LABEL_ARCH = LABEL_PREFIX + "arch"
LABEL_GENERATION = LABEL_PREFIX + "generation"
LABEL_SIZE = LABEL_PREFIX + "size"
LABEL_BACKEND = LABEL_PREFIX + "backend"
LABEL_EMULATED = LABEL_PREFIX + "emulated"
LABEL_CHIP = LABEL_PREFIX + "chip"
LABEL_MLX = LABEL_PREFIX + "mlx"

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def _label_value(text: str) -> str:
    """Ray label values allow [A-Za-z0-9_.-], at most 63 characters, alphanumeric at the ends."""
    return _LABEL_VALUE_BAD.sub("_", text).strip("_.-")[:63].strip("_.-")


def device_labels(dev: DeviceIdentity) -> dict[str, str]:
    """The node labels that advertise ``dev`` (the chip name is squeezed into label syntax)."""
    labels = {
        LABEL_ARCH: dev.arch,
        LABEL_BACKEND: dev.backend,
        LABEL_EMULATED: "true" if dev.emulated else "false",
        LABEL_MLX: _label_value(dev.mlx_version),
    }
    if dev.generation is not None:
        labels[LABEL_GENERATION] = str(dev.generation)
    if dev.size:
        labels[LABEL_SIZE] = dev.size
    if chip := _label_value(dev.chip):
        labels[LABEL_CHIP] = chip
    return labels


@dataclass(frozen=True)
class Device:
    """One live device node as the driver sees it: plain data, printable, JSON-ready."""

    node_id: str
    host: str
    address: str
    arch: str
    generation: int | None
    size: str | None
    backend: str
    emulated: bool
    chip: str
    mlx_version: str
    busy: bool

    @property
    def label(self) -> str:
        return f"{self.arch} (emulated)" if self.emulated else self.arch

    @property
    def short(self) -> str:
        """arch@node: how progress lines and errors name one device."""
        return f"{self.label}@{self.node_id[:8]}"

    @property
    def kind(self) -> tuple[str, bool]:
        """Devices of one kind are interchangeable for a job (real and emulated never are)."""
        return (self.arch, self.emulated)

    def identity(self) -> DeviceIdentity:
        return DeviceIdentity(self.arch, self.generation, self.size, self.chip, self.backend,
                              self.mlx_version, self.emulated)

    def to_json(self) -> dict:
        return asdict(self)


def device_from_node(node: dict, available: dict | None = None) -> Device | None:
    """The device a ``ray.nodes()`` entry advertises, or None for a node without one (a head)."""
    labels = node.get("Labels") or {}
    if not node.get("Alive") or LABEL_ARCH not in labels:
        return None
    if node.get("Resources", {}).get(RESOURCE, 0) < 1:
        return None
    gen = labels.get(LABEL_GENERATION)
    busy = available is not None and available.get(RESOURCE, 0) < 1
    return Device(
        node_id=node["NodeID"],
        host=node.get("NodeManagerHostname", ""),
        address=node.get("NodeManagerAddress", ""),
        arch=labels[LABEL_ARCH],
        generation=int(gen) if gen and gen.isdigit() else None,
        size=labels.get(LABEL_SIZE) or None,
        backend=labels.get(LABEL_BACKEND, "cpu"),
        emulated=labels.get(LABEL_EMULATED) == "true",
        chip=labels.get(LABEL_CHIP, "").replace("_", " "),
        mlx_version=labels.get(LABEL_MLX, ""),
        busy=busy,
    )


def live_devices(exclude: set[str] | frozenset[str] = frozenset()) -> list[Device]:
    """Every live device node of the connected cluster (ray.init done), in a stable order.

    ``exclude`` drops nodes the driver already knows are dead: ``ray.nodes()`` can still call a
    killed node alive for a few seconds.
    """
    import ray
    from ray._private.state import state

    try:
        avail = state.available_resources_per_node()
    except (RuntimeError, KeyError, AttributeError):  # busy/idle is cosmetic
        avail = {}
    found = [d for n in ray.nodes() if (d := device_from_node(n, avail.get(n["NodeID"], {})))]
    return sorted((d for d in found if d.node_id not in exclude),
                  key=lambda d: (d.arch, d.emulated, d.host, d.node_id))


def matching(devices: list[Device], selectors: list[Selector]) -> list[Device]:
    """Devices any selector matches, in fleet order."""
    return [d for d in devices if any(s.matches(d.identity()) for s in selectors)]


def unmatched(devices: list[Device], selectors: list[Selector]) -> list[Selector]:
    """Selectors no device matches (each is an error for a run on a given cluster)."""
    return [s for s in selectors if not any(s.matches(d.identity()) for d in devices)]


def describe(devices: list[Device]) -> str:
    """One line naming the live devices, for errors that must say what there is instead."""
    if not devices:
        return "no live devices (start one with `farm agent --address ADDR`)"
    return "live devices: " + ", ".join(d.short for d in devices)


# -- selectors with a twin count (`--devices g14*2`) ------------------------------------------

DEVICES_HELP = (
    "selectors: g13s (an arch), g14 (a generation), cpu, all; comma-separated. A job runs per "
    "device variant; when several idle nodes advertise the same variant (twins), the suite is "
    "split across all of them, test by test, with work stealing (each twin starts with a "
    "contiguous share, an idle twin takes the un-started half of the busiest one's), and the "
    "results are merged under that variant, each recording its node. SELECTOR*N uses at most "
    "N twins per variant (g14*2; g14*1: one node, the whole suite on it), and without "
    "--address starts N emulated twins of it; a twin that dies hands its unfinished tests to "
    "the others")
EVERY_HELP = ("the whole suite on every matching device, one job each, instead of one job per "
              "variant split across its twins (not with SELECTOR*N)")
_TWINS = re.compile(r"^(.*?)\*\s*(\S*)$")


@dataclass(frozen=True)
class TwinSelector(Selector):
    """A selector with how many twins of each variant it matches may share a job (None: all)."""

    twins: int | None = None


def parse_selectors(text: str) -> list[Selector]:
    """`devices.identity.parse_selectors`, plus an optional ``*N`` on each selector."""
    parts = [p for p in (s.strip() for s in (text or "").split(",")) if p]
    if not parts:
        raise Dflash2Error("empty device selector: name at least one device, e.g. --devices g13s")
    out: list[Selector] = []
    for p in parts:
        m = _TWINS.match(p)
        if m is None:
            out.append(parse_selector(p))
            continue
        base, count = m[1].strip(), m[2]
        if not base or not count.isdigit() or int(count) < 1:
            raise Dflash2Error(f"bad twin count in device selector {p!r}: write SELECTOR*N "
                               f"with N >= 1, e.g. g14*2")
        sel = parse_selector(base)
        out.append(TwinSelector(p, sel.kind, sel.value, int(count)))
    return out


def check_twins(selectors: list[Selector], every: bool) -> None:
    """``--every`` and ``SELECTOR*N`` ask for opposite things: refused together."""
    counted = [s.text for s in selectors if getattr(s, "twins", None)]
    if every and counted:
        raise Dflash2Error(f"--every runs the whole suite on every matching device; "
                           f"{counted[0]!r} splits one run of it across twins: drop one of them")


def twin_cap(device: Device, selectors: list[Selector]) -> int | None:
    """At most how many twins of ``device``'s variant share its job (None: every idle one):
    the largest ``*N`` among the selectors that match it."""
    caps = [s.twins for s in selectors
            if getattr(s, "twins", None) and s.matches(device.identity())]
    return max(caps) if caps else None
