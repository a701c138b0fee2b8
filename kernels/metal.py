"""Building and launching the variants' Metal sources with ``mx.fast.metal_kernel`` (Macs only).

Kernels are built once per variant and cached; template parameters carry the tile and the
shape, so one build serves every shape. ``launch_spec`` is the launch as plain data (checked
against the variant's ``METAL_TILING`` first), so code without a Metal back-end -- an
emulator, a test -- sees exactly what ``launch`` would hand MLX. Nothing else here runs on a
host without Metal: dispatch sends those hosts to the portable implementations instead.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from types import ModuleType

import mlx.core as mx

from kernels import tiling
from kernels.qweights import QWeights

INPUT_NAMES = ("x", "w", "scales", "biases")
OUTPUT_NAMES = ("y",)


@dataclass(frozen=True)
class LaunchSpec:
    """One launch besides the arrays. ``template`` is in the order the sources are written
    against (T, M_ROWS, N_TILE, K_GROUPS, K, N, GS, LAYOUT_CONTIGUOUS), T as a dtype name; the
    inputs are ``inputs`` in that order: x cast to ``activation``, then w, scales and biases
    as stored; the one output is ``output_shape`` in ``activation``."""

    template: tuple[tuple[str, str | int | bool], ...]
    grid: tuple[int, int, int]  # threads in all
    threadgroup: tuple[int, int, int]
    activation: str  # the dtype x is cast to, T, and the output dtype
    output_shape: tuple[int, int]
    inputs: tuple[str, ...] = INPUT_NAMES


def _dtype_name(dtype: mx.Dtype) -> str:
    from kernels.dispatch import dtype_name  # dispatch imports this module

    return dtype_name(dtype)


def launch_spec(variant: ModuleType, m: int, k: int, n: int, group_size: int, x_dtype: str,
                params: dict) -> LaunchSpec:
    """The launch of ``variant`` on x (m, k) of dtype ``x_dtype`` (a name such as "bfloat16")
    against n x k weights; TilingError if the Metal source cannot compute it."""
    tiling.check(variant.NAME, "metal", m, k, n, x_dtype, group_size, params)
    p = tiling.merged_params(variant, params)
    forced = getattr(variant, "ACTIVATION_DTYPE", None)
    act = _dtype_name(forced) if forced is not None else x_dtype
    n_tile, k_groups = int(p["n_tile"]), int(p["k_groups"])
    contiguous = getattr(variant, "METAL_LAYOUT", "contiguous") == "contiguous"
    return LaunchSpec(
        template=(("T", act), ("M_ROWS", m), ("N_TILE", n_tile), ("K_GROUPS", k_groups),
                  ("K", k), ("N", n), ("GS", group_size), ("LAYOUT_CONTIGUOUS", contiguous)),
        grid=((n // n_tile) * 32 * k_groups, 1, 1),
        threadgroup=(32 * k_groups, 1, 1),
        activation=act,
        output_shape=(m, n),
    )


@functools.cache
def _build(name: str, source: str, header: str):
    return mx.fast.metal_kernel(
        name=f"dflash2_{name}",
        input_names=list(INPUT_NAMES),
        output_names=list(OUTPUT_NAMES),
        source=source,
        header=header,
    )


def mlx_template(spec: LaunchSpec) -> list:
    """The template list ``mx.fast.metal_kernel`` takes: T as an MLX dtype."""
    return [(name, getattr(mx, v) if name == "T" else v) for name, v in spec.template]


@dataclass(frozen=True)
class Call:
    """Everything one launch hands MLX: the kernel and its keyword arguments. A Mac calls it;
    the emulator (kernels/metal_emu/variant.py) traces and runs the very same call."""

    kernel: object
    kwargs: dict


def prepare(variant: ModuleType, x: mx.array, qw: QWeights, params: dict) -> Call:
    """Scales and biases go in as stored: the header's ``dequant_word`` reads any pointer type,
    as the portable forms do, so bf16 scales under fp16 activations are not rounded to fp16."""
    m, k = x.shape
    spec = launch_spec(variant, m, k, qw.n, qw.group_size, _dtype_name(x.dtype), params)
    act = getattr(mx, spec.activation)
    arrays = {"x": x.astype(act), "w": qw.wq, "scales": qw.scales, "biases": qw.biases}
    return Call(_build(variant.NAME, variant.METAL_SOURCE, variant.HEADER), {
        "inputs": [arrays[name] for name in spec.inputs],
        "template": mlx_template(spec),
        "grid": spec.grid,
        "threadgroup": spec.threadgroup,
        "output_shapes": [spec.output_shape],
        "output_dtypes": [act],
    })


def launch(variant: ModuleType, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    call = prepare(variant, x, qw, params)
    (y,) = call.kernel(**call.kwargs)
    return y
