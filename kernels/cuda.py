"""Building and launching the variants' CUDA sources with ``mx.fast.cuda_kernel`` (sm_90).

One source per K layout serves every variant that shares it; the contract's parameters (rows,
tile, K groups, layout) are template constants, so each shape compiles once and is cached by
MLX's JIT. Nothing here runs without MLX's CUDA backend.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from types import MappingProxyType

import mlx.core as mx

from kernels import tiling
from kernels.cuda_config import (  # noqa: F401 - the launch's config, re-exported
    MAX_DYNAMIC_SMEM,
    LaunchConfig,
    bulk_smem_bytes,
    config_of,
    has_source,
    launch_config,
    params_key,
    vector_width,
)
from kernels.dispatch import dtype_name
from kernels.qweights import QWeights
from kernels.variants import VARIANTS
from kernels.variants._cuda_common import launch_bounds_header


def kernel_header(name: str, cfg: LaunchConfig) -> str:
    """The header MLX compiles before the kernel's signature for this launch: the variant's,
    then the launch bounds (``cfg.min_blocks`` > 0) and cluster size (``cfg.cluster`` > 1)
    that only a header can give (see
    ``launch_bounds_header``). The one place it is made: the launch, the offline compile
    (``cuda_offline.compile_launch``) and the host-cost script all take it from here."""
    return VARIANTS[name].CUDA_HEADER + launch_bounds_header(cfg.threads, cfg.min_blocks,
                                                             cfg.cluster)


@functools.cache
def _build(name: str, header: str, shared_memory: int = 0):
    """One kernel object per header and dynamic shared memory size (MLX takes both when the
    object is made; it keys its compiled module by the whole source)."""
    extra = {"shared_memory": shared_memory} if shared_memory else {}
    return mx.fast.cuda_kernel(
        name=f"dflash2_{name}",
        input_names=["x", "w", "scales", "biases"],
        output_names=["y"],
        source=VARIANTS[name].CUDA_SOURCE,
        header=header,
        **extra,
    )


# Where a cluster tile's evidence lies: the probe that found the hazard and its records.
CLUSTER_HAZARD_RECORD = "bench/results/h100/xshare_0830"


def cuda_graphs_on() -> bool:
    """Whether MLX batches launches into CUDA graphs: its ``MLX_USE_CUDA_GRAPHS``, an integer
    (on unless 0). A value MLX would not read as an integer counts as on, the case to fear."""
    try:
        return int(os.environ.get("MLX_USE_CUDA_GRAPHS", "1").strip()) != 0
    except ValueError:
        return True


def refuse_cluster_under_graphs(name: str, cluster: int) -> None:
    """A thread-block cluster (``__cluster_dims__``, given at compile time: MLX's custom
    kernels take no cluster attribute) is refused while MLX's CUDA graphs are on. MLX 0.32.4
    reuses an instantiated graph for any graph of the same key and updates its kernels in
    place, and the key names a kernel node's cluster size from the node's launch attribute
    only, which is 0 for ours. After a batch of clustered launches, stock QMM in the same
    process ran at the launch floor (3.6 against 42 us) with wrong output, and the clustered
    launches overwrote their own inputs (x's last 2048 values, the scales' last 16384): an
    H100, 2026-12-07 08:30-08:42 (CLUSTER_HAZARD_RECORD). With MLX_USE_CUDA_GRAPHS=0 the
    same runs changed nothing. So a clustered tile is for measurement with graphs off; the
    runtime falls back to stock (a TilingError, as for a tile that cannot tile)."""
    if cluster > 1 and cuda_graphs_on():
        raise tiling.TilingError(
            f"{name}: cluster={cluster} needs MLX_USE_CUDA_GRAPHS=0: MLX's CUDA graph cache "
            f"keys a kernel by its launch attribute's cluster size, not the kernel's "
            f"__cluster_dims__, and a graph updated across the two corrupts other launches "
            f"({CLUSTER_HAZARD_RECORD})")


# Variants whose CUDA source reads scales and biases as 16-bit words of the activation type
# (``reinterpret_cast<const uint16_t*>``, decoded by IS_BF16): they must arrive in that dtype.
# The others read them through ``static_cast<float>`` of their own type, in any dtype.
_SCALES_IN_ACTIVATION = frozenset({"mma_weights_a", "mma_group_sums"})


class Launcher:
    """One shape's launch: its config, kernel object and template list, made once per (variant,
    shape, dtype, params) and shared by every weights of that shape.

    ``mx.fast.cuda_kernel`` builds its whole source (header, signature, template constants,
    body) as a string on every call: ~8-10 us of host time a launch on the H200's host. So the
    kernel is called (``call``) only while ``mx.compile`` traces a weights' captured launch
    (``_captured``) at this shape; every later launch replays the recorded graph: no template
    list, no source string, no launch config is built, nothing is cast. ``traces`` counts how
    often the kernel call really ran, over all weights (tests hold it at one per weights).
    """

    __slots__ = ("activation", "denorm", "dtypes", "grid", "header", "kernel", "name",
                 "packing", "scales_dtype", "shapes", "template", "threads", "traces")

    def __init__(self, name: str, m: int, k: int, n: int, group_size: int, dtype: mx.Dtype,
                 params: tuple):
        cfg = config_of(name, m, k, n, group_size, dtype_name(dtype), params)
        refuse_cluster_under_graphs(name, cfg.cluster)
        act = getattr(mx, cfg.activation)
        self.name = name
        self.header = kernel_header(name, cfg)
        self.kernel = _build(name, self.header, cfg.shared_memory)
        self.activation = act
        self.scales_dtype = act if VARIANTS[name].CUDA_LAYOUT in _SCALES_IN_ACTIVATION else None
        self.packing = cfg.packing
        self.denorm = int(cfg.template.get("DENORM", 0))
        self.template = [("T", act), *cfg.template.items()]
        self.grid, self.threads = (cfg.grid, 1, 1), (cfg.threads, 1, 1)
        self.shapes, self.dtypes = [(m, n)], [act]
        self.traces = 0

    def call(self, x: mx.array, w: mx.array, scales: mx.array, biases: mx.array) -> mx.array:
        """The kernel call itself: run only while a trace records it (or inside a caller's
        trace), never per launch."""
        self.traces += 1
        if x.dtype != self.activation:  # recorded once into the graph (W4A32 reads float32)
            x = x.astype(self.activation)
        (y,) = self.kernel(inputs=[x, w, scales, biases], template=self.template,
                           grid=self.grid, threadgroup=self.threads,
                           output_shapes=self.shapes, output_dtypes=self.dtypes)
        return y


# (variant, m, k, n, group size, x dtype, sorted params) -> Launcher, shared by all weights.
_LAUNCHERS: dict[tuple, Launcher] = {}


def launcher(name: str, m: int, k: int, n: int, group_size: int, dtype: mx.Dtype,
             params: dict) -> Launcher:
    """The shape's ``Launcher``, made on first use (``tiling.TilingError`` if it cannot tile)."""
    key = (name, m, k, n, group_size, dtype, params_key(params))
    hit = _LAUNCHERS.get(key)
    if hit is None:
        hit = _LAUNCHERS[key] = Launcher(*key)
    return hit


def clear_caches() -> None:
    """Forget every launcher, launch config and built kernel (tests). Weights keep their own
    entries (``QWeights.kernel_memo``) until they are dropped."""
    _LAUNCHERS.clear()
    config_of.cache_clear()
    _build.cache_clear()


def launch(name: str, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    """One launch of variant ``name``: y (M, N) = x (M, K) @ W^T.

    Per call: one dict lookup in the weights' own memo, keyed by the variant's name, two
    comparisons with the entry's ``params`` and x's dtype (a params dict changed in place, or
    another with other values, misses; the selection table's read-only params are the entry's
    own object, known by identity: ``_kept``), then the replay of the weights' captured launch
    (``_captured``), which serves every M: MLX's compiled call matches x's shape against the
    shapes it traced, in C++. Keying the memo by x's shape as well cost 28-39% of a launch's
    Python on this project's CPU host (``x.shape``, the tuple and its hash: ~90-140 of ~320-360
    ns over the replay, bench/launch_python_cost.py), the part of the host cost over stock that
    scales with the host's Python (~1.0 us on the slow H200 host that put it over 2 us). The
    short key holds the entry last launched, so a runtime that asks one tile and dtype per
    weights always hits; anything else is ``_miss``'s."""
    try:
        p, dtype, fn = qw.kernel_memo[name]
    except KeyError:
        return _miss(name, x, qw, params)
    if (p is params or p == params) and dtype == x.dtype:
        return fn(x)
    return _miss(name, x, qw, params)


def _miss(name: str, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    """Other params or dtype for this variant, or its first launch. Every entry a weights
    made stays under its full key (x's dtype and the sorted params added), so going back to
    earlier params finds it instead of tracing again; the short key then points at it."""
    full = (name, x.dtype, params_key(params))
    entry = qw.kernel_memo.get(full)
    if entry is None:
        lx, w, scales, biases = _operands(name, x, qw, params)
        traced = not _evaluated(w, scales, biases)  # a caller's traced weights: nothing kept
        runs = params  # what the launches run: the plain path where denorm may not (the same
        # output bit for bit): scales over its limit, or unseen and not vouched for
        if lx.denorm:
            seen = (qw.scales_max_abs if scales is qw.scales else None) if traced \
                else scale_magnitude(scales)
            if not denorm_runs(params, dtype_name(scales.dtype), seen):
                runs = plain_nibbles(params)
                lx = _operands(name, x, qw, runs)[0]  # the same operands: denorm moves nothing
        if traced:
            return lx.call(x, w, scales, biases)
        fn = _captured(name, qw, runs, x.dtype, lx, (w, scales, biases))
        entry = (_kept(params), x.dtype, fn)
    y = entry[2](x)  # traced before it is kept: a failed trace leaves no entry behind
    qw.kernel_memo[full] = qw.kernel_memo[name] = entry
    return y


# ``denorm`` (mma_weights_a) multiplies each scale by 2^133 (bf16) or 2^20 (fp16), and with
# ``denorm`` = 2 fp16's by 2^24, in the kernel: exact while the product is finite, so only for
# scales below these magnitudes. (dtype, denorm) -> the least magnitude that overflows.
DENORM_SCALE_LIMIT = {("bfloat16", 1): 2.0 ** -5, ("float16", 1): 2.0 ** -4,
                      ("bfloat16", 2): 2.0 ** -5, ("float16", 2): 2.0 ** -8}


def scale_magnitude(scales: mx.array) -> float:
    """The largest |scale| (infinity where one is NaN or infinite): what ``denorm``'s limit is
    checked against, once per weights, where the launch is captured, or by a caller who
    vouches for traced weights (``QWeights.scales_max_abs``)."""
    if not mx.all(mx.isfinite(scales)).item():
        return math.inf
    return float(mx.max(mx.abs(scales)).astype(mx.float32).item()) if scales.size else 0.0


def denorm_fits(magnitude: float, dtype: str, denorm: int) -> bool:
    """Whether scales of that largest magnitude, in the activation dtype the kernel reads, stay
    finite under ``denorm``'s scaling."""
    limit = DENORM_SCALE_LIMIT.get((dtype, denorm))
    return limit is not None and magnitude < limit


def denorm_runs(params: Mapping, dtype: str, magnitude: float | None) -> bool:
    """Whether a tile of ``params`` runs ``denorm`` on scales of that largest magnitude (None:
    unmeasured), rather than the plain path it falls back to: what a record of a denorm
    tile's time must say, so that no plain time is filed under a denorm tile."""
    mode = int(params.get("denorm", 0))
    return bool(mode) and magnitude is not None and denorm_fits(magnitude, dtype, mode)


def plain_nibbles(params: Mapping) -> dict:
    """``params`` without ``denorm``: the plain dequantization, whose output ``denorm``'s
    equals bit for bit wherever ``denorm`` may run, so it serves weights it may not."""
    return {**params, "denorm": 0}


def _kept(params) -> Mapping:
    """The params an entry keeps: the caller's own read-only mapping (the selection table's,
    one object per key: ``launch`` then knows it by identity, ~10 ns against ~80 ns for
    comparing nine items), else a copy (a dict may change in place after the launch)."""
    return params if isinstance(params, MappingProxyType) else dict(params)


def _operands(name: str, x: mx.array, qw: QWeights, params: dict) -> tuple:
    """x's launcher and the weights as its source reads them: scales and biases in the
    activation dtype where it needs them (``QWeights.in_dtype``, converted once per weights).
    A ValueError for an x of another K or a shape that cannot tile, before anything is built
    or kept."""
    m, k = _rows_and_k(name, x, qw.k)
    lx = launcher(name, m, k, qw.n, qw.group_size, x.dtype, params)
    return (lx, *weights_for(name, qw, lx.scales_dtype, lx.packing))


def _rows_and_k(name: str, x: mx.array, k: int) -> tuple[int, int]:
    if x.ndim != 2:
        raise ValueError(f"{name}: x must be (M, K), not of shape {tuple(x.shape)}")
    if x.shape[1] != k:
        raise ValueError(f"{name}: x has K={x.shape[1]}, the weights K={k}")
    return x.shape


def _captured(name: str, qw: QWeights, params: Mapping, dtype: mx.Dtype, first: Launcher,
              operands: tuple) -> Callable[[mx.array], mx.array]:
    """The launch on these weights with x in ``dtype``, as ONE compiled function of x alone
    for every M, the weights constants of its graph: a replay flattens and checks one input,
    not four (over stock's op on the H200's hosts: +0.58 against +0.92 us for a shared 4-input
    function on a fast one, +1.17 against +1.87 on a slow one, host_cost.json), and MLX traces
    it again for each new shape, where that shape's launcher is picked. The weights must be
    evaluated: a lazy constant's graph is replayed on every call. The operands depend on the
    dtype and the tile, not on M (``weights_for``); a launcher that would read them otherwise
    is refused. Each function object has its own entries in MLX's compile cache, freed with
    the function, so the constants live as long as the weights' memo. Called with a tracer
    (inside a caller's ``mx.compile``), MLX runs the body into the caller's graph."""
    w, scales, biases = operands
    layout = (first.scales_dtype, first.packing)
    k, n, group_size = qw.k, qw.n, qw.group_size  # not qw: its memo holds this function

    def launch_x(x: mx.array) -> mx.array:
        m, _ = _rows_and_k(name, x, k)
        lx = launcher(name, m, k, n, group_size, dtype, params)
        if (lx.scales_dtype, lx.packing) != layout:
            raise ValueError(f"{name}: M={m} reads the weights in another layout than the "
                             f"launch captured at M={first.shapes[0][0]}")
        return lx.call(x, w, scales, biases)
    return mx.compile(launch_x)


def weights_for(name: str, qw: QWeights, scales_dtype: mx.Dtype | None,
                packing: tuple) -> tuple:
    """(w, scales, biases) as a launch's source reads them: scales and biases converted to
    ``scales_dtype`` and w in the variant's own layout (``LaunchConfig.packing``), each made
    once per weights and kept with them (a packed w is a second copy of w, in
    ``QWeights.layouts``: one given there, made at load or passed into a caller's trace, is
    read as it is)."""
    q = qw.in_dtype(scales_dtype) if scales_dtype is not None else qw
    wq = q.wq
    if packing:
        key = (name, *packing)
        wq = q.layouts.get(key)
        if wq is None:
            wq = q.layouts[key] = VARIANTS[name].pack_weights(q.wq, *packing)
    return wq, q.scales, q.biases


def layouts_for(name: str, qw: QWeights, m: int, dtype: mx.Dtype, params: Mapping) -> dict:
    """{(variant, *packing): w in that layout} for the launch of ``params`` at M = ``m`` on
    these weights, made now (evaluated) and kept in ``qw.layouts``; {} for a tile that reads
    w as MLX stores it. Called where the weights are loaded, so that a caller who compiles
    with the weights as its inputs passes the layout as one of them: inside a trace a layout
    it lacks is an op of the graph, a copy of w on every call (gate/up bf16 M=8 on the H200,
    2026-12-05 16:22: 50.0 us compiled against 23.6 eager). A TilingError for a tile that
    cannot tile this shape."""
    cfg = config_of(name, m, qw.k, qw.n, qw.group_size, dtype_name(dtype), params_key(params))
    if not cfg.packing:
        return {}
    w = weights_for(name, qw, None, cfg.packing)[0]
    _evaluated(w)
    return {(name, *cfg.packing): w}


def _evaluated(*arrays: mx.array) -> bool:
    """Evaluate the arrays a captured launch holds as constants (a lazy constant's graph would
    run again on every replay: freshly quantized weights, converted scales). False when they
    are tracers of a caller's ``mx.compile``, which MLX refuses to evaluate: they die with that
    trace, so there is nothing to capture."""
    try:
        mx.eval(*arrays)
    except ValueError as e:
        if "transformations" not in str(e):
            raise
        return False
    return True
