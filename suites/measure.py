"""The ``measure`` fixture: what one suite test observed, as plain data on its report.

Apart from the plugin's hooks because a test module and a bench import its digest, and its
payload must stay data that junitxml and xdist carry like any other user property.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from kernels.recorder import Selection, recording

PROPERTY = "dflash2"  # the user_properties key that carries a test's measure payload
MEASURE_KEY = pytest.StashKey["Measure"]()


class Measure:
    """What one test observed: named measurements, kernel selections and output fingerprints.

    The payload is plain data stored in ``item.user_properties`` as ``("dflash2", payload)``,
    so junitxml and xdist carry it like any other property.
    """

    def __init__(self, payload: dict[str, list[dict[str, Any]]], sink: list[Selection]) -> None:
        self._payload = payload
        self._sink = sink

    def record(self, name: str, value: float, unit: str | None = None,
               bound: float | None = None) -> None:
        """Record one figure (non-finite values are kept here and become null in JSONL)."""
        if not isinstance(name, str) or not name:
            raise ValueError("measure.record: name must be a non-empty string")
        self._payload["measurements"].append({
            "name": name,
            "value": float(value),
            "unit": None if unit is None else str(unit),
            "bound": None if bound is None else float(bound),
        })

    def fingerprint(self, key: str, array: Any) -> str:
        """Record and return the sha256 of ``array``'s float32 bytes (C order)."""
        digest, shape, dtype = _fingerprint(array)
        self._payload["fingerprints"].append(
            {"key": str(key), "digest": digest, "shape": shape, "dtype": dtype})
        return digest

    @property
    def selections(self) -> list[Selection]:
        """Kernel selections observed so far in this test (deduplicated, in order)."""
        return list(self._sink)

    def sync(self) -> None:
        """Copy the selections into the payload as plain dicts (before each report is made)."""
        self._payload["selections"] = [s.to_json() for s in self._sink]


@pytest.fixture
def measure(request: pytest.FixtureRequest) -> Iterator[Measure]:
    """Record measurements, fingerprints and (automatically) the kernel selections of a test."""
    payload: dict[str, list[dict[str, Any]]] = {
        "measurements": [], "selections": [], "fingerprints": []}
    request.node.user_properties.append((PROPERTY, payload))
    with recording() as sink:
        m = Measure(payload, sink)
        request.node.stash[MEASURE_KEY] = m
        yield m
        m.sync()


def float32_digest(array: Any) -> str:
    """sha256 hex digest of ``array`` cast to float32, C-contiguous (mlx or numpy)."""
    return _fingerprint(array)[0]


def _fingerprint(array: Any) -> tuple[str, list[int], str]:
    if isinstance(array, mx.array):
        dtype = str(array.dtype).removeprefix("mlx.core.")
        data = np.asarray(array.astype(mx.float32))
    else:
        data = np.asarray(array)
        dtype = str(data.dtype)
    data = np.ascontiguousarray(data, dtype=np.float32)
    return hashlib.sha256(data.tobytes()).hexdigest(), list(data.shape), dtype
