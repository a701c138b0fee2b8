"""The sets of ``mma_weights_a``'s warpgroup tiles (``wgmma``, 2026-12-07), one set a run, each
the record of what a run in bench/results/h100/ or h200/ timed: bit for bit everywhere, and
1.7x the table's M=8 tile at best (docs/CUDA.md, "Not met. The levers left").

Kept apart from bench/sweep_records.py (the register and bulk pipelines' runs), whose
constants these share; bench/sweep_points.py names each set in ``SETS``.
"""

from __future__ import annotations

from sweep_records import BULK_GU, DENORM_2, GSUMS_LATE

# wgmma (2026-12-07 17:30 UTC, no device yet; bit for bit on the CUDA emulator): each K group's
# 4 warps a warpgroup (col_warps 4: 64 columns a K group, n_tile 16 a warp), each word's mma
# pair one wgmma with x staged once a warpgroup in shared memory, so M=16 is one instruction as
# M=8 is. nvcc 13 for sm_90a, gate/up bf16 16 x 2 u2: 119 registers at M=8, 127 at M=16, 12 and
# 24 KiB of shared memory. gate/up has 272 warpgroups' worth of columns; down only 80, so its
# blocks hold 2 or 4 K groups (512 threads at most: 127 registers). Timed at M=8 and at M=16
# (--point-m 16) beside the table's tiles at each.
WG = {"col_warps": 4, "wgmma": 1}
WGMMA = {"gate_up": [((16, 1, 2, 0, 0), WG), ((16, 1, 4, 0, 0), WG), ((16, 2, 2, 0, 0), WG),
                     ((16, 2, 1, 1, 0), WG), ((16, 4, 1, 0, 0), WG),
                     ((16, 1, 1, 1, 0), WG), ((16, 1, 2, 1, 0), WG),
                     ((16, 1, 2, 0, 0), {**WG, **DENORM_2}),
                     (BULK_GU, DENORM_2), (32, 4, 1, 0, 0, 128, 1)],
         "down": [((16, 2, 2, 0, 0), WG), ((16, 4, 2, 0, 0), WG), ((16, 4, 1, 1, 0), WG),
                  ((16, 8, 1, 1, 0), GSUMS_LATE), (32, 8, 2, 0, 0, 128, 1)]}
# Timed on an H100 at 17:49 UTC (bench/results/h100/wgmma_1749): bit for bit against the
# register twins at M=8 and 16 (and fp16 at 16), and slow: gate/up's best, 16 x 1 u2 prefetch,
# 36.7-38.2 us at M=8 (the table's bulk tile 22.9-23.5); 16 x 1 u1 prefetch the flattest, 38.7 /
# 40.1 / 42.5 us at M = 1 / 8 / 16. 8 warps an SM (272 blocks of 4), 12.8% warps active: too
# few bytes in flight. The cp.async ring gives each warp stages - 1 K steps in flight without
# registers (nvcc: 80 at M=8, 89 at M=16 with 4 stages; 5-6 blocks an SM fit).
# With 2 K groups a block, min_blocks 3 holds 3 blocks an SM (nvcc: 63 and 71 registers at M=8
# and 16, no spill), so gate/up's 272 blocks run in one wave, not 1.03.
WGMMA_RING = {shape: [((16, 1, 1, 0, 4), WG), ((16, 1, 1, 0, 6), WG), ((16, 2, 1, 0, 2), WG),
                      ((16, 2, 1, 0, 2, 128, 0, 3), WG), ((16, 1, 1, 1, 0), WG),
                      *WGMMA[shape][-2:]]
              for shape in ("gate_up", "down")}
# Timed on the H200 at 20:03 UTC (bench/results/h200/wgmma_ring_2003): the ring was slower than
# the register tiles (37.6-49.7 us at M=8 against 36.9-38.6), so loads of w in flight are not
# what holds wgmma. Each step's x is loaded one step ahead and its latency met at the next
# step's barrier, on every tile, and each step waits for its own wgmma. Built 2026-12-07 21:00
# UTC, bit for bit on the CUDA emulator: x_ahead (x three steps ahead in registers) and wgmma 2
# (each step's wgmma left in flight through the next: three x slots, wait_group 1; register
# pipeline with two steps of code a loop), each beside its twin. Timed on an H100 at 22:28 UTC
# (bench/results/h100/wgmma_next_2228): bit for bit at M=8 and 16, and neither pays (gate/up
# 37.9-44.9 us at M=8 against the twin's 37.9-38.1 and the table's 22.2-22.9).
AHEAD = {**WG, "x_ahead": 1}
INFLIGHT = {**WG, "wgmma": 2}
WGMMA_NEXT = {"gate_up": [((16, 1, 1, 1, 0), WG), ((16, 1, 1, 1, 0), AHEAD),
                          ((16, 1, 1, 1, 0), INFLIGHT), ((16, 1, 1, 1, 0), {**AHEAD, "wgmma": 2}),
                          ((16, 2, 1, 0, 2), WG), ((16, 2, 1, 0, 2), AHEAD),
                          ((16, 1, 2, 0, 0), INFLIGHT),
                          ((16, 2, 1, 1, 0), {**AHEAD, "wgmma": 2}), *WGMMA["gate_up"][-2:]],
              "down": [((16, 2, 1, 0, 2), WG), ((16, 2, 1, 0, 2), AHEAD),
                       ((16, 4, 1, 1, 0), WG), ((16, 4, 1, 1, 0), AHEAD),
                       ((16, 2, 1, 1, 0), {**AHEAD, "wgmma": 2}), *WGMMA["down"][-2:]]}
# What x's staging costs a wgmma tile (no step loads or stages x, no barrier a step: ablate 3;
# the weights made up too: 4), beside the whole tile; a time, never a result (B stays zeros).
# The same call: with x unstaged the twin still takes 36.7-37.6 us at M=8, with the weights
# made up too 23.1-23.2: its weight loads hold it, not x.
WGMMA_ABLATE = {"gate_up": [((16, 1, 1, 1, 0), {**w, "ablate": a}) for w in (WG, INFLIGHT)
                            for a in (0, 3, 4)]}
