"""Kernel selection: a lookup in ``selection_table.json``, and the reason when nothing matches.

The table is data: each entry expands to exact keys (device, dtype, M, K, N, bits, group size).
A key that is missing falls back to stock with the most specific reason the table supports:
no entry at all for the device -> unsupported-device; none for its dtype -> dtype; else shape.
Every key is checked at load against what the variant's source can tile on the back-end its
device runs (kernels/tiling.py), so a table that would launch a kernel out of bounds never loads.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from devices.identity import DeviceIdentity
from kernels import tiling

TUNED = "tuned"
FALLBACK_DEVICE = "fallback:unsupported-device"
FALLBACK_SHAPE = "fallback:shape"
FALLBACK_DTYPE = "fallback:dtype"
FALLBACK_DISABLED = "fallback:disabled"
# An entry that names stock: the device's custom candidate did not beat stock by more than the
# noise when measured (sm_90: scripts/regen_sm90_table.py writes these, with the reason).
FALLBACK_MEASURED = "fallback:measured"


@dataclass(frozen=True)
class Choice:
    variant: str
    reason: str
    # the tile: read-only, the table's own mapping (one object per entry key, never copied)
    params: Mapping = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Table:
    shapes: dict[str, tuple[int, int]]
    index: dict[tuple, tuple[str, Mapping]]
    device_keys: frozenset[str]
    device_dtypes: frozenset[tuple[str, str]]

    def lookup(self, device_key: str, dtype: str, m: int, k: int, n: int, bits: int,
               group_size: int) -> Choice:
        hit = self.index.get((device_key, dtype, m, k, n, bits, group_size))
        if hit is not None:
            if hit[0] == "stock":
                return Choice("stock", FALLBACK_MEASURED)
            return Choice(hit[0], TUNED, hit[1])
        if device_key not in self.device_keys:
            return Choice("stock", FALLBACK_DEVICE)
        if (device_key, dtype) not in self.device_dtypes:
            return Choice("stock", FALLBACK_DTYPE)
        return Choice("stock", FALLBACK_SHAPE)


def device_key(device: DeviceIdentity) -> str:
    """g13s for an Apple GPU (real or emulated), the architecture otherwise (sm_90, cpu)."""
    if device.generation is not None and device.size is not None:
        return f"g{device.generation}{device.size}"
    return device.arch


# Which kernel back-end a device key's custom kernels run on.
BACKEND_OF_KEY = ((re.compile(r"g\d+[a-z]+"), "metal"), (re.compile(r"sm_\d+"), "cuda"))


def backend_of(key: str) -> str | None:
    """"metal" for an Apple GPU key (g13s), "cuda" for an NVIDIA arch (sm_90), else None."""
    return next((backend for pattern, backend in BACKEND_OF_KEY if pattern.fullmatch(key)),
                None)


CUSTOM_BITS = 4  # every custom source unpacks eight 4-bit values per uint32 word


def build_table(data: dict) -> Table:
    from kernels.variants import VARIANTS

    shapes = {name: (int(k), int(n)) for name, (k, n) in data["shapes"].items()}
    index: dict[tuple, tuple[str, Mapping]] = {}
    for i, e in enumerate(data["entries"]):
        if e["variant"] not in VARIANTS:
            raise ValueError(f"selection table entry {i}: unknown variant {e['variant']!r}")
        params = dict(e.get("params", {}))
        if params.get("ablate"):  # a measurement of a kernel with a part taken out: wrong output
            raise ValueError(f"selection table entry {i}: ablate={params['ablate']} is a "
                             "measurement, never a kernel to select")
        if int(params.get("cluster", 1)) > 1:  # kernels.cuda.refuse_cluster_under_graphs
            raise ValueError(f"selection table entry {i}: cluster={params['cluster']} runs only "
                             "with MLX's CUDA graphs off, which the runtime does not set: "
                             "a clustered tile is a measurement, never a kernel to select")
        if int(e["bits"]) != CUSTOM_BITS and e["variant"] != "stock":
            raise ValueError(f"selection table entry {i}: {e['variant']} unpacks "
                             f"{CUSTOM_BITS}-bit weights, not {e['bits']}-bit")
        for dev in e["devices"]:
            backend = backend_of(dev)
            if backend is None:
                raise ValueError(f"selection table entry {i}: device {dev!r} is neither an Apple "
                                 "GPU (g<generation><size>, e.g. g13s) nor a CUDA arch (sm_90)")
            for dtype in e["dtypes"]:
                for gs in e["group_sizes"]:
                    for shape in e["shapes"]:
                        k, n = shapes[shape]
                        key = (dev, dtype, int(e["M"]), k, n, int(e["bits"]), int(gs))
                        if key in index:
                            raise ValueError(f"selection table entry {i}: duplicate key {key}")
                        try:
                            tiling.check(e["variant"], backend, key[2], k, n, dtype, key[6],
                                         params)
                        except tiling.TilingError as err:
                            raise ValueError(f"selection table entry {i} ({dev}): {err}") from None
                        # read-only and the same object on every lookup: no copy per call,
                        # and the CUDA launch knows it by identity (kernels.cuda.launch)
                        index[key] = (e["variant"], MappingProxyType(dict(params)))
    return Table(
        shapes=shapes,
        index=index,
        device_keys=frozenset(k[0] for k in index),
        device_dtypes=frozenset((k[0], k[1]) for k in index),
    )


ENV_TABLE = "DFLASH2_SELECTION_TABLE"


def load_table(path: str | None = None) -> Table:
    """The shipped table, or ``path`` / ``DFLASH2_SELECTION_TABLE`` (a tuning run's candidate)."""
    return _load_table(path or os.environ.get(ENV_TABLE) or None)


def table_path(path: str | None = None) -> Path:
    """The table file in effect: ``path``, else ``DFLASH2_SELECTION_TABLE``, else the shipped."""
    given = path or os.environ.get(ENV_TABLE) or None
    return Path(given) if given else Path(__file__).parent / "selection_table.json"


def table_digest(path: str | None = None) -> str:
    """sha256 of the table in effect, as parsed data: the history explains a selection change
    by a table change only when the table's content changed, not its formatting."""
    data = json.loads(table_path(path).read_text())
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


@functools.lru_cache(maxsize=4)
def _load_table(path: str | None) -> Table:
    return build_table(json.loads(table_path(path).read_text()))


def select(device: DeviceIdentity, dtype: str, m: int, k: int, n: int, bits: int = 4,
           group_size: int = 64, *, disabled: bool = False, table: Table | None = None) -> Choice:
    """The kernel for one dispatch and why. ``disabled``: the custom verifier is switched off."""
    if disabled:
        return Choice("stock", FALLBACK_DISABLED)
    t = table or load_table()
    return t.lookup(device_key(device), dtype, m, k, n, bits, group_size)


def tuned_keys(device: DeviceIdentity, k: int, n: int, bits: int = 4, group_size: int = 64,
               *, table: Table | None = None) -> list[tuple[str, int, Choice]]:
    """(dtype, M, choice) of every tuned entry for this device and shape: what a layer loaded
    for this device may launch, so that what a launch needs of its weights (a layout of w) can
    be made where they are loaded."""
    t = table or load_table()
    key = device_key(device)
    return sorted(((dt, m, t.lookup(key, dt, m, k, n, bits, group_size))
                   for (dev, dt, m, kk, nn, b, gs), (variant, _) in t.index.items()
                   if (dev, kk, nn, b, gs) == (key, k, n, bits, group_size)
                   and variant != "stock"), key=lambda e: (e[0], e[1]))
