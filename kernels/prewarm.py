"""Prewarming: run each selected kernel once per shape so the first real verify pays no build.

On Metal the first launch of a ``metal_kernel`` compiles it; on an emulated device the first
call dequantizes and lays out the weights for the contract (cached). Either way that cost
belongs at bundle build, and the report says what was warmed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import mlx.core as mx

from devices.identity import DeviceIdentity
from kernels.dispatch import choose, dtype_name, run_variant
from kernels.qweights import QWeights


@dataclass(frozen=True)
class Warmed:
    op: str
    variant: str
    reason: str
    dtype: str
    M: int
    K: int
    N: int
    seconds: float

    def to_json(self) -> dict:
        return asdict(self)


def prewarm(items: Iterable[tuple[str, QWeights, mx.Dtype, int]], device: DeviceIdentity,
            *, disabled: bool = False) -> list[Warmed]:
    """items: (op, weights, activation dtype, rows). One zero-input call per item."""
    warmed = []
    for op, qw, dtype, rows in items:
        x = mx.zeros((rows, qw.k), dtype=dtype)
        choice = choose(x, qw, device, disabled=disabled)
        t0 = time.perf_counter()
        mx.eval(run_variant(choice.variant, x, qw, choice.params, device))
        warmed.append(Warmed(op, choice.variant, choice.reason, dtype_name(dtype), rows, qw.k,
                             qw.n, time.perf_counter() - t0))
    return warmed
