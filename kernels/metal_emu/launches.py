"""Every Metal launch the selection table can make on g13, g14 and g15, as a reviewed listing.

Each row is one (variant, dtype, M, K, N, group size, params) the table selects for some Apple
device; the devices are listed with it. tests/test_metal_launches.py compiles every row's exact
source at its production shape and executes it (production M, K, dtype, group size and params,
over a column slice of N, as the suites do on CPU hosts) against the portable oracle. After an
intended table change, regenerate the listing and review the diff:

    python -m kernels.metal_emu.launches --write
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from kernels.selection import load_table

PATH = Path(__file__).parent / "launches.json"
APPLE_GENERATIONS = ("g13", "g14", "g15")
EXECUTED_COLUMNS = 128


@dataclass(frozen=True)
class Launch:
    variant: str
    dtype: str
    M: int
    K: int
    N: int
    group_size: int
    params: dict
    devices: list

    @property
    def executed_n(self) -> int:
        """The column slice executed: N itself when narrow, else EXECUTED_COLUMNS."""
        return min(self.N, EXECUTED_COLUMNS)

    @property
    def label(self) -> str:
        p = ",".join(f"{k}={v}" for k, v in sorted(self.params.items()))
        return f"{self.variant}-{self.dtype}-M{self.M}-K{self.K}-N{self.N}-gs{self.group_size}-{p}"


def current() -> list[Launch]:
    rows: dict[tuple, set[str]] = {}
    for (dev, dtype, m, k, n, _bits, gs), (variant, params) in load_table().index.items():
        if dev.startswith(APPLE_GENERATIONS):
            key = (variant, dtype, m, k, n, gs, tuple(sorted(params.items())))
            rows.setdefault(key, set()).add(dev)
    return [Launch(v, dt, m, k, n, gs, dict(p), sorted(devs))
            for (v, dt, m, k, n, gs, p), devs in sorted(rows.items())]


def load() -> list[Launch]:
    return [Launch(**row) for row in json.loads(PATH.read_text())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the current listing")
    args = ap.parse_args(argv)
    rows = [asdict(r) for r in current()]
    if args.write:
        PATH.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
        print(f"wrote {len(rows)} launches to {PATH}")
        return 0
    old = json.loads(PATH.read_text()) if PATH.exists() else []
    if old == rows:
        print(f"{len(rows)} launches, listing up to date")
        return 0
    print(f"listing differs: {len(old)} recorded, {len(rows)} now; run with --write after review")
    return 1


if __name__ == "__main__":
    sys.exit(main())
