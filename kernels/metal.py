"""Building and launching the variants' Metal sources with ``mx.fast.metal_kernel`` (Macs only).

Kernels are built once per variant and cached; template parameters carry the tile and the
shape, so one build serves every shape. Nothing here runs on a host without Metal: dispatch
sends those hosts to the portable implementations instead.
"""

from __future__ import annotations

import functools
from types import ModuleType

import mlx.core as mx

from kernels.qweights import QWeights


@functools.cache
def _build(name: str, source: str, header: str):
    return mx.fast.metal_kernel(
        name=f"dflash2_{name}",
        input_names=["x", "w", "scales", "biases"],
        output_names=["y"],
        source=source,
        header=header,
    )


def launch(variant: ModuleType, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    p = {**variant.DEFAULTS, **params, **getattr(variant, "FIXED_PARAMS", {})}
    act = getattr(variant, "ACTIVATION_DTYPE", None) or x.dtype
    xin = x.astype(act)
    m, k = xin.shape
    n = qw.n
    n_tile = int(p.get("n_tile", 8))
    k_groups = int(p.get("k_groups", 1))
    kernel = _build(variant.NAME, variant.METAL_SOURCE, variant.HEADER)
    (y,) = kernel(
        inputs=[xin, qw.wq, qw.scales.astype(xin.dtype), qw.biases.astype(xin.dtype)],
        template=[("T", xin.dtype), ("M_ROWS", m), ("N_TILE", n_tile), ("K_GROUPS", k_groups),
                  ("K", k), ("N", n), ("GS", qw.group_size),
                  ("LAYOUT_CONTIGUOUS",
                   getattr(variant, "METAL_LAYOUT", "contiguous") == "contiguous")],
        grid=((n // n_tile) * 32 * k_groups, 1, 1),
        threadgroup=(32 * k_groups, 1, 1),
        output_shapes=[(m, n)],
        output_dtypes=[act],
    )
    return y
