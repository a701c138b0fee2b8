"""The tiles the cold sweeps of ``mma_weights_a`` ran, one set a run, and the next set (which
also holds ``mma_group_sums``' tiles).

Data, kept apart from the sweep (bench/cuda_verify_cold_sweep.py) that runs it: each earlier
set is the record of what a run in bench/results/h200/ timed, with the tree it needed (the
ones no longer built on are in bench/sweep_records.py, the warpgroup tiles' in
bench/sweep_records_wgmma.py); the ``POINTS`` set is the next device
session's, in priority order. A point is a tuple (n_tile, k_groups, unroll, prefetch, stages[,
l2_prefetch[, x_early]]) or (tuple, {key: value}). The helpers turn a point into
the params a launch takes, and a sweep row back into its tile. The diagnose runs' tiles, built
from these sets and the selection table, are bench/diagnostic_tiles.py's.
"""

from __future__ import annotations

from sweep_records import (
    BULK3_TILES_2026_12_05,
    BULK3_XRING_TILES_2026_12_05,
    BULK_F16,
    BULK_LAG,
    BULK_TILES_2026_12_05,
    DENORM_2,
    DN,
    GSUMS,
    GU,
    POINTS_2026_12_03,
    POINTS_2026_12_04,
    POINTS_2026_12_04_BULK,
    POINTS_2026_12_04_BULK_PACKED,
    POINTS_2026_12_04_BULK_ROWS,
    ROWWARPS_M16_TILES_2026_12_07,
    X_AHEAD,
    XPREFETCH,
    XRING_M16,
    XSHARE_M16_TILES_2026_12_07,
    XSHARE_TILES_2026_12_07,
    XSHARE_U2_M16_TILES_2026_12_07,
)
from sweep_records_wgmma import WGMMA, WGMMA_ABLATE, WGMMA_NEXT, WGMMA_RING

from kernels.variants import VARIANTS

NAME = "mma_weights_a"
SWEPT = (NAME, "mma_group_sums")  # the variants a point may name
# A point of another variant than NAME names it in its dict ({"variant": ...}); it takes the
# tuple's keys that variant has (its register pipeline's: stages and bulk must be 0).
VARIANT = "variant"
# The next sweep, after the one-LOP3 change (2026-12-04 20:10 UTC, docs/CUDA.md): the shipped
# tiles; the register tiles ncu timed faster than them after it, at M=16 (gate/up (32, 4, 1, 0,
# x_early), down (32, 8, 1, 0, x_early)) and at M=8 (gate/up without x_early),
# bench/results/h200/lop3_ncu_cold.*, which only a sweep's bit-exact check lets into the table;
# and the cp.async ring again (loads in flight across a step's math without registers: the kernel
# now waits on its loads in half of its stall samples), last timed before the change; the next
# step's weights prefetched at unroll 1 (fewer registers than a prefetched batch); 64 columns a
# warp at unroll 1 (half the activation loads a weight: 89 MB of them from L2 at M=16 with 32);
# and the packed bulk pipeline, whose computing warps never wait on the weights and which tied the
# register pipeline before the change made their math shorter; and for fp16, ``hi_in_place``
# (22:00 UTC: one shift a weight word instead of three; nvcc for sm_90, gate/up's shipped
# tile: 292 instructions a K step against 324, 111 registers against 115) on the shipped tiles
# and the register tiles above (bf16 refuses it: those rows are errors, timed nowhere). First
# after the shipped tiles, the prefetched batch at unroll 1 without x_early (22:00 UTC: the
# batches now take turns instead of being copied, ~37 moves a K step fewer; 80 registers, 6
# blocks an SM on gate/up, loads always in flight: bench/results/sass_static.md); for down, 17
# K groups (136 K steps = 8 x 17): 8 steps a warp, 2 blocks of 17 warps an SM (34 warps against
# the shipped tile's 16-24) in 1.21 waves; its sums' order differs, so its goldens would too.
# For M=16 (its own sweep, --point-m 16), launch bounds that now fit without a spill: gate/up
# prefetched at unroll 1 held to 96 registers, 5 blocks an SM against 4, and unprefetched to 80,
# 6 blocks against 5 (nvcc for sm_90, bench/sass_static.py). At M=8 a bound lets ptxas take
# more registers, not fewer (prefetched: 92 against 80, 5 blocks an SM against 6), one more
# reason each M's tile is chosen at that M.
# Every tile here tiles at M=8 and 16. Run at M=8 and at --point-m 16; a point past the budget
# is skipped, so the order is the priority.
# And ``mma_group_sums`` (2026-12-05 00:00 UTC): stock's contract on the tensor cores, the LOP3
# alone a nibble pair and a group's scale and bias applied once (nvcc for sm_90, gate/up's
# shipped tile: 253 instructions a K step against 324, 130 registers against 115; at unroll 1
# unprefetched 76 registers, 6 blocks an SM). Its levers are checked against its own plain
# register pipeline; it is a new contract, so the table takes it only with new goldens.
# Ran at M=8 on 2026-12-05 02:03-02:10 UTC (tree 055800e; bench/results/h200/group_sums_*):
# every point bit-exact on the device, timed alone by ncu, group sums chosen for gate/up fp16
# and down. It is still the next set at --point-m 16 (not yet run at M=16).
HI = {"hi_in_place": 1}
LATE = {"late_scales": 1}  # its prefetched batch without scales: 84 registers, not 130 (gate/up)
# Added after that run (2026-12-05 03:30 UTC), for the SMs' balance: 544 blocks of 32 columns on
# 132 SMs leave 16 SMs a fifth block (the busiest SM 1.21x the mean's columns), 1088 of 16
# columns at most 9 against 8.24 (1.09x). With 2 K groups a block they run in one wave with the
# same 16.5 warps an SM as the shipped tile (nvcc for sm_90: 52-95 registers, 10-18 blocks an
# SM by registers); the tiles of 16 columns timed before had 8 K groups (256 threads, 4 blocks
# an SM: 1088 blocks in 3 waves). ncu's sm__cycles_active max over mean now says whether the
# balance is what they change.
BALANCED = [(16, 2, 2, 0, 0), (16, 2, 1, 0, 0, 128, 1), ((16, 2, 1, 0, 0, 128, 1), GSUMS),
            ((16, 2, 2, 0, 0, 128, 1), GSUMS)]
POINTS_2026_12_05 = {
    "gate_up": [GU, (GU, HI), (32, 4, 1, 1, 0), ((32, 4, 1, 1, 0), HI),
                ((32, 4, 1, 0, 0), GSUMS), ((32, 4, 1, 1, 0), {**GSUMS, **LATE}),
                ((32, 4, 1, 0, 0, 128, 1), GSUMS), (GU, GSUMS),
                ((32, 4, 1, 1, 0), GSUMS), ((16, 8, 2, 0, 0, 128, 1), GSUMS),
                ((16, 8, 1, 0, 0), GSUMS),
                (32, 4, 1, 1, 0, 128, 1), ((32, 4, 1, 1, 0, 128, 1), HI),
                ((32, 4, 1, 1, 0), {"min_blocks": 5}), ((32, 4, 1, 0, 0), {"min_blocks": 6}),
                (32, 4, 1, 0, 0, 128, 1), ((32, 4, 1, 0, 0, 128, 1), HI),
                (32, 4, 2, 0, 0), (32, 8, 1, 0, 0, 128, 1), (64, 4, 1, 0, 0, 128, 1),
                ((32, 4, 1, 0, 4), {"bulk": 2}), ((32, 4, 1, 0, 3), {"bulk": 2}),
                (32, 4, 1, 0, 3), (32, 4, 1, 0, 4), (32, 2, 1, 0, 3, 128, 1), (32, 8, 1, 0, 2)],
    "down": [DN, (DN, HI), (16, 8, 1, 1, 0), ((16, 8, 1, 1, 0), HI),
             ((16, 8, 1, 0, 0), GSUMS), ((16, 8, 1, 1, 0), {**GSUMS, **LATE}), (DN, GSUMS),
             ((16, 8, 1, 1, 0), GSUMS),
             ((16, 17, 1, 0, 0), GSUMS), ((32, 8, 1, 0, 0), GSUMS),
             (16, 8, 1, 1, 0, 128, 1), ((16, 8, 1, 1, 0, 128, 1), HI),
             (32, 8, 1, 0, 0, 128, 1), ((32, 8, 1, 0, 0, 128, 1), HI),
             (32, 8, 2, 0, 0, 128, 1), (32, 4, 2, 0, 0, 128, 1),
             ((16, 8, 1, 0, 4), {"bulk": 2}), (16, 17, 1, 0, 0), ((16, 17, 1, 0, 0), HI),
             (16, 8, 1, 0, 3), (16, 8, 1, 0, 4), (32, 8, 1, 0, 2), (32, 4, 1, 0, 4)],
}
# Added 2026-12-05 04:10 UTC: mma_group_sums' ``cluster`` lever, a column tile's K groups split
# among a thread-block cluster that adds their sums in order through distributed shared memory
# (bit for bit the unclustered tile, its register twin). down cannot take BALANCED's way (16
# columns is the mma's least): its shipped tile at S = 2 and 4 is 640 / 1280 blocks of 4 / 2
# warps (at most 5 / 10 an SM against 4.85 / 9.70); gate/up fp16's shipped tile at S = 2 and 4,
# 1088 / 2176 blocks of 2 / 1 warps. Checked and timed alone by h200.sh's ``diagnose``.
# Since 2026-12-07 these run only with MLX_USE_CUDA_GRAPHS=0 (as the xshare sets below).
CLUSTERED = {
    "gate_up": [((32, 4, 1, 0, 0, 128, 1), {**GSUMS, "cluster": 2}),
                ((32, 4, 1, 0, 0, 128, 1), {**GSUMS, "cluster": 4})],
    "down": [((16, 8, 1, 1, 0), {**GSUMS, **LATE, "cluster": 2}),
             ((16, 8, 1, 1, 0), {**GSUMS, **LATE, "cluster": 4})],
}
# Added 2026-12-05 06:00 UTC: mma_weights_a's ``denorm`` lever, q taken as a subnormal of the
# activation type against the scale times 2^133 (bf16) or 2^20 (fp16), so no magic is
# subtracted: the HADD2 of every nibble pair goes (nvcc for sm_90, gate/up's shipped tile: 527
# instructions a batch of two K steps against 648 in bf16, against 585 with fp16's
# hi_in_place), and the FMA forms the same exact product, so the output is the plain pipeline's
# bit for bit. On the register tiles the table ships or timed closest to them, at M=8 and 16,
# and on down beside the group-sums tiles it ships there. The scaled scale pair is made where
# the scale is loaded, so a batch holds it alone: nvcc gives gate/up's shipped M=8 tile 80
# registers with denorm, as without (94 when it was made at each step's math;
# bench/results/sass_static_denorm.md).
# Added 2026-12-05 08:40 UTC: ``denorm`` 2, each nibble pair where it lies after one shift of 8
# (bits 0-3 and 4-7: q x 2^-133 and q x 2^-129 in bf16), so one shift a word, not three: the
# shipped gate/up tile 238 instructions a K step against 265 at denorm 1 and 326 plain, 95
# registers against 80 (the odd pairs' scale: 5 blocks an SM, and gate/up's 544 blocks need
# 4.12). fp16 scales it by 2^24, so its scales must be under 2^-8: the bench's (0.0085 gate/up,
# 0.0046 down) are not, so its fp16 points are refused there (not ok in the sweep, skipped by
# ncu) rather than timed as their plain selves. On the two tiles closest to the table's M=8
# tiles and on gate/up's M=16 tile (32, 4, 1, 0, x_early: 372 instructions a K step plain, 311 at
# denorm 1, 283 at 2, 92 to 95 registers: 5 blocks an SM throughout).
DENORM_ON = {"denorm": 1}  # DENORM_2 is the records' (sweep_records)
# The ablate runs also time mma_weights_a's math alone with each denorm mode: the same loads
# and mma under fewer instructions (gate/up's tile: 326, 265 and 238 a K step), so whether the
# math alone follows its instruction count (issue-bound) or not (latency) is measured, not
# inferred.
DENORM_MODES = (1, 2)
DENORMED = {
    "gate_up": [(GU, DENORM_ON), (GU, DENORM_2), ((32, 4, 2, 0, 0), DENORM_ON),
                ((32, 4, 2, 0, 0), DENORM_2), ((32, 4, 1, 0, 0, 128, 1), DENORM_ON),
                ((32, 4, 1, 0, 0, 128, 1), DENORM_2),
                ((32, 4, 1, 1, 0), DENORM_ON), ((16, 2, 2, 0, 0), DENORM_ON)],
    "down": [(DN, DENORM_ON), (DN, DENORM_2), ((32, 8, 2, 0, 0, 128, 1), DENORM_ON),
             ((32, 8, 2, 0, 0, 128, 1), DENORM_2), ((16, 8, 1, 1, 0), DENORM_ON),
             ((32, 4, 2, 0, 0, 128, 1), DENORM_ON), ((16, 17, 1, 0, 0), DENORM_ON)],
}
# The packed bulk pipeline's legs (its 2026-12-05 14:20 UTC run, with a producer warp:
# sweep_records.BULK_TILES_2026_12_05) found its loads alone at a bare read's rate (14.1-14.6 us
# on gate/up) and its math alone slower than the register tile's (18.1-21.7 us at denorm 2,
# against 16.1-16.2), with the SMs' work 1.5-1.8x apart: its fifth warp's registers let 4
# blocks an SM hold 544 blocks, so 16 ran in a second wave. ``bulk`` = 3 has no producer warp
# (warp 0's lane 0 issues each stage's one copy): 5 blocks an SM, one wave (nvcc for sm_90:
# 88-94 registers at 128 threads). Each tile runs whole (plain, denorm 2), loads alone and math
# alone at denorm 2.
# bulk = 3 on the H200 (16:16 UTC, sweep_records.BULK3_TILES_2026_12_05): whole 20.4-21.2 us
# at denorm 2 with both legs ~14.5 alone. On an H100 (16:48, BULK3_XRING_TILES_2026_12_05) x
# through a ring of its own was slower, and 2 stages, the leader refilling a stage's own slot,
# the fastest bulk tile (23.5-23.8 against 24.3-24.5 at 3 stages): the H200 has not timed it,
# nor 2 stages of 2 steps each (16 KiB copies; nvcc for sm_90: 96 registers, 43 KiB, 5 blocks
# an SM).
BULK_TILES = {"gate_up": [((32, 4, 1, 0, 3), {"bulk": 3}), ((32, 4, 1, 0, 2), {"bulk": 3}),
                          ((32, 4, 2, 0, 2), {"bulk": 3})],
              "down": BULK3_TILES_2026_12_05["down"]}
# the same tiles' whole at denorm 2, the set whose bit-exactness the cold sweep checks
BULK_DENORM = {shape: [(pt, {**extra, **DENORM_2}) for pt, extra in pts]
               for shape, pts in BULK_TILES.items()}
# The bulk tiles beside the table's own bf16 M=8 tile (gate/up's register tile at denorm 2,
# down's group sums), timed in one run the same ways (a timed sweep with --chain and
# --final-top 4): cold batched eager, compiled with the layout made at load, and in a chain.
# The 16:22 bench had bulk 3 at 26.0 us in a chain against 23.7 for the table's tile (another
# run, on a slower host), though it was faster alone under ncu (20.8 against 22.2).
BULK_VS_TABLE = {"gate_up": BULK_DENORM["gate_up"] + [((32, 4, 2, 0, 0), DENORM_2)],
                 "down": BULK_DENORM["down"][:1] + [((16, 8, 1, 1, 0), {**GSUMS, **LATE})]}
# x copied with each stage of bulk 3's ring (``x_early`` 2, built 2026-12-05 with no device;
# bit for bit on the CUDA emulator): 43% of bulk 3's stall samples on an H100 waited on x's
# loads from L2 (bench/results/h100/bulk3_stalls_1632). nvcc for sm_90, gate/up, 2 stages: 71
# registers against 92 at M=8, 81 against 132 at M=16; 43 KiB a block at M=8 (5 an SM). Beside
# the candidate table's bulk tile and the table's tiles (down's 160-320 blocks leave most SMs
# one or two: there a block's shared memory costs little).
BULK_X = {"gate_up": [((32, 4, 1, 0, 2, 128, 2), {"bulk": 3, **DENORM_2}),
                      ((32, 4, 1, 0, 3, 128, 2), {"bulk": 3, **DENORM_2}),
                      *BULK_VS_TABLE["gate_up"][1:2], *BULK_VS_TABLE["gate_up"][3:]],
          "down": [((32, 4, 1, 0, 2, 128, 2), {"bulk": 3, **DENORM_2}),
                   ((16, 8, 1, 0, 2, 128, 2), {"bulk": 3, **DENORM_2}),
                   *BULK_VS_TABLE["down"][1:]]}
# gate/up at M=16, each tile timed there (--point-m 16): bulk 3 with 2 stages (H100 23:04, alone
# 40.7 us against 26.1 at M=8) takes 132 registers there, so 3 blocks an SM and 544 blocks in
# 1.4 waves. min_blocks 4 caps it at 128 (nvcc 13: 4 bytes spilled; 1.03 waves), 5 at 96 (220
# bytes spilled; one wave); n_tile 16 takes 106 (4 an SM, 1088 shorter blocks). Beside the
# table's M=16 tile (32 x 4, unroll 1, x_early 1: 92 registers, 5 an SM) and it at denorm 2.
BULK_M16 = {"gate_up": [((32, 4, 1, 0, 2), {"bulk": 3, **DENORM_2}),
                        ((32, 4, 1, 0, 2, 128, 0, 4), {"bulk": 3, **DENORM_2}),
                        ((32, 4, 1, 0, 2, 128, 0, 5), {"bulk": 3, **DENORM_2}),
                        ((16, 4, 1, 0, 2), {"bulk": 3, **DENORM_2}),
                        (32, 4, 1, 0, 0, 128, 1),
                        ((32, 4, 1, 0, 0, 128, 1), DENORM_2)]}
# M=16's registers (2026-12-07 22:55 UTC). Without x's loads the bulk tile runs M=16 in 25.9 us
# against its 22.1 at M=8 (an H100, bench/results/h100/xl1_2231): 1.17x, what is left being
# its 132-135 registers (3 blocks an SM against 5 at M=8), most of them the step's activation
# fragments (32 a lane at M=16 whatever n_tile). The bulk tiles that fit more warps an SM at
# M=16 (nvcc 13, bf16, gate/up): 16 x 2 takes 106 registers, 64 threads a block, 9 blocks an SM,
# 1088 blocks in 0.92 waves (18 warps an SM, the M=8 tile's 20); 16 x 4 106 (4 an SM, 2.06
# waves), held to 5 at 96 (36 bytes spilled); 32 x 4 held to 4 at 128 (4 spilled, 1.03 waves);
# down: 16 x 4 at 2 and 3 stages (320 blocks, 4 an SM: one wave), 16 x 8 held to 3 at 80 (136
# spilled). Beside the bulk tile and the table's M=16 tiles; timed at M=16 (and M=8 beside).
_DN2B = {"bulk": 3, **DENORM_2}
BULK_M16_REGS = {"gate_up": [((32, 4, 1, 0, 2), _DN2B), ((16, 2, 1, 0, 2), _DN2B),
                             ((16, 4, 1, 0, 2), _DN2B), ((16, 4, 1, 0, 2, 128, 0, 5), _DN2B),
                             ((32, 4, 1, 0, 2, 128, 0, 4), _DN2B), (32, 4, 1, 0, 0, 128, 1)],
                 "down": [((16, 4, 1, 0, 2), _DN2B), ((16, 4, 1, 0, 3), _DN2B),
                          ((16, 8, 1, 0, 2, 128, 0, 3), _DN2B), ((16, 8, 1, 0, 2), _DN2B),
                          (32, 8, 2, 0, 0, 128, 1)]}
# Their floors without x's loads (ablate 3: a time, not a result), the widest and narrowest.
BULK_M16_FLOORS = {"gate_up": [(pt, {**extra, "ablate": 3})
                               for pt, extra in BULK_M16_REGS["gate_up"][:3]],
                   "down": [(pt, {**extra, "ablate": 3}) for pt, extra in BULK_M16_REGS["down"][:1]]}
# x_rot (2026-12-08 01:10 UTC): the bulk tiles with the next step's x loaded word by word into
# the registers this step's word leaves (one step's x in registers, not two). nvcc 13, bf16,
# M=16: gate/up's bulk tile 132 -> 126 registers (4 blocks an SM, not 3), held to 4 blocks 128
# with no spill (4 bytes without x_rot); 16 x 4 106 -> 95 (5 blocks an SM, the M=8 tile's
# count), held to 6 blocks 80 with none (136); 16 x 2 106 -> 95 (10 blocks of 2 warps); down's
# 16 x 8 106 -> 95, held to 3 blocks 80 with none (136); at M=8 the bulk tile goes 92 -> 81.
# Last, 64 x 4 (half the x loads a weight: 188 -> 154, 3 blocks an SM, 272 blocks in one wave).
# Beside the bulk tile without it and the table's M=16 tiles, timed at M = 8 and 16.
_XR = {**_DN2B, "x_rot": 1}
BULK_M16_XROT = {"gate_up": [((32, 4, 1, 0, 2), _DN2B), ((32, 4, 1, 0, 2), _XR),
                             ((32, 4, 1, 0, 2, 128, 0, 4), _XR), ((16, 4, 1, 0, 2), _XR),
                             ((16, 4, 1, 0, 2, 128, 0, 6), _XR), ((16, 2, 1, 0, 2), _XR),
                             (32, 4, 1, 0, 0, 128, 1), ((64, 4, 1, 0, 2), _XR)],
                 "down": [((16, 8, 1, 0, 2, 128, 0, 3), _DN2B), ((16, 8, 1, 0, 2, 128, 0, 3), _XR),
                          ((16, 8, 1, 0, 2), _XR), ((32, 4, 1, 0, 2, 128, 0, 4), _XR),
                          (32, 8, 2, 0, 0, 128, 1)]}
POINTS = {"gate_up": POINTS_2026_12_05["gate_up"][:2] + BALANCED
                     + POINTS_2026_12_05["gate_up"][2:],
          "down": POINTS_2026_12_05["down"]}
KEYS = ("n_tile", "k_groups", "unroll", "prefetch", "stages", "l2_prefetch", "x_early",
        "min_blocks", "bulk")
KEY_DEFAULTS = (128, 0, 0, 0)  # l2_prefetch, x_early, min_blocks, bulk when a tuple stops short
# the tables' tile columns: the variant, then every key a swept variant takes
COLUMNS = (VARIANT, *dict.fromkeys(key for name in SWEPT for key in VARIANTS[name].DEFAULTS))


def as_params(pt) -> dict:
    """A point: a tuple in KEYS order (the later keys default), or (tuple, {key: value})."""
    extra = {}
    if len(pt) == 2 and isinstance(pt[1], dict):
        pt, extra = pt
    p = {**dict(zip(KEYS, (*pt, *KEY_DEFAULTS[len(pt) - 5:])[:len(KEYS)], strict=True)),
         **extra}
    name = p.get(VARIANT, NAME)
    if name == NAME:
        return p
    taken = VARIANTS[name].DEFAULTS
    base = VARIANTS[NAME].DEFAULTS  # a key it lacks must be at the tuple's plain value
    dropped = {key: v for key, v in p.items()
               if key not in taken and key != VARIANT and v != base[key]}
    if dropped:
        raise ValueError(f"{name} takes no {dropped}: point {pt}")
    return {key: v for key, v in p.items() if key in taken or key == VARIANT}


def candidate_timed(candidate: dict) -> dict:
    """A cold sweep's final candidate ({"us": eager, "timed": {...}, **its tile}): its compiled
    and chained times, under ``timed``, or beside its tile's keys in the H100 sweeps of
    2026-12-05 18:27-18:30 (bench/results/h100/layouts_1826), made before ``timed`` held them."""
    return candidate.get("timed") or {k: candidate[k] for k in ("compiled_us", "alone_us")
                                      if k in candidate}


def candidate_tile(candidate: dict) -> dict:
    """A final candidate's tile: its keys less its times (both formats, ``candidate_timed``)."""
    return {k: v for k, v in candidate.items()
            if k not in ("us", "timed", "compiled_us", "alone_us")}


def launch_of(params: dict) -> tuple[str, dict]:
    """(variant, its params) of a point's params, as ``cuda.launch`` takes them."""
    p = dict(params)
    return p.pop(VARIANT, NAME), p


def variant_of(kernel: str, names=SWEPT) -> str | None:
    """The variant among ``names`` whose kernel ``kernel`` is (ncu's name for a launch: MLX
    calls it custom_kernel_dflash2_<variant>_<template>), the longest where names nest. A
    launch label of the table's own tile (``custom {params}``) names only the params."""
    named = [n for n in names if f"dflash2_{n}_" in kernel]
    return max(named, key=len) if named else None


def point_of(name: str, params: dict) -> dict:
    """``launch_of``'s inverse: a variant's params as a point's (the variant named unless it is
    NAME's)."""
    return dict(params) if name == NAME else {VARIANT: name, **params}


def launch(x, qw, params: dict):
    """``cuda.launch`` of a point (imported here: the sweep's CPU helpers need no MLX CUDA)."""
    from kernels import cuda
    name, p = launch_of(params)
    return cuda.launch(name, x, qw, p)


def tile_of(row: dict) -> dict:
    """A point's row as the tile it timed: every key the variant takes, none of the row's
    timings (a fixed list of keys once dropped a lever added later: ``hi_in_place``)."""
    return {key: row[key] for key in COLUMNS if key in row}


def register_twin(params: dict) -> dict:
    """The plain register pipeline (one K step a batch, every other key at its default) of the
    point's variant at ``params``' (n_tile, k_groups): every pipeline and lever issues its mma
    sequence, so each point must equal it bit for bit. Built from the variant's defaults, so
    that a key added later cannot leak its lever into the reference."""
    name, _ = launch_of(params)
    twin = {**VARIANTS[name].DEFAULTS, "n_tile": params["n_tile"],
            "k_groups": params["k_groups"], "unroll": 1}
    return point_of(name, twin)


def selected(points, no_ring: bool = False, no_bulk: bool = False) -> list:
    """``points`` without the cp.async ring's tiles (``no_ring``; the bulk pipeline also has
    ``stages`` but is not the ring) or the bulk pipeline's (``no_bulk``): the sweep and the ncu
    run (cuda_verify_ncu.py --points) drop the same ones."""
    def keep(pt) -> bool:
        p = as_params(pt)
        stages, bulk = p.get("stages", 0), p.get("bulk", 0)  # a variant may have neither
        return not ((no_ring and stages and not bulk) or (no_bulk and bulk))
    return [pt for pt in points if keep(pt)]


# Two tiles a pipeline, smoke-tested in a process of their own before a sweep (h200.sh).
RING_SMOKE = ((16, 2, 1, 0, 8), (32, 4, 1, 0, 3), (32, 4, 1, 0, 2, 128, 1),
              (32, 4, 2, 0, 0, 128, 1))
BULK_SMOKE = (((16, 2, 5, 0, 3), {"bulk": 1}), ((32, 4, 1, 0, 4), {"bulk": 2}),
              ((16, 8, 1, 0, 6), {"bulk": 2}), ((16, 2, 5, 0, 2), {"bulk": 2}))


# Every set by the name ``--points`` takes (the sweep and the ncu run): the next, or a run's.
SETS = {"next": POINTS, "cluster": CLUSTERED, "denorm": DENORMED, "bulk-denorm": BULK_DENORM,
        "bulk-vs-table": BULK_VS_TABLE, "bulk-x": BULK_X, "bulk-m16": BULK_M16,
        "bulk-m16-regs": BULK_M16_REGS, "bulk-m16-floors": BULK_M16_FLOORS,
        "bulk-m16-xrot": BULK_M16_XROT,
        "xshare": XSHARE_TILES_2026_12_07, "xshare-m16": XSHARE_M16_TILES_2026_12_07,
        "xshare-u2-m16": XSHARE_U2_M16_TILES_2026_12_07, "xring-m16": XRING_M16,
        "x-prefetch": XPREFETCH, "bulk-lag": BULK_LAG, "bulk-f16": BULK_F16, "x-ahead": X_AHEAD,
        "wgmma": WGMMA, "wgmma-ring": WGMMA_RING, "wgmma-next": WGMMA_NEXT,
        "wgmma-ablate": WGMMA_ABLATE,
        "rowwarps-m16": ROWWARPS_M16_TILES_2026_12_07,
        "2026-12-05-bulk": BULK_TILES_2026_12_05, "2026-12-05-bulk3": BULK3_TILES_2026_12_05,
        "2026-12-05-bulk3-xring": BULK3_XRING_TILES_2026_12_05,
        "2026-12-04-bulk-packed": POINTS_2026_12_04_BULK_PACKED,
        "2026-12-04-bulk-rows": POINTS_2026_12_04_BULK_ROWS,
        "2026-12-04-bulk": POINTS_2026_12_04_BULK, "2026-12-04": POINTS_2026_12_04,
        "2026-12-03": POINTS_2026_12_03}


def with_plain_twins(points: list) -> list:
    """Each denorm point beside its plain self (the same run's baseline); a plain self once
    where two modes' points share it."""
    out = []
    for p in points:
        for pt in (p, (p[0], {**p[1], "denorm": 0})):
            if pt not in out:
                out.append(pt)
    return out
