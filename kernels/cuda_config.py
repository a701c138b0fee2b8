"""The launch configuration of each CUDA source: its template constants, grid and block, as plain
data (``LaunchConfig``), per variant layout (a table, ``_CONFIGS``), checked against the
variant's ``CUDA_TILING`` first. Apart from ``kernels.cuda``, which builds and launches (and
re-exports these names), so that each module has one job; a config needs no kernel built.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from kernels import tiling
from kernels.dispatch import dtype_name
from kernels.variants import VARIANTS


def has_source(name: str) -> bool:
    return getattr(VARIANTS[name], "CUDA_SOURCE", None) is not None


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
    cluster: int = 1  # blocks of a thread-block cluster along x: __cluster_dims__ when > 1


def _mma_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                p: dict) -> LaunchConfig:
    k_groups = int(p["k_groups"])
    return LaunchConfig({"M_ROWS": m, "K_GROUPS": k_groups, "K": k, "N": n, "GS": group_size,
                         "IS_BF16": dtype == "bfloat16"},
                        (n // 8) * 32 * k_groups, 32 * k_groups, dtype)


def _check_cluster(name: str, cluster: int, k_groups: int) -> None:
    """A cluster's blocks take a column tile's K groups in equal shares, in rank order."""
    if k_groups % cluster:
        raise tiling.TilingError(f"{name}: cluster={cluster} must divide k_groups={k_groups} "
                                 f"(each block of a cluster takes as many K groups)")


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
    hi_in_place, ablate = int(p.get("hi_in_place", 0)), int(p.get("ablate", 0))
    denorm = int(p.get("denorm", 0))
    col_warps, cluster = int(p.get("col_warps", 1)), int(p.get("cluster", 1))
    wgmma = int(p.get("wgmma", 0))
    if (col_warps > 1 or cluster > 1) and (bulk or (stages and not wgmma)):
        raise tiling.TilingError(f"{name}: col_warps and cluster take the register pipeline "
                                 f"(stages=0, bulk=0; wgmma also the cp.async ring), not "
                                 f"stages={stages}, bulk={bulk}")
    _check_cluster(name, cluster, k_groups)
    x_share = int(p.get("x_share", 0))
    if x_share and (cluster != k_groups or stages or bulk or x_early):
        raise tiling.TilingError(f"{name}: x_share loads x for the block's one K group (cluster "
                                 f"= k_groups) in the register pipeline without x_early, not "
                                 f"cluster={cluster}, k_groups={k_groups}, stages={stages}, "
                                 f"bulk={bulk}, x_early={x_early}")
    row_warps = int(p.get("row_warps", 1))
    if row_warps > 1 and (stages or bulk or col_warps > 1 or cluster > 1 or x_share
                          or m != 8 * row_warps):
        raise tiling.TilingError(f"{name}: row_warps={row_warps} gives each of a block's warps "
                                 f"8 rows of M={8 * row_warps} exactly, in the register pipeline "
                                 f"alone (stages=0, bulk=0, col_warps=1, cluster=1, x_share=0), "
                                 f"not M={m}, stages={stages}, bulk={bulk}, col_warps={col_warps}, "
                                 f"cluster={cluster}, x_share={x_share}")
    if wgmma and (col_warps != 4 or bulk or cluster > 1 or x_share or x_early
                  or row_warps > 1 or int(p.get("x_prefetch", 0)) or (ablate >= 3 and stages)
                  or ablate == 5):
        raise tiling.TilingError(f"{name}: wgmma makes each K group's 4 warps a warpgroup whose "
                                 f"activations it stages itself, in the register pipeline "
                                 f"or the cp.async ring (col_warps=4, bulk=0, cluster=1, x_share=0, "
                                 f"x_early=0, row_warps=1, x_prefetch=0; ablate 3 and 4 "
                                 f"off the ring, never 5), not "
                                 f"col_warps={col_warps}, bulk={bulk}, "
                                 f"cluster={cluster}, x_share={x_share}, x_early={x_early}, "
                                 f"row_warps={row_warps}, x_prefetch={p.get('x_prefetch', 0)}, "
                                 f"ablate={ablate}, stages={stages}")
    if n % (n_tile * col_warps):
        raise tiling.TilingError(f"{name} does not tile N={n} with n_tile={n_tile} x "
                                 f"col_warps={col_warps}: a block's columns must divide N")
    if denorm and hi_in_place:
        raise tiling.TilingError(f"{name}: denorm and hi_in_place are two ways to take the "
                                 f"nibbles; a tile takes one")
    if x_early == 2 and (bulk != 3 or ablate == 2):
        raise tiling.TilingError(f"{name}: x_early=2 copies x with each stage of bulk=3's ring "
                                 f"(its leader warp issues the copies), so it takes bulk=3 "
                                 f"and no ablate=2 (no stage copied)")
    # the levers on the activations' loads that only the register pipeline's load_x has
    # (ablate 3 and 4 also in the bulk pipeline's own load_x path: x_early 0)
    x_levers = [lv for lv, on in ((f"ablate={ablate}", ablate >= 3 and not takes_x_ablate(p)),
                                  ("x_early=3", x_early == 3 and not _register_alone(p)))
                if on]
    if x_levers:
        raise tiling.TilingError(f"{name}: {' and '.join(x_levers)} change the activation loads "
                                 f"of the register pipeline alone (stages=0, bulk=0, "
                                 f"col_warps=1, cluster=1, x_share=0) or, for ablate, of the "
                                 f"bulk pipeline without x_early")
    # bulk 3's refill: the slot LAG stages back (-1: 1 from 3 stages, 0 at 2)
    lag = int(p.get("lag", -1))
    lag = (1 if stages > 2 else 0) if lag < 0 else lag
    if bulk == 3 and lag >= stages:
        raise tiling.TilingError(f"{name}: lag={lag} refills a slot {lag} stages back, which a "
                                 f"ring of stages={stages} does not hold (lag < stages)")
    x_prefetch = int(p.get("x_prefetch", 0))
    if x_prefetch and (x_share or ablate >= 3 or x_early in (2, 3) or (bulk and x_early)):
        raise tiling.TilingError(f"{name}: x_prefetch brings into L1 the lines load_x then reads "
                                 f"from global memory, so it takes no x_share, x_early 2 or 3, "
                                 f"x_early with bulk, or ablate 3 or 4 (not x_share={x_share}, "
                                 f"x_early={x_early}, bulk={bulk}, ablate={ablate})")
    x_ahead = int(p.get("x_ahead", 0))
    if x_ahead and not ((bulk and not x_early) or wgmma):
        raise tiling.TilingError(f"{name}: x_ahead loads x two K steps ahead in the bulk "
                                 f"pipeline's load_x path (bulk without x_early), or three in "
                                 f"wgmma's staging, not bulk={bulk}, x_early={x_early}, "
                                 f"wgmma={wgmma}")
    x_rot = int(p.get("x_rot", 0))
    if x_rot and not (bulk and not x_early and not x_ahead and not x_prefetch and not ablate):
        raise tiling.TilingError(f"{name}: x_rot loads the next K step's activations word by "
                                 f"word into the registers this step's leave, in the bulk "
                                 f"pipeline's plain load_x path (bulk without x_early, x_ahead, "
                                 f"x_prefetch or ablate), not bulk={bulk}, x_early={x_early}, "
                                 f"x_ahead={x_ahead}, x_prefetch={x_prefetch}, ablate={ablate}")
    if ablate and stages and not bulk:
        raise tiling.TilingError(f"{name}: ablate takes a part out of the register pipeline "
                                 f"or the bulk pipeline, not the cp.async ring")
    if hi_in_place and dtype != "float16":
        raise tiling.TilingError(
            f"{name}: hi_in_place is for float16 only, not {dtype} (bf16's 7-bit mantissa "
            f"holds a nibble at bits 0-3 only)")
    # the register batch holds UNROLL steps in registers; a bulk stage holds them in shared
    # memory and reads one step at a time, so there any divisor of the group's steps will do
    unroll = (next(u for u in range(want, 0, -1) if group_steps % u == 0) if bulk
              else _batch_unroll(want, group_steps))
    if wgmma == 2 and (stages or not (int(p["prefetch"]) or unroll >= 2)):
        # A wgmma reads its A registers until it completes: with a step left in flight, the
        # next step's fragments must be other registers, which two steps of code in the loop
        # give (two batches taking turns, or a batch of two); the ring's loop is one step.
        raise tiling.TilingError(f"{name}: wgmma=2 leaves a step's wgmma in flight while the "
                                 f"next step's A fragments are made, so it takes two steps of "
                                 f"code a loop (stages=0 with prefetch=1 or unroll>=2 dividing "
                                 f"the group's steps), not stages={stages}, "
                                 f"prefetch={p['prefetch']}, unroll={unroll}")
    template = {"M_ROWS": m // row_warps, "COL_TILES": n_tile // 16, "K_GROUPS": k_groups,
                "UNROLL": unroll, "PREFETCH": bool(int(p["prefetch"])), "STAGES": stages,
                "L2_PREFETCH": int(p.get("l2_prefetch", 128)),
                "X_EARLY": x_early if x_early in (2, 3) else bool(x_early),
                "HI_IN_PLACE": bool(hi_in_place), "DENORM": denorm, "BULK": bool(bulk),
                "PACKED": packs_weights(p), "LEADER": bulk == 3, "ABLATE": ablate,
                "COL_WARPS": col_warps, "CLUSTER": cluster, "X_SHARE": bool(x_share),
                "ROW_WARPS": row_warps, "X_PREFETCH": x_prefetch, "LAG": lag,
                "X_AHEAD": bool(x_ahead), "WGMMA": wgmma, "X_ROT": bool(x_rot),
                "K": k, "N": n, "GS": group_size, "IS_BF16": dtype == "bfloat16"}
    if bulk:
        return _bulk_config(name, m, k, n, group_size, dtype, template, min_blocks)
    v = VARIANTS[name]
    ring = k_groups * (4 if wgmma else 1) * stages * 32 * ((n_tile // 16) * v.RING_LANE_BYTES
                                     + x_early * -(-m // 8) * v.RING_LANE_X_BYTES)
    if ring > tiling.MEMORY["cuda"][0]:
        raise tiling.TilingError(
            f"{name} does not tile M={m}, K={k}, N={n}, {dtype}, group_size={group_size} with "
            f"{p}: its cp.async ring ({ring} B) exceeds the 48 KiB of static shared memory")
    if x_early == 3:  # the partial sums, then each warp's ring of 2 K steps of x
        m_tiles = -(-(m // row_warps) // 8)
        smem = k_groups * row_warps * (8 * m_tiles * n_tile * 4 + 2 * 4 * m_tiles * 32 * 16)
        if smem > tiling.MEMORY["cuda"][0]:
            raise tiling.TilingError(
                f"{name} does not tile M={m} with {p}: its partial sums and x ring ({smem} B) "
                f"exceed the 48 KiB of static shared memory")
    if col_warps > 1 or cluster > 1 or x_share:
        return _shared_x_config(name, m, n, n_tile, k_groups, dtype, template, min_blocks, ring)
    threads = 32 * k_groups * row_warps  # row_warps: a warp per 8 rows of each K group
    if threads > tiling.MAX_THREADS["cuda"]:
        raise tiling.TilingError(f"{name} with k_groups={k_groups}, row_warps={row_warps}: "
                                 f"{threads} threads a block exceed {tiling.MAX_THREADS['cuda']}")
    return LaunchConfig(template, (n // n_tile) * threads, threads, dtype, min_blocks)


def _shared_x_config(name: str, m: int, n: int, n_tile: int, k_groups: int, dtype: str,
                     template: dict, min_blocks: int, ring: int = 0) -> LaunchConfig:
    """``col_warps`` W and ``cluster`` S: a block of W x (k_groups / S) warps, W column tiles
    side by side over the same K groups (so its warps read the same activations, one L2 read
    for W tiles' use), and S blocks of a cluster taking a column tile's K groups in rank order.
    The grid: N / (n_tile x W) clusters of S blocks. Each warp's work and the order of the sums
    are those of the plain (n_tile, k_groups) tile, so its output is that tile's bit for bit."""
    col_warps, cluster = template["COL_WARPS"], template["CLUSTER"]
    threads = 32 * col_warps * (k_groups // cluster)
    where = f"{name} with n_tile={n_tile}, k_groups={k_groups}, col_warps={col_warps}, " \
            f"cluster={cluster}"
    if threads > tiling.MAX_THREADS["cuda"]:
        raise tiling.TilingError(f"{where}: {threads} threads a block exceed "
                                 f"{tiling.MAX_THREADS['cuda']}")
    smem = (k_groups // cluster) * 8 * -(-m // 8) * n_tile * col_warps * 4  # partial sums
    smem = max(smem, ring)  # wgmma's cp.async ring (``ring`` bytes), reused by the sums
    smem += 2 * m * 272 if template["X_SHARE"] else 0  # two slots of a K step's x (XS_PITCH)
    # wgmma: two slots a K group of a K step's x (three with wgmma 2, a step's wgmma in
    # flight), 8 k16 blocks of 8 or 16 rows (NW x 32 B)
    slots = 3 if template["WGMMA"] == 2 else 2
    smem += ((k_groups // cluster) * slots * 8 * (16 if m > 8 else 8) * 32
             if template["WGMMA"] else 0)
    if smem > tiling.MEMORY["cuda"][0]:
        raise tiling.TilingError(f"{where}: its partial sums and x's slots ({smem} B) exceed "
                                 f"the 48 KiB of static shared memory")
    blocks = n // (n_tile * col_warps) * cluster
    return LaunchConfig(template, blocks * threads, threads, dtype, min_blocks, cluster=cluster)


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
    cluster = int(p.get("cluster", 1))
    _check_cluster(name, cluster, k_groups)
    unroll = _batch_unroll(int(p["unroll"]), k // 128 // k_groups)
    template = {"M_ROWS": m, "COL_TILES": n_tile // 16, "K_GROUPS": k_groups, "UNROLL": unroll,
                "PREFETCH": bool(int(p["prefetch"])), "X_EARLY": bool(int(p["x_early"])),
                "LATE_SCALES": bool(int(p["late_scales"])), "ABLATE": int(p["ablate"]),
                "CLUSTER": cluster, "K": k, "N": n, "GS": group_size,
                "IS_BF16": dtype == "bfloat16"}
    threads = 32 * k_groups // cluster
    return LaunchConfig(template, (n // n_tile) * cluster * threads, threads, dtype,
                        int(p["min_blocks"]), cluster=cluster)


# Dynamic shared memory a block may take on sm_90: 227 KiB with the static kind, of which this
# variant keeps 16 B; 1 KiB is left for it and alignment.
MAX_DYNAMIC_SMEM = 226 * 1024


def _register_alone(p: Mapping) -> bool:
    """The register pipeline of one block a column tile: no ring, no bulk copies, no warps or
    blocks sharing x."""
    return not (int(p.get("stages", 0)) or int(p.get("bulk", 0))
                or int(p.get("col_warps", 1)) > 1 or int(p.get("cluster", 1)) > 1
                or int(p.get("x_share", 0)))


def takes_x_ablate(p: Mapping) -> bool:
    """Whether ``ablate`` 3 and 4 (x's words made up in load_x), and 5 off wgmma (each step's
    loads from its K group's first step), can run on a tile of
    mma_weights_a: the register pipeline alone, or the bulk pipeline without x_early (whose
    load_x they are); bench/diagnostic_tiles.py picks its xcost tiles by it. On a wgmma tile of
    the register pipeline they leave x unstaged: no load, no barrier a step, B the zeros it
    starts with (a time, not a result)."""
    if int(p.get("wgmma", 0)):
        return not int(p.get("stages", 0))
    if int(p.get("bulk", 0)):
        return not int(p.get("x_early", 0))
    return _register_alone(p)


def packs_weights(params: Mapping) -> bool:
    """Whether a tile of ``params`` reads w in its own layout (``bulk`` 2 and 3: one contiguous
    copy a stage), a second copy of w made once per weights (``QWeights.layouts``; a layer
    makes it at load, ``kernels.dispatch.at_load``). A caller's ``mx.compile`` with the
    weights as inputs must pass it too, or the copy is made in the graph on every call
    (gate/up bf16 M=8 on the H200, 2026-12-05 16:22, before the bench passed it: 50.0 us
    compiled against 23.6 eager), so a choice of such a tile must see its compiled time."""
    return int(params.get("bulk", 0)) >= 2


# K steps of activations the bulk pipeline's x ring holds with x_early (the source's X_DEPTH,
# a constant there, so that no other tile's template, and so its kernel, changes):
# a step's copies are issued one step before its math. Deeper would cost a block an SM: gate/up
# at M=8 with 3 stages takes 10 KiB of scales, 24 of weights and 16 of x, 4 blocks an SM.
BULK_X_DEPTH = 2


def bulk_smem_bytes(m: int, k: int, n_tile: int, k_groups: int, unroll: int, stages: int,
                    group_size: int, packed: bool = False, x_early: int = 0) -> int:
    """mma_weights_a's bulk ring, as its source lays it out: 128 B of mbarriers, the scales and
    the biases of the block's rows (2 B a group), then ``stages`` stages of ``unroll`` K steps
    of every K group's rows (64 B a row and step, padded so that two rows sit 64 B apart modulo
    128, except ``packed``: one copy a stage, rows back to back; with ``x_early`` 2 each stage
    then holds its activations, a K group's row of M every unroll x 256 + 16 B), then with
    ``x_early`` 1 each lane's ring of BULK_X_DEPTH steps of activations (64 B a lane, step and
    8 rows); the K groups' partial sums reuse the rings at the end."""
    pitch = unroll * 64 + (64 if unroll % 2 == 0 and not packed else 0)
    x_stage = k_groups * m * (unroll * 256 + 16) if x_early == 2 else 0
    ring = stages * (k_groups * n_tile * pitch + x_stage)
    x_ring = k_groups * 32 * BULK_X_DEPTH * 64 * -(-m // 8) if x_early == 1 else 0
    partial = k_groups * 8 * -(-m // 8) * n_tile * 4
    return 128 + 2 * n_tile * (k // group_size) * 2 + max(ring + x_ring, partial)


def _bulk_config(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
                 template: dict, min_blocks: int) -> LaunchConfig:
    """``bulk`` = 1 or 2: one more warp, the producer, and the ring in dynamic shared memory (the
    register pipeline's PREFETCH has no meaning there; X_EARLY puts x in a ring of its own);
    3: packed with no producer warp (its registers cost the computing warps a block an SM)."""
    n_tile, k_groups = 16 * template["COL_TILES"], template["K_GROUPS"]
    unroll, stages = template["UNROLL"], template["STAGES"]
    where = f"{name} does not tile M={m}, K={k}, N={n}, {dtype}, group_size={group_size}"
    bulk = f"bulk={3 if template['LEADER'] else 2 if template['PACKED'] else 1}"
    if stages < 2:
        raise tiling.TilingError(f"{where} with {bulk}: its ring needs stages >= 2")
    if (k // group_size) % 8:
        raise tiling.TilingError(f"{where} with {bulk}: a row's scales ({k // group_size} x 2 B) "
                                 f"must be whole 16-byte chunks for a bulk copy")
    smem = bulk_smem_bytes(m, k, n_tile, k_groups, unroll, stages, group_size,
                           template["PACKED"], int(template["X_EARLY"]))
    if smem > MAX_DYNAMIC_SMEM:
        raise tiling.TilingError(f"{where} with {bulk}, n_tile={n_tile}, k_groups={k_groups}, "
                                 f"unroll={unroll}, stages={stages}: its {smem} B of shared "
                                 f"memory exceed the {MAX_DYNAMIC_SMEM} B a block may take")
    threads = 32 * (k_groups + (0 if template["LEADER"] else 1))
    if threads > tiling.MAX_THREADS["cuda"]:
        raise tiling.TilingError(f"{where} with {bulk}: {k_groups} consumer warps and the "
                                 f"producer exceed {tiling.MAX_THREADS['cuda']} threads")
    template = {**template, "PREFETCH": False, "L2_PREFETCH": 128}
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
    return config_of(name, m, k, n, group_size, dtype, params_key(params))


def params_key(params: dict) -> tuple:
    """Params as a hashable key (sorted items): the configs' cache and the launch's memo."""
    return tuple(sorted(params.items()))


@functools.lru_cache(maxsize=4096)
def config_of(name: str, m: int, k: int, n: int, group_size: int, dtype: str,
              params: tuple) -> LaunchConfig:
    """``launch_config`` with the params as ``params_key`` gives them (the launcher's own key)."""
    v = VARIANTS[name]
    if not has_source(name):  # stock tiles anything, but through MLX's kernel, not ours
        raise ValueError(f"{name} has no CUDA source")
    p = dict(params)
    tiling.check(name, "cuda", m, k, n, dtype, group_size, p)
    return _CONFIGS[v.CUDA_LAYOUT](name, m, k, n, group_size, dtype, tiling.merged_params(v, p))
