"""Building and launching the variants' CUDA sources with ``mx.fast.cuda_kernel`` (sm_90).

One source per K layout serves every variant that shares it; the contract's parameters (rows,
tile, K groups, layout) are template constants, so each shape compiles once and is cached by
MLX's JIT. Nothing here runs without MLX's CUDA backend.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import mlx.core as mx

from kernels import tiling
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
    k_groups = int(p["k_groups"])
    return LaunchConfig({"M_ROWS": m, "K_GROUPS": k_groups, "K": k, "N": n, "GS": group_size,
                         "IS_BF16": dtype == "bfloat16"},
                        (n // 8) * 32 * k_groups, 32 * k_groups, dtype)


def _weights_a_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                      p: dict) -> LaunchConfig:
    """``unroll`` shrinks to the largest of 4, 2, 1 not above the request that divides a
    group's K steps (the tiling guarantees whole 128-value steps per group)."""
    n_tile, k_groups = int(p["n_tile"]), int(p["k_groups"])
    group_steps = k // 128 // k_groups
    want = int(p["unroll"])
    unroll = next(u for u in (4, 2, 1) if u <= want and group_steps % u == 0)
    return LaunchConfig({"M_ROWS": m, "COL_TILES": n_tile // 16, "K_GROUPS": k_groups,
                         "UNROLL": unroll, "PREFETCH": bool(int(p["prefetch"])),
                         "K": k, "N": n, "GS": group_size, "IS_BF16": dtype == "bfloat16"},
                        (n // n_tile) * 32 * k_groups, 32 * k_groups, dtype)


def _split_k_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                    p: dict) -> LaunchConfig:
    """VEC: the widest word load that tiles a lane's share of K (contiguous layout only) and
    stays inside one quantization group."""
    v = VARIANTS[name]
    act = getattr(v, "ACTIVATION_DTYPE", None)
    act = dtype_name(act) if act is not None else dtype
    n_tile, k_groups = int(p["n_tile"]), int(p["k_groups"])
    contiguous = v.CUDA_LAYOUT == "contiguous"
    vec = vector_width(k // 8 // k_groups // 32) if contiguous else 1
    if group_size % (8 * vec):
        vec = 1
    return LaunchConfig({"M_ROWS": m, "N_TILE": n_tile, "K_GROUPS": k_groups, "VEC": vec,
                         "K": k, "N": n, "GS": group_size, "LAYOUT_CONTIGUOUS": contiguous},
                        (n // n_tile) * 32 * k_groups, 32 * k_groups, act)


_CONFIGS = {"mma": _mma_config, "mma_weights_a": _weights_a_config,
            "contiguous": _split_k_config, "interleaved": _split_k_config}


def launch_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                  params: dict) -> LaunchConfig:
    """The template constants and grid of one launch; ``tiling.TilingError`` (a ValueError) if
    the variant's ``CUDA_TILING`` says the shape, dtype or params cannot tile. Cached per
    (variant, shape, dtype, params): validating a tiling costs ~20 us of Python per call."""
    return _launch_config(name, m, k, n, group_size, dtype, _key(params))


def _key(params: dict) -> tuple:
    return tuple(sorted(params.items()))


@functools.lru_cache(maxsize=4096)
def _launch_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                   params: tuple) -> LaunchConfig:
    v = VARIANTS[name]
    if not has_source(name):  # stock tiles anything, but through MLX's kernel, not ours
        raise ValueError(f"{name} has no CUDA source")
    p = dict(params)
    tiling.check(name, "cuda", m, k, n, dtype, group_size, p)
    return _CONFIGS[v.CUDA_LAYOUT](name, m, k, n, group_size, dtype, tiling.merged_params(v, p))


@functools.lru_cache(maxsize=4096)
def _plan(name: str, m: int, k: int, n: int, group_size: int, dtype: mx.Dtype,
          params: tuple) -> tuple:
    """Everything one launch passes to MLX besides the arrays, built once per shape."""
    cfg = _launch_config(name, m, k, n, group_size, dtype_name(dtype), params)
    act = getattr(mx, cfg.activation)
    return (_build(name), act, [("T", act), *cfg.template.items()], (cfg.grid, 1, 1),
            (cfg.threads, 1, 1), [(m, n)], [act])


def launch(name: str, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    """One launch. Scales and biases are passed as stored (in the activation dtype, as
    ``QWeights.quantize`` keeps them): nothing is cast per call, and ``x`` only where the
    variant reads another dtype (the W4A32 draft path reads float32)."""
    m, k = x.shape
    kernel, act, template, grid, threads, shapes, dtypes = _plan(
        name, m, k, qw.n, qw.group_size, x.dtype, _key(params))
    xin = x if x.dtype == act else x.astype(act)
    (y,) = kernel(inputs=[xin, qw.wq, qw.scales, qw.biases], template=template, grid=grid,
                  threadgroup=threads, output_shapes=shapes, output_dtypes=dtypes)
    return y
