"""The pinned numeric bounds (``bounds.json``): data, never edited to make a run green."""

from __future__ import annotations

import functools

from suites.support import load_json


@functools.cache
def _bounds() -> dict:
    return load_json("bounds.json")


def deviation_bound(m: int, op: str) -> float:
    return float(_bounds()["deviation"][f"m{m}"][op][0])


def accuracy_ulps(out_dtype: str) -> float:
    return float(_bounds()["accuracy_ulps"]["float32" if out_dtype == "float32" else "half"])
