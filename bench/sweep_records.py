"""The tiles the earlier cold sweeps of ``mma_weights_a`` ran (2026-12-03 to -07), one set a
run: each is the record of what a run in bench/results/h200/ (or h100/) timed, with its tree.

Kept apart from bench/sweep_points.py (the next set and the helpers that
turn a point into launch params), which names each of these in ``SETS`` so a run can be
repeated by name; nothing here changes once its run is committed.
"""

# (n_tile, k_groups, unroll, prefetch, stages[, l2_prefetch[, x_early]]): the register
# pipeline's tiles first, then the cp.async ring at 12-48 KiB of shared memory per block.
# Ring tiles are chosen so that every block is resident at once (one wave): blocks per SM are
# bounded by 228 KiB / (ring + 1 KiB) and by 64 warps, and N / n_tile blocks must fit 132 SMs.
# The first run (2026-12-03 18:32 UTC, bench/results/h200/cuda_verify_cold_sweep.*) timed these
# ring tiles at 28.6-43.4 us against 22.6-25.9 us for the register tiles, in batches.
POINTS_2026_12_03 = {
    "gate_up": [(32, 1, 1, 1, 0), (64, 2, 4, 0, 0), (32, 4, 2, 0, 0),
                (32, 1, 1, 0, 8), (32, 2, 1, 0, 4), (32, 2, 1, 0, 6), (32, 4, 1, 0, 2),
                (32, 4, 1, 0, 3), (64, 2, 1, 0, 4), (64, 4, 1, 0, 2), (16, 4, 1, 0, 4),
                (16, 2, 1, 0, 8), (16, 1, 1, 0, 8), (16, 4, 1, 0, 2), (16, 2, 1, 0, 4),
                (32, 2, 1, 0, 6, 256), (32, 4, 1, 0, 3, 256), (16, 2, 1, 0, 8, 256),
                (16, 4, 1, 0, 4, 256)],
    "down": [(64, 4, 2, 0, 0), (32, 4, 2, 1, 0), (32, 8, 1, 1, 0),
             (32, 4, 1, 0, 4), (32, 4, 1, 0, 3), (32, 8, 1, 0, 2), (32, 2, 1, 0, 8),
             (16, 8, 1, 0, 4), (16, 8, 1, 0, 3), (16, 8, 1, 0, 2), (16, 4, 1, 0, 8),
             (16, 4, 1, 0, 4), (16, 2, 1, 0, 8), (64, 4, 1, 0, 2),
             (16, 8, 1, 0, 4, 256), (16, 4, 1, 0, 8, 256), (32, 4, 1, 0, 4, 256)],
}
# The second set (2026-12-03 19:45 to 2026-12-04 15:25 UTC; the table's tiles were chosen from
# it): the best tiles of that run, activations loaded early (x_early) in both pipelines, and for
# down the tiles with at least 132 blocks (64-column tiles leave 52 of the 132 SMs idle when a
# launch runs alone).
POINTS_2026_12_04 = {
    "gate_up": [(32, 4, 2, 0, 0), (32, 4, 2, 0, 0, 128, 1), (32, 2, 2, 0, 0, 128, 1),
                (32, 4, 1, 1, 0, 128, 1), (64, 2, 4, 0, 0), (16, 8, 2, 0, 0),
                (16, 8, 2, 0, 0, 128, 1), (64, 4, 1, 0, 2), (64, 2, 1, 0, 2, 128, 1),
                (32, 4, 1, 0, 2, 128, 1), (32, 2, 1, 0, 4, 128, 1)],
    "down": [(64, 4, 2, 0, 0), (32, 4, 2, 0, 0), (32, 4, 2, 0, 0, 128, 1), (32, 8, 2, 0, 0),
             (32, 8, 2, 0, 0, 128, 1), (16, 8, 2, 0, 0), (16, 8, 2, 0, 0, 128, 1),
             (32, 8, 1, 1, 0, 128, 1), (32, 8, 1, 0, 2), (16, 8, 1, 0, 4),
             (32, 4, 1, 0, 2, 128, 1), (16, 8, 1, 0, 2, 128, 1)],
}
# Two more sets ran on 2026-12-04 and are kept only as records, with the code they needed
# (removed after: neither moved the time; docs/CUDA.md): at ebc2480, the shipped tiles with
# ``l2_ahead`` (an L2 prefetch of the weights D K steps ahead) and ``min_blocks`` (launch
# bounds), bench/results/h200/levers_*; at 8ed1b86, load cache policies (weights kept out of L1,
# activations in it), bench/results/h200/ldpolicy_*.
# A dict adds keys to the tuple's tile.
GU, DN = (32, 4, 2, 0, 0, 128, 1), (16, 8, 2, 0, 0, 128, 1)
# The first bulk run (2026-12-04 18:55 UTC, tree 63b15b5, bench/results/h200/bulk_small_*): the
# shipped tiles, ``min_blocks`` 5 on gate/up, and the bulk pipeline with one or two K steps a
# stage (64 or 128 B a bulk copy, a stage read into registers whole): every bulk tile bit for bit
# right and 1.9-3.6x slower than the shipped tiles, batched (M=8: gate/up 52.0-77.1 us against
# 27.7-28.1, down 60.1-102.5 against 32.3-36.3).
POINTS_2026_12_04_BULK = {
    "gate_up": [GU, (GU, {"min_blocks": 5}),
                ((32, 4, 1, 0, 6), {"bulk": 1}), ((32, 4, 2, 0, 3), {"bulk": 1}),
                ((32, 4, 1, 0, 4), {"bulk": 1}), ((32, 8, 1, 0, 4), {"bulk": 1}),
                ((16, 8, 1, 0, 6), {"bulk": 1})],
    "down": [DN, ((16, 8, 1, 0, 6), {"bulk": 1}), ((16, 8, 2, 0, 3), {"bulk": 1}),
             ((32, 8, 1, 0, 4), {"bulk": 1}), ((32, 4, 2, 0, 3), {"bulk": 1}),
             ((32, 8, 2, 0, 0, 128, 1))],
}
# The second bulk run (19:13 UTC, tree 91d8058, bench/results/h200/bulk_rows_*): larger copies
# (a stage of ``unroll`` K steps, one copy of 64 x unroll bytes a row, read back one step at a
# time) at grids of about one wave. Alone under ncu, gate/up bf16: 64 B copies 89.8 us, 128 B
# 37.3-55.4, 256 B 39.4-42.3, 320 B 33.2-45.4, against 25.9 for the shipped tile.
POINTS_2026_12_04_BULK_ROWS = {
    "gate_up": [GU, ((32, 4, 1, 0, 4), {"bulk": 1}),
                ((32, 2, 5, 0, 2), {"bulk": 1}), ((32, 2, 4, 0, 2), {"bulk": 1}),
                ((16, 2, 5, 0, 3), {"bulk": 1}), ((32, 2, 2, 0, 4), {"bulk": 1}),
                ((16, 2, 2, 0, 4), {"bulk": 1}), ((32, 4, 5, 0, 2), {"bulk": 1})],
    "down": [DN, ((32, 8, 2, 0, 0, 128, 1)), ((16, 8, 1, 0, 6), {"bulk": 1}),
             ((16, 4, 2, 0, 4), {"bulk": 1}), ((16, 2, 4, 0, 3), {"bulk": 1})],
}
# The third bulk run (19:18 UTC, tree bf14742, bench/results/h200/bulk_packed_*): ``bulk`` = 2,
# the weights packed so that a block's stage is ONE bulk copy (4-40 KB) instead of one a row,
# at grids of about one wave, beside the shipped tiles and the second run's best row-copy tile.
POINTS_2026_12_04_BULK_PACKED = {
    "gate_up": [GU, ((16, 2, 5, 0, 3), {"bulk": 1}),
                ((32, 4, 1, 0, 4), {"bulk": 2}), ((32, 4, 1, 0, 3), {"bulk": 2}),
                ((32, 2, 1, 0, 4), {"bulk": 2}), ((16, 4, 1, 0, 4), {"bulk": 2}),
                ((16, 4, 1, 0, 6), {"bulk": 2}), ((16, 2, 5, 0, 2), {"bulk": 2})],
    "down": [DN, ((16, 8, 1, 0, 4), {"bulk": 2}), ((16, 8, 1, 0, 6), {"bulk": 2}),
             ((16, 4, 1, 0, 6), {"bulk": 2}), ((16, 8, 2, 0, 3), {"bulk": 2})],
}
# The packed bulk pipeline's legs (2026-12-05 14:20 UTC, tree acb054e, bench/results/h200/
# bulk_legs_1414/): each tile whole (plain, denorm 2), loads alone and math alone at denorm 2,
# with the producer warp. Loads alone 14.1-14.9 us (70-74% of DRAM's peak), math alone at
# denorm 2 18.1-22.8, whole at denorm 2 23.7-28.1 on gate/up against the register tile's 22.3-22.5.
BULK_TILES_2026_12_05 = {
    "gate_up": [((32, 4, 1, 0, 4), {"bulk": 2}), ((32, 4, 1, 0, 3), {"bulk": 2}),
                ((32, 4, 2, 0, 2), {"bulk": 2}), ((16, 4, 1, 0, 4), {"bulk": 2})],
    "down": [((16, 8, 1, 0, 4), {"bulk": 2}), ((16, 8, 1, 0, 6), {"bulk": 2})]}


# bulk = 3's first H200 set (2026-12-05 16:16 UTC, bench/results/h200/bulk3_1616/): gate/up bf16
# M=8 at denorm 2 whole 20.4-21.2 us (3 stages) and 21.7-21.8 (4), both legs ~14.5 alone.
BULK3_TILES_2026_12_05 = {
    "gate_up": [((32, 4, 1, 0, 4), {"bulk": 3}), ((32, 4, 1, 0, 3), {"bulk": 3})],
    "down": [((16, 8, 1, 0, 4), {"bulk": 3}), ((16, 8, 1, 0, 6), {"bulk": 3})]}

# x through a cp.async ring of its own on bulk = 3 (H100, 2026-12-05 16:48 UTC,
# bench/results/h100/bulk3_xring_1648/): slower at both depths (whole 25.8-29.0 us at denorm 2
# against 23.5-24.5 without; its math alone 17.8-18.2 against 15.3-15.7); 2 stages with the
# leader refilling its own slot the fastest bulk tile there (23.5-23.8).
BULK3_XRING_TILES_2026_12_05 = {
    "gate_up": [((32, 4, 1, 0, 3), {"bulk": 3}), ((32, 4, 1, 0, 3, 128, 1), {"bulk": 3}),
                ((32, 4, 1, 0, 2, 128, 1), {"bulk": 3}), ((32, 4, 1, 0, 2), {"bulk": 3})],
    "down": [((16, 8, 1, 0, 4), {"bulk": 3}), ((16, 8, 1, 0, 6), {"bulk": 3})]}


# The warp-layout levers of 2026-12-07, each timed on an H100 and not kept. Their tile keys,
# shared with bench/sweep_points.py and sweep_records_wgmma.py: denorm 2, the group sums'
# variant, and it with late scales.
DENORM_2 = {"denorm": 2}
GSUMS = {"variant": "mma_group_sums"}
GSUMS_LATE = {**GSUMS, "late_scales": 1}


# Added 2026-12-07: mma_weights_a's ``col_warps`` W and ``cluster`` S, so that x is read once
# for W column tiles (L1 serves the W warps of a block, which read the same activations at
# once): the plain tiles read the 8 activation rows once per n_tile columns, 44 MB of L2 reads
# on gate/up and 89 MB on down at M=8 beside 50 MB of weights, and x's loads are what the
# warps waited on most (bench/results/h100/bulk3_stalls_1632). The K groups go to a cluster's
# blocks (one each at S = k_groups), so gate/up keeps 544 blocks of 4 warps and down takes
# 320-640 blocks of 2-8 warps; every point is its plain (n_tile, k_groups) tile bit for bit
# (the CUDA emulator), so the table's goldens hold. nvcc 13 for sm_90, bf16 M=8 at denorm 2:
# gate/up 32 x 4 u2 at W 4 S 4 96 registers (the plain tile 95), 16 x 4 u2 at W 4 S 4 63;
# down 16 x 8 u1 p1 at W 4 S 8 64, 32 x 8 u2 at W 4 S 8 66, 16 x 8 u2 at W 8 S 8 48. Beside
# the table's bf16 M=8 tiles (gate/up's register tile at denorm 2, down's group sums).
# ``x_share`` 1 (x through shared memory, loaded by the block's threads one K step ahead, one
# barrier a step: x read once a block whether L1 merges the warps' reads or not) on the first
# points of each shape (nvcc 13, bf16 M=8: gate/up 32 x 4 u2 98 registers, u1 p1 96; down
# 16 x 8 u1 p1 71, 32 x 8 u2 78).
# Timed on an H100 on 2026-12-07 (bench/results/h100/xshare_0830): alone, every point was slower
# than its plain tile, and the L2 bytes rose. A point with cluster > 1 runs only with
# MLX_USE_CUDA_GRAPHS=0 (kernels.cuda.refuse_cluster_under_graphs); with graphs on, its row
# records the refusal.
def _xs(pt: tuple, col_warps: int, cluster: int, x_share: int = 0) -> tuple:
    return (pt, {**DENORM_2, "col_warps": col_warps, "cluster": cluster,
                 **({"x_share": 1} if x_share else {})})


XSHARE_TILES_2026_12_07 = {"gate_up": [_xs((32, 4, 2, 0, 0), 4, 4), _xs((32, 4, 2, 0, 0), 4, 4, 1),
                      _xs((32, 4, 1, 1, 0), 4, 4, 1), _xs((32, 4, 2, 0, 0), 2, 4),
                      _xs((32, 4, 1, 1, 0), 4, 4), _xs((16, 4, 2, 0, 0), 4, 4),
                      _xs((16, 4, 2, 0, 0), 2, 1), ((32, 4, 2, 0, 0), DENORM_2)],
          "down": [_xs((16, 8, 1, 1, 0), 4, 8), _xs((16, 8, 1, 1, 0), 4, 8, 1),
                   _xs((32, 8, 2, 0, 0), 4, 8), _xs((32, 8, 2, 0, 0), 4, 8, 1),
                   _xs((32, 8, 2, 0, 0), 2, 8), _xs((16, 8, 2, 0, 0), 8, 8),
                   _xs((16, 8, 1, 0, 0), 4, 8), ((16, 8, 1, 1, 0), GSUMS_LATE)]}
# The same lever at M=16 (--point-m 16), where x is twice the bytes (gate/up ~89 MB of L2 reads
# at one read a 32-column tile) and M=16 costs 1.37-1.47x M=8: the table's bf16 M=16 tiles
# (gate/up 32 x 4 u1 x_early, down 32 x 8 u2 x_early) at W 4 beside themselves. nvcc 13, bf16:
# gate/up's at W 4 S 4 106 registers (plain 92; at denorm 2 102 against 95), 16 x 4 u2
# denorm 2 72 (66); down 32 x 8 u1 x_early denorm 2 at W 4 S 8 102 (95).
XSHARE_M16_TILES_2026_12_07 = {"gate_up": [_xs((32, 4, 1, 0, 0, 128, 1), 4, 4), _xs((32, 4, 1, 1, 0), 4, 4, 1),
                          _xs((16, 4, 2, 0, 0), 4, 4),
                          ((32, 4, 1, 0, 0, 128, 1), {"col_warps": 4, "cluster": 4}),
                          (32, 4, 1, 0, 0, 128, 1)],
              "down": [_xs((32, 8, 2, 0, 0, 128, 1), 4, 8), _xs((32, 8, 2, 0, 0), 4, 8, 1),
                       _xs((16, 8, 1, 1, 0), 4, 8),
                       (32, 8, 2, 0, 0, 128, 1)]}
# Added 2026-12-07 (11:15 UTC), after the H100's xcost run (bench/results/h100/xcost_1037):
# at M=16 the table's gate/up tile of M=8 (32 x 4 u2, denorm 2) took 49.0 us whole and 24.5
# without its activation loads (ablate 3), against 24.3 whole at M=8: x is what that tile pays
# at M=16. The same tile (and down's 32 x 8 u2) with x read once a block (W 4, S = k_groups,
# with and without x_share), beside itself; with XSHARE_M16 at --point-m 16, graphs off.
XSHARE_U2_M16_TILES_2026_12_07 = {
    "gate_up": [_xs((32, 4, 2, 0, 0), 4, 4), _xs((32, 4, 2, 0, 0), 4, 4, 1),
                ((32, 4, 2, 0, 0), DENORM_2)],
    "down": [_xs((32, 8, 2, 0, 0), 4, 8), ((32, 8, 2, 0, 0), DENORM_2)]}
# Added 2026-12-07: mma_weights_a's ``row_warps`` 2 at M=16 (--point-m 16): a warp per 8 rows,
# so each warp holds one accumulator set and issues one mma per dequantized fragment, as at M=8,
# and the two warps of a K group read the same weights at once. The table's bf16 M=16 tiles
# (gate/up 32 x 4 u1 x_early, down 32 x 8 u2 x_early) and the M=8 tiles' shapes, each beside
# its plain self. nvcc 13 for sm_90, bf16 M=16: gate/up 32 x 4 u1 x_early 68 registers (plain
# 92), 32 x 4 u2 92 (103), at denorm 2 96 (104); down 32 x 8 u2 x_early 68 (92), denorm 2 73
# (95); no spills. Timed on an H100 on 2026-12-07 (bench/results/h100/rowwarps_0907): every
# point bit for bit, every point slower alone than the table's tile (its warps dequantize the
# same weights twice).
def _rw(pt: tuple, extra: dict | None = None) -> tuple:
    return (pt, {**(extra or {}), "row_warps": 2})


ROWWARPS_M16_TILES_2026_12_07 = {"gate_up": [_rw((32, 4, 1, 0, 0, 128, 1)), _rw((32, 4, 2, 0, 0)),
                            _rw((32, 4, 2, 0, 0), DENORM_2), _rw((32, 4, 1, 1, 0)),
                            _rw((16, 4, 2, 0, 0)), _rw((32, 2, 2, 0, 0)),
                            (32, 4, 1, 0, 0, 128, 1), (32, 4, 2, 0, 0), ((32, 4, 2, 0, 0), DENORM_2)],
                "down": [_rw((32, 8, 2, 0, 0, 128, 1)), _rw((32, 8, 2, 0, 0)),
                         _rw((32, 8, 2, 0, 0, 128, 1), DENORM_2), _rw((16, 8, 1, 1, 0)),
                         _rw((32, 4, 2, 0, 0)), _rw((16, 8, 2, 0, 0, 128, 1)),
                         (32, 8, 2, 0, 0, 128, 1), (32, 8, 2, 0, 0), (16, 8, 1, 1, 0)]}


# The ways of bringing x and the bulk ring's refinements of 2026-12-07 (moved here from
# bench/sweep_points.py once each had run).
# x_early 3 (built 2026-12-07 11:40 UTC with no device; bit for bit on the CUDA emulator): each
# lane's activations through its warp's cp.async ring of 2 K steps, one step ahead, in the
# register pipeline. At M=16 the u2 denorm-2 tile took 49.0 us whole and 24.5 without x's loads
# (an H100, bench/results/h100/xcost_1037); x ahead in registers costs 150-166 registers
# (x_delivery_m16). nvcc 13, bf16 M=16: gate/up 32 x 4 u1 denorm 2 83 registers, u2 120 (min_blocks
# 5: 96, 12 bytes spilled), 40 KiB of shared memory (5 blocks an SM); k_groups 8 does not fit
# 48 KiB at M=16.
# Beside the table's M=16 tiles and their denorm-2 twins, timed at --point-m 16. Timed on an H100
# at 11:47 UTC (bench/results/h100/xring_m16_1147): bit for bit, slower than the table's tiles
# (gate/up u2 36 us against 31.7-32.3; its copies miss L1, L2 traffic 127-193 MB against 111).
XRING_M16 = {"gate_up": [((32, 4, 1, 0, 0, 128, 3), DENORM_2), ((32, 4, 2, 0, 0, 128, 3), DENORM_2),
                         ((32, 4, 2, 0, 0, 128, 3, 5), DENORM_2), ((32, 4, 2, 0, 0), DENORM_2),
                         ((32, 4, 1, 0, 0, 128, 1), DENORM_2), (32, 4, 1, 0, 0, 128, 1)],
             "down": [((32, 4, 1, 0, 0, 128, 3), DENORM_2), ((32, 4, 2, 0, 0, 128, 3), DENORM_2),
                      ((32, 4, 2, 0, 0), DENORM_2), ((32, 8, 2, 0, 0, 128, 1), DENORM_2),
                      (32, 8, 2, 0, 0, 128, 1)]}
# x_prefetch (2026-12-07 14:00 UTC): x's lines brought into L1 2 or 3 K steps ahead. On an H100
# (bench/results/h100/bulk_xcost_1314) the candidate bulk tile's x cost 1.8 us of 22.9-23.8
# (ablate 3: 21.1-22.0) with x already read about once an SM from L2 (87.3 MB against 77.1
# without x), down's bulk tile 3.4 us, gate/up's at M=16 10.5: the wait is each step's first
# read from L2, one step ahead. Each tile at 0 (its baseline in the same run), 2 and 3; the
# bulk tile at 3 also held to 5 blocks an SM (nvcc 13, bf16 M=8: 92, 96, 104 registers; 104
# fits 4). The table's M=8 and M=16 register tiles, and the chosen table's bulk tiles.
_XP = (0, 2, 3)
BULK_GU, BULK_DN = (32, 4, 1, 0, 2, 128, 0, 0, 3), (16, 8, 1, 0, 4, 128, 0, 0, 3)
XPREFETCH = {"gate_up": [*((BULK_GU, {**DENORM_2, "x_prefetch": d}) for d in _XP),
                         ((32, 4, 1, 0, 2, 128, 0, 5, 3), {**DENORM_2, "x_prefetch": 3}),
                         *(((32, 4, 2, 0, 0), {**DENORM_2, "x_prefetch": d}) for d in _XP),
                         *(((32, 4, 1, 0, 0, 128, 1), {"x_prefetch": d}) for d in _XP)],
             "down": [*((BULK_DN, {**DENORM_2, "x_prefetch": d}) for d in _XP),
                      *(((32, 8, 2, 0, 0, 128, 1), {"x_prefetch": d}) for d in _XP)]}
# lag (2026-12-07 14:10 UTC): which slot bulk 3's leader refills. 3 stages at the default lag 1
# run the ring no further ahead than 2 stages at lag 0 (one stage in flight while one is read),
# with more shared memory: they were slower (H200 20.4-21.2 us against 19.7; an H100 without
# x's loads 22.1-22.7 against 21.1-22.0, bench/results/h100/bulk_xcost_1314). lag 0 at 3 and 4
# stages keeps 2 and 3 stages in flight; lag 1 at 4 stages 2, without waiting on the slowest
# warp. gate/up's table tile first (2 stages); down's bulk tile beside the table's group sums.
_BULK_LAG = ((32, 4, 1, 0, 3, 128, 0, 0, 3), (32, 4, 1, 0, 4, 128, 0, 0, 3))
BULK_LAG = {"gate_up": [(BULK_GU, DENORM_2),
                        *((pt, {**DENORM_2, "lag": lag}) for pt in _BULK_LAG for lag in (0, 1))],
            "down": [((16, 8, 1, 1, 0), GSUMS_LATE), (BULK_DN, DENORM_2),
                     (BULK_DN, {**DENORM_2, "lag": 0}),
                     ((16, 8, 1, 0, 3, 128, 0, 0, 3), {**DENORM_2, "lag": 0})]}
# fp16 (2026-12-07 15:40 UTC): bulk 3 has been timed in bf16 alone. fp16's gate/up table tile
# (group sums, 32 x 4, x_early 1) is 4.4 us over the goal on the H200 against bf16's 2.1 with the
# bulk tile. fp16's denorm 2 needs |scale| < 2^-8, which the bench's gate/up weights exceed, so
# its bulk tiles at denorm 1 (|scale| < 2^-4) and hi_in_place (no limit), beside fp16's table
# tiles, at their shapes: each its own plain twin for the bit-exact check. Timed on an H100 at
# 16:06 UTC (bench/results/h100/xahead_f16_1604): gate/up's bulk tile at denorm 1 23.0-23.2 us
# alone against the table tile's 26.1-27.0, and ahead batched and in a chain; down's ahead
# alone, behind batched. Not yet on an H200 (bench/results/h200/RUNS.md's plan).
_F16 = ({"denorm": 1}, {"hi_in_place": 1})
BULK_F16 = {"gate_up": [((32, 4, 1, 0, 0, 128, 1), GSUMS),
                        *((BULK_GU, lever) for lever in _F16), BULK_GU],
            "down": [((16, 8, 1, 1, 0), GSUMS_LATE),
                     *((BULK_DN, {**lever, "lag": 0}) for lever in _F16),
                     ((16, 8, 1, 0, 3, 128, 0, 0, 3), {"denorm": 1, "lag": 0})]}
# x_ahead (2026-12-07 16:00 UTC): bulk 3's activations two K steps ahead in registers, not
# one (43% of its stall samples waited on the next step's x: ../h100/bulk3_stalls_1632). nvcc
# 13 for sm_90, bf16 M=8: gate/up 92 -> 112 registers (4 blocks an SM: 544 blocks in 1.03
# waves), held to 5 by min_blocks 5 at 96 with 56 bytes spilled; down 71 -> 88 (2 blocks of 256
# threads an SM), held to 3 by min_blocks 3. Each beside its tile without it. Timed on an H100
# at 16:05 UTC (bench/results/h100/xahead_f16_1604): slower everywhere (gate/up 29.0-30.0 us
# against 23.0-23.3; held to 5 blocks it spills, 28.2; down 32.4 against 27.9-28.1).
X_AHEAD = {"gate_up": [(BULK_GU, DENORM_2), (BULK_GU, {**DENORM_2, "x_ahead": 1}),
                       ((32, 4, 1, 0, 2, 128, 0, 5, 3), {**DENORM_2, "x_ahead": 1})],
           "down": [(BULK_DN, {**DENORM_2, "lag": 0}),
                    ((16, 8, 1, 0, 4, 128, 0, 3, 3), {**DENORM_2, "lag": 0, "x_ahead": 1})]}
