"""Building and launching the variants' CUDA sources with ``mx.fast.cuda_kernel`` (sm_90).

One source per K layout serves every variant that shares it; the contract's parameters (rows,
tile, K groups, layout) are template constants, so each shape compiles once and is cached by
MLX's JIT. Nothing here runs without MLX's CUDA backend.
"""

from __future__ import annotations

import functools

import mlx.core as mx

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


def _launch_mma(name: str, x: mx.array, qw: QWeights, p: dict) -> mx.array:
    m, k = x.shape
    n = qw.n
    k_groups = int(p.get("k_groups", 1))
    if (m > 16 or k % (128 * k_groups) or n % 8 or qw.group_size % 32
            or x.dtype not in (mx.bfloat16, mx.float16)):
        raise ValueError(f"{name}: ({m}, {k}) x ({k}, {n}) {x.dtype} does not tile with {p}")
    (y,) = _build(name)(
        inputs=[x, qw.wq, qw.scales, qw.biases],
        template=[("T", x.dtype), ("M_ROWS", m), ("K_GROUPS", k_groups), ("K", k), ("N", n),
                  ("GS", qw.group_size), ("IS_BF16", x.dtype == mx.bfloat16)],
        grid=((n // 8) * 32 * k_groups, 1, 1),
        threadgroup=(32 * k_groups, 1, 1),
        output_shapes=[(m, n)],
        output_dtypes=[x.dtype],
    )
    return y


def weights_a_config(m: int, k: int, n: int, group_size: int, dtype, p: dict) -> dict:
    """Template constants of ``mma_weights_a`` for one shape, or ValueError if it cannot tile.

    Pure arithmetic, so the CPU-side tests check it without a GPU: ``unroll`` shrinks to the
    largest of 4, 2, 1 not above the request that divides a group's K steps.
    """
    n_tile = int(p.get("n_tile", 32))
    k_groups = int(p.get("k_groups", 1))
    steps = k // 128 if k % 128 == 0 else 0
    if (not 1 <= m <= 16 or n_tile % 16 or n % n_tile or not steps or steps % k_groups
            or group_size % 32 or dtype not in (mx.bfloat16, mx.float16)):
        raise ValueError(f"mma_weights_a: ({m}, {k}) x ({k}, {n}) {dtype} does not tile with {p}")
    m_tiles = (m + 7) // 8
    if k_groups * 8 * m_tiles * n_tile * 4 > 48 * 1024:
        raise ValueError(f"mma_weights_a: {p} needs more than 48 KiB of shared memory")
    want = int(p.get("unroll", 2))
    unroll = next(u for u in (4, 2, 1) if u <= want and (steps // k_groups) % u == 0)
    return {"M_ROWS": m, "COL_TILES": n_tile // 16, "K_GROUPS": k_groups, "UNROLL": unroll,
            "PREFETCH": bool(int(p.get("prefetch", 0))), "K": k, "N": n, "GS": group_size, "IS_BF16": dtype == mx.bfloat16,
            "grid": (n // n_tile) * 32 * k_groups, "threads": 32 * k_groups}


def _launch_weights_a(name: str, x: mx.array, qw: QWeights, p: dict) -> mx.array:
    m, k = x.shape
    cfg = weights_a_config(m, k, qw.n, qw.group_size, x.dtype, p)
    grid, threads = cfg.pop("grid"), cfg.pop("threads")
    (y,) = _build(name)(
        inputs=[x, qw.wq, qw.scales, qw.biases],
        template=[("T", x.dtype), *cfg.items()],
        grid=(grid, 1, 1),
        threadgroup=(threads, 1, 1),
        output_shapes=[(m, qw.n)],
        output_dtypes=[x.dtype],
    )
    return y


def launch(name: str, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    v = VARIANTS[name]
    p = {**v.DEFAULTS, **params}
    if v.CUDA_LAYOUT == "mma":
        return _launch_mma(name, x, qw, p)
    if v.CUDA_LAYOUT == "mma_weights_a":
        return _launch_weights_a(name, x, qw, p)
    xin = x.astype(getattr(v, "ACTIVATION_DTYPE", None) or x.dtype)
    m, k = xin.shape
    n = qw.n
    n_tile = int(p.get("n_tile", 8))
    k_groups = int(p.get("k_groups", 1))
    contiguous = v.CUDA_LAYOUT == "contiguous"
    lane_words = k // 8 // k_groups // 32
    if k % (256 * k_groups) or n % n_tile or lane_words < 1:
        raise ValueError(f"{name}: shape ({m}, {k}) x ({k}, {n}) does not tile with {p}")
    vec = vector_width(lane_words) if contiguous else 1
    if qw.group_size % (8 * vec):
        vec = 1
    (y,) = _build(name)(
        inputs=[xin, qw.wq, qw.scales, qw.biases],
        template=[("T", xin.dtype), ("M_ROWS", m), ("N_TILE", n_tile), ("K_GROUPS", k_groups),
                  ("VEC", vec), ("K", k), ("N", n), ("GS", qw.group_size),
                  ("LAYOUT_CONTIGUOUS", contiguous)],
        grid=((n // n_tile) * 32 * k_groups, 1, 1),
        threadgroup=(32 * k_groups, 1, 1),
        output_shapes=[(m, n)],
        output_dtypes=[xin.dtype],
    )
    return y
