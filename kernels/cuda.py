"""Building and launching the variants' CUDA sources with ``mx.fast.cuda_kernel`` (sm_90).

One source per K layout serves every variant that shares it; the contract's parameters (rows,
tile, K groups, layout) are template constants, so each shape compiles once and is cached by
MLX's JIT. Nothing here runs without MLX's CUDA backend.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import mlx.core as mx

from kernels import tiling
from kernels.dispatch import dtype_name
from kernels.qweights import QWeights
from kernels.variants import VARIANTS
from kernels.variants._cuda_common import launch_bounds_header


def has_source(name: str) -> bool:
    return getattr(VARIANTS[name], "CUDA_SOURCE", None) is not None


def kernel_header(name: str, cfg: LaunchConfig) -> str:
    """The header MLX compiles before the kernel's signature for this launch: the variant's,
    then the launch bounds (``cfg.min_blocks`` > 0) that only a header can give (see
    ``launch_bounds_header``). The one place it is made: the launch, the offline compile
    (``cuda_offline.compile_launch``) and the host-cost script all take it from here."""
    return VARIANTS[name].CUDA_HEADER + launch_bounds_header(cfg.threads, cfg.min_blocks)


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
    min_blocks: int = 0  # __launch_bounds__(threads, min_blocks) when > 0 (kernel_header)
    shared_memory: int = 0  # dynamic shared memory bytes a block takes (mma_weights_a's bulk)
    # () where the source reads w as MLX lays it out; else the arguments after wq of the
    # variant's ``pack_weights``, whose layout it reads instead (made once per weights:
    # ``weights_for``)
    packing: tuple = ()


def _mma_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                p: dict) -> LaunchConfig:
    k_groups = int(p["k_groups"])
    return LaunchConfig({"M_ROWS": m, "K_GROUPS": k_groups, "K": k, "N": n, "GS": group_size,
                         "IS_BF16": dtype == "bfloat16"},
                        (n // 8) * 32 * k_groups, 32 * k_groups, dtype)


def _weights_a_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                      p: dict) -> LaunchConfig:
    """``unroll`` shrinks to the largest of 4, 2, 1 (with ``bulk``: of any count) not above
    the request that divides a group's K steps (the tiling guarantees whole 128-value steps
    per group). ``stages`` >= 2 (the cp.async ring) must fit the block's 48 KiB of static
    shared memory: k_groups warps x stages x 32 lanes x (``RING_LANE_BYTES`` per 16-column
    tile, plus with ``x_early`` ``RING_LANE_X_BYTES`` per 8 activation rows)."""
    n_tile, k_groups = int(p["n_tile"]), int(p["k_groups"])
    group_steps = k // 128 // k_groups
    want = int(p["unroll"])
    stages, x_early = int(p.get("stages", 0)), int(p.get("x_early", 0))
    min_blocks, bulk = int(p.get("min_blocks", 0)), int(p.get("bulk", 0))
    hi_in_place = int(p.get("hi_in_place", 0))
    if hi_in_place and dtype != "float16":
        raise tiling.TilingError(
            f"{name}: hi_in_place is for float16 only, not {dtype} (bf16's 7-bit mantissa "
            f"holds a nibble at bits 0-3 only)")
    # the register batch holds UNROLL steps in registers; a bulk stage holds them in shared
    # memory and reads one step at a time, so there any divisor of the group's steps will do
    unroll = (next(u for u in range(want, 0, -1) if group_steps % u == 0) if bulk
              else _batch_unroll(want, group_steps))
    template = {"M_ROWS": m, "COL_TILES": n_tile // 16, "K_GROUPS": k_groups, "UNROLL": unroll,
                "PREFETCH": bool(int(p["prefetch"])), "STAGES": stages,
                "L2_PREFETCH": int(p.get("l2_prefetch", 128)), "X_EARLY": bool(x_early),
                "HI_IN_PLACE": bool(hi_in_place), "BULK": bool(bulk), "PACKED": bulk == 2,
                "K": k, "N": n, "GS": group_size, "IS_BF16": dtype == "bfloat16"}
    if bulk:
        return _bulk_config(name, m, k, n, group_size, dtype, template, min_blocks)
    v = VARIANTS[name]
    ring = k_groups * stages * 32 * ((n_tile // 16) * v.RING_LANE_BYTES
                                     + x_early * -(-m // 8) * v.RING_LANE_X_BYTES)
    if ring > tiling.MEMORY["cuda"][0]:
        raise tiling.TilingError(
            f"{name} does not tile M={m}, K={k}, N={n}, {dtype}, group_size={group_size} with "
            f"{p}: its cp.async ring ({ring} B) exceeds the 48 KiB of static shared memory")
    return LaunchConfig(template, (n // n_tile) * 32 * k_groups, 32 * k_groups, dtype,
                        min_blocks)


def _batch_unroll(want: int, group_steps: int) -> int:
    """The register batch's K steps: the largest of 4, 2, 1 not above ``want`` that divides a
    K group's steps."""
    return next(u for u in (4, 2, 1) if u <= want and group_steps % u == 0)


def _group_sums_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                       p: dict) -> LaunchConfig:
    """``mma_group_sums``: the register pipeline of ``_weights_a_config`` (its ``unroll`` rule),
    for groups that never span two K steps (the epilogue runs after a group's last word)."""
    if group_size not in VARIANTS[name].GROUP_SIZES:
        raise tiling.TilingError(
            f"{name} does not tile group_size={group_size}: a group must lie inside one K step "
            f"of 128 (group sizes {', '.join(map(str, VARIANTS[name].GROUP_SIZES))})")
    n_tile, k_groups = int(p["n_tile"]), int(p["k_groups"])
    unroll = _batch_unroll(int(p["unroll"]), k // 128 // k_groups)
    template = {"M_ROWS": m, "COL_TILES": n_tile // 16, "K_GROUPS": k_groups, "UNROLL": unroll,
                "PREFETCH": bool(int(p["prefetch"])), "X_EARLY": bool(int(p["x_early"])),
                "K": k, "N": n, "GS": group_size, "IS_BF16": dtype == "bfloat16"}
    return LaunchConfig(template, (n // n_tile) * 32 * k_groups, 32 * k_groups, dtype,
                        int(p["min_blocks"]))


# Dynamic shared memory a block may take on sm_90: 227 KiB with the static kind, of which this
# variant keeps 16 B; 1 KiB is left for it and alignment.
MAX_DYNAMIC_SMEM = 226 * 1024


def bulk_smem_bytes(m: int, k: int, n_tile: int, k_groups: int, unroll: int, stages: int,
                    group_size: int, packed: bool = False) -> int:
    """mma_weights_a's bulk ring, as its source lays it out: 128 B of mbarriers, the scales and
    the biases of the block's rows (2 B a group), then ``stages`` stages of ``unroll`` K steps
    of every K group's rows (64 B a row and step, padded so that two rows sit 64 B apart modulo
    128, except ``packed``: one copy a stage, rows back to back); the K groups' partial sums
    reuse the ring at the end."""
    pitch = unroll * 64 + (64 if unroll % 2 == 0 and not packed else 0)
    ring = stages * k_groups * n_tile * pitch
    partial = k_groups * 8 * -(-m // 8) * n_tile * 4
    return 128 + 2 * n_tile * (k // group_size) * 2 + max(ring, partial)


def _bulk_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                 template: dict, min_blocks: int) -> LaunchConfig:
    """``bulk`` = 1 or 2: one more warp, the producer, and the ring in dynamic shared memory (the
    register pipeline's PREFETCH and X_EARLY have no meaning there: the source ignores them)."""
    n_tile, k_groups = 16 * template["COL_TILES"], template["K_GROUPS"]
    unroll, stages = template["UNROLL"], template["STAGES"]
    where = f"{name} does not tile M={m}, K={k}, N={n}, {dtype}, group_size={group_size}"
    bulk = f"bulk={2 if template['PACKED'] else 1}"
    if stages < 2:
        raise tiling.TilingError(f"{where} with {bulk}: its ring needs stages >= 2")
    if (k // group_size) % 8:
        raise tiling.TilingError(f"{where} with {bulk}: a row's scales ({k // group_size} x 2 B) "
                                 f"must be whole 16-byte chunks for a bulk copy")
    smem = bulk_smem_bytes(m, k, n_tile, k_groups, unroll, stages, group_size,
                           template["PACKED"])
    if smem > MAX_DYNAMIC_SMEM:
        raise tiling.TilingError(f"{where} with {bulk}, n_tile={n_tile}, k_groups={k_groups}, "
                                 f"unroll={unroll}, stages={stages}: its {smem} B of shared "
                                 f"memory exceed the {MAX_DYNAMIC_SMEM} B a block may take")
    threads = 32 * (k_groups + 1)
    if threads > tiling.MAX_THREADS["cuda"]:
        raise tiling.TilingError(f"{where} with {bulk}: {k_groups} consumer warps and the "
                                 f"producer exceed {tiling.MAX_THREADS['cuda']} threads")
    template = {**template, "PREFETCH": False, "X_EARLY": False, "L2_PREFETCH": 128}
    packing = (n_tile, k_groups, unroll) if template["PACKED"] else ()
    return LaunchConfig(template, (n // n_tile) * threads, threads, dtype, min_blocks, smem,
                        packing)


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
            "mma_group_sums": _group_sums_config,
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

    __slots__ = ("activation", "dtypes", "grid", "header", "kernel", "name", "packing",
                 "scales_dtype", "shapes", "template", "threads", "traces")

    def __init__(self, name: str, m: int, k: int, n: int, group_size: int, dtype: mx.Dtype,
                 params: tuple):
        cfg = _launch_config(name, m, k, n, group_size, dtype_name(dtype), params)
        act = getattr(mx, cfg.activation)
        self.name = name
        self.header = kernel_header(name, cfg)
        self.kernel = _build(name, self.header, cfg.shared_memory)
        self.activation = act
        self.scales_dtype = act if VARIANTS[name].CUDA_LAYOUT in _SCALES_IN_ACTIVATION else None
        self.packing = cfg.packing
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
    key = (name, m, k, n, group_size, dtype, _key(params))
    hit = _LAUNCHERS.get(key)
    if hit is None:
        hit = _LAUNCHERS[key] = Launcher(*key)
    return hit


def clear_caches() -> None:
    """Forget every launcher, launch config and built kernel (tests). Weights keep their own
    entries (``QWeights.kernel_memo``) until they are dropped."""
    _LAUNCHERS.clear()
    _launch_config.cache_clear()
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
    full = (name, x.dtype, _key(params))
    entry = qw.kernel_memo.get(full)
    if entry is None:
        lx, w, scales, biases = _operands(name, x, qw, params)
        if not _evaluated(w, scales, biases):  # a caller's traced weights: nothing to keep
            return lx.call(x, w, scales, biases)
        kept = _kept(params)
        fn = _captured(name, qw, kept, x.dtype, lx, (w, scales, biases))
        entry = (kept, x.dtype, fn)
    y = entry[2](x)  # traced before it is kept: a failed trace leaves no entry behind
    qw.kernel_memo[full] = qw.kernel_memo[name] = entry
    return y


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
    once per weights and kept with them (a packed w is a second copy of w)."""
    q = qw.in_dtype(scales_dtype) if scales_dtype is not None else qw
    wq = q.wq
    if packing:
        pack = VARIANTS[name].pack_weights
        wq = q.derived((name, *packing), lambda: pack(q.wq, *packing))
    return wq, q.scales, q.biases


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
