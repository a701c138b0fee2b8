"""Building and launching the variants' CUDA sources with ``mx.fast.cuda_kernel`` (sm_90).

One source per K layout serves every variant that shares it; the contract's parameters (rows,
tile, K groups, layout) are template constants, so each shape compiles once and is cached by
MLX's JIT. Nothing here runs without MLX's CUDA backend.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import mlx.core as mx

from kernels.dispatch import dtype_name
from kernels.qweights import QWeights
from kernels.variants import VARIANTS


def has_source(name: str) -> bool:
    return getattr(VARIANTS[name], "CUDA_SOURCE", None) is not None


@functools.cache
def _build(name: str):
    v = VARIANTS[name]
    return mx.fast.cuda_kernel(
        name=f"dflash2_{name}",
        input_names=["x", "w", "scales", "biases"],
        output_names=["y"],
        source=v.CUDA_SOURCE,
        header=v.CUDA_HEADER,
    )


def vector_width(lane_words: int) -> int:
    """Widest packed-word load (4, 2 or 1 words) that tiles a lane's share of K."""
    return next(vec for vec in (4, 2, 1) if lane_words % vec == 0)


@dataclass(frozen=True)
class LaunchConfig:
    """What one launch needs besides the arrays: plain data, so tests check it without a GPU."""

    template: dict  # constant name -> int or bool (the activation type T is added at launch)
    grid: int  # threads in all
    threads: int  # per block
    activation: str  # dtype the kernel reads x in and writes y in


def _mma_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                p: dict) -> LaunchConfig:
    k_groups = int(p.get("k_groups", 1))
    if (m > 16 or k % (128 * k_groups) or n % 8 or group_size % 32
            or dtype not in ("bfloat16", "float16")):
        raise ValueError(f"{name}: ({m}, {k}) x ({k}, {n}) {dtype} does not tile with {p}")
    return LaunchConfig({"M_ROWS": m, "K_GROUPS": k_groups, "K": k, "N": n, "GS": group_size,
                         "IS_BF16": dtype == "bfloat16"},
                        (n // 8) * 32 * k_groups, 32 * k_groups, dtype)


def _weights_a_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                      p: dict) -> LaunchConfig:
    """``unroll`` shrinks to the largest of 4, 2, 1 not above the request that divides a
    group's K steps; the K-group partial sums must fit the 48 KiB of static shared memory."""
    n_tile = int(p.get("n_tile", 32))
    k_groups = int(p.get("k_groups", 1))
    steps = k // 128 if k % 128 == 0 else 0
    if (not 1 <= m <= 16 or n_tile % 16 or n % n_tile or not steps or steps % k_groups
            or group_size % 32 or dtype not in ("bfloat16", "float16")):
        raise ValueError(f"{name}: ({m}, {k}) x ({k}, {n}) {dtype} does not tile with {p}")
    m_tiles = (m + 7) // 8
    if k_groups * 8 * m_tiles * n_tile * 4 > 48 * 1024:
        raise ValueError(f"{name}: {p} needs more than 48 KiB of shared memory")
    want = int(p.get("unroll", 2))
    unroll = next(u for u in (4, 2, 1) if u <= want and (steps // k_groups) % u == 0)
    return LaunchConfig({"M_ROWS": m, "COL_TILES": n_tile // 16, "K_GROUPS": k_groups,
                         "UNROLL": unroll, "PREFETCH": bool(int(p.get("prefetch", 0))),
                         "K": k, "N": n, "GS": group_size, "IS_BF16": dtype == "bfloat16"},
                        (n // n_tile) * 32 * k_groups, 32 * k_groups, dtype)


def _split_k_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                    p: dict) -> LaunchConfig:
    v = VARIANTS[name]
    act = getattr(v, "ACTIVATION_DTYPE", None)
    act = dtype_name(act) if act is not None else dtype
    n_tile = int(p.get("n_tile", 8))
    k_groups = int(p.get("k_groups", 1))
    contiguous = v.CUDA_LAYOUT == "contiguous"
    lane_words = k // 8 // k_groups // 32
    if k % (256 * k_groups) or n % n_tile or lane_words < 1:
        raise ValueError(f"{name}: shape ({m}, {k}) x ({k}, {n}) does not tile with {p}")
    vec = vector_width(lane_words) if contiguous else 1
    if group_size % (8 * vec):
        vec = 1
    return LaunchConfig({"M_ROWS": m, "N_TILE": n_tile, "K_GROUPS": k_groups, "VEC": vec,
                         "K": k, "N": n, "GS": group_size, "LAYOUT_CONTIGUOUS": contiguous},
                        (n // n_tile) * 32 * k_groups, 32 * k_groups, act)


_CONFIGS = {"mma": _mma_config, "mma_weights_a": _weights_a_config,
            "contiguous": _split_k_config, "interleaved": _split_k_config}


def launch_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                  params: dict) -> LaunchConfig:
    """The template constants and grid of one launch, or ValueError if the shape cannot tile."""
    v = VARIANTS[name]
    if not has_source(name):
        raise ValueError(f"{name} has no CUDA source")
    fixed = getattr(v, "FIXED_PARAMS", {})
    return _CONFIGS[v.CUDA_LAYOUT](name, m, k, n, group_size, dtype,
                                   {**v.DEFAULTS, **params, **fixed})


def launch(name: str, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    m, k = x.shape
    cfg = launch_config(name, m, k, qw.n, qw.group_size, dtype_name(x.dtype), params)
    xin = x.astype(getattr(mx, cfg.activation))
    (y,) = _build(name)(
        inputs=[xin, qw.wq, qw.scales, qw.biases],
        template=[("T", xin.dtype), *cfg.template.items()],
        grid=(cfg.grid, 1, 1),
        threadgroup=(cfg.threads, 1, 1),
        output_shapes=[(m, qw.n)],
        output_dtypes=[xin.dtype],
    )
    return y
