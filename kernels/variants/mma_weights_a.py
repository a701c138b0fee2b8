"""mma_weights_a: tensor-core verify kernel with the weights as the 16-row A operand (sm_80+).

Contract: each weight is dequantized by one fused multiply-add in the activation dtype,
``round_T(scale * q + bias)`` with a single rounding (``__hfma2``); activations as given (bf16
or fp16); products on ``mma.sync.m16n8k16`` tiles with float32 accumulation, sequentially along
K inside each of ``k_groups`` contiguous K groups (one warp each), group sums added in order;
one rounding to the activation dtype. The portable form rounds ``scale * q + bias`` from its
exact value (float64, then round-to-odd float32, then nearest-even ``T``), which is the single
rounding the hardware does whenever the two terms lie within 38 binades of each other.

Why a second tensor-core kernel: ``mma_verify`` puts the M activation rows on the 16-row side
of the tile, so at M=8 half of every mma multiplies zeros, and it dequantizes in float32 with
an int-to-float conversion and a float-to-half pack per weight (quarter-rate instructions on an
H200). Here Y^T = W^T X^T: 16 output columns fill the A side and the M <= 8 rows the 8-wide B
side (M <= 16 takes two B tiles sharing one dequantized A). Two nibbles become one half2 with a
LOP3 against a magic exponent (1024 + q in fp16, 128 + q in bf16, both exact), one HSUB2 and
one HFMA2: 1.5 full-rate instructions per weight. Loads of ``unroll`` K steps are issued before
any is used, for enough bytes in flight to approach the bandwidth bound.

``stages`` >= 2 replaces that register pipeline with a per-warp ring of ``stages`` K steps in
shared memory filled by ``cp.async`` (16-byte weight chunks, the 4-byte words holding the
scale and bias; ``l2_prefetch`` is the L2 fetch size hint of the weight copies, 128 or 256
bytes of the row): ``stages - 1`` steps of loads are in flight while a step is computed, and they
hold no registers, so a warp keeps several KiB in flight at full occupancy. Each lane reads
back only the chunks it copied, so the ring needs no barrier. The math, and so the contract,
is the same as with ``stages`` = 0. ``x_early`` = 1 loads each K step's activations with its
weights (into the register batch, or through the ring) instead of just before the step's math.
``x_early`` = 3 (register pipeline, ``stages`` = 0) copies them with ``cp.async`` into the
warp's own ring of 2 K steps in shared memory, one step ahead, and reads them back at the step:
ahead of the math like 1, without 1's registers (at M=16, on an H100, the activations' loads
were what the u2 tile paid, and holding them early in registers cost 150-166 registers:
bench/results/h100/xcost_1037). Its ring and the partial sums must fit 48 KiB.

``min_blocks`` = B > 0 gives the kernel ``__launch_bounds__(32 * k_groups, B)``: ptxas caps its
registers so B blocks fit an SM (gate/up at M=8: 106 registers allow 4 blocks, so its 544
blocks need 1.03 waves; capped at 96 registers, 5 blocks hold them in one). It leaves the
arithmetic, and so the output bit for bit, as it is.

``bulk`` = 1 (with ``stages`` >= 2; sm_90) splits waiting from computing: one more warp, the
producer, fills a ring of ``stages`` stages of ``unroll`` K steps of every K group's rows in
dynamic shared memory with bulk copies (the TMA's 1-D form: one instruction a row and stage),
and the block's scales and biases once, each completing on an mbarrier; the K groups' warps
wait on the stage's barrier, read the ring, release the slot and compute, in the register
pipeline's order, so the output is that pipeline's bit for bit. The levers measured on
2026-12-04 (docs/CUDA.md) left a warp that both waits on its loads and computes as what
limits gate/up and down; this takes the wait off the computing warps without registers.
Measured the same day: right bit for bit on the H200, and no faster (docs/CUDA.md).

``bulk`` = 2 is the same pipeline on weights packed once per weights (``pack_weights``, kept
with them: a second copy of w) so that each stage of a block is one contiguous bulk copy
instead of one a row: the first two bulk runs found the time falling as the copies grew
(alone under ncu, gate/up M=8: 89.8 us at 64 B a copy, 33.2-45.4 at 320 B, against 25.9 for
the register pipeline); packed, gate/up at M=8 ties the register pipeline alone (25.8-26.5
against 25.6-26.5 us) and down and M=16 are slower, so no table entry selects it.

``bulk`` = 3 is the packed pipeline with no producer warp: warp 0's lane 0 issues each stage's
copy, refilling the slot of the stage before (with 2 stages, its own stage's slot once every
warp has released it). With ``x_early`` the bulk pipeline copies each K step's activations by
cp.async into a ring of 2 steps a lane (16 KiB a block more) instead of loading them into
registers inside the step before: measured slower on an H100 (2026-12-05 16:48 UTC,
bench/results/h100/bulk3_xring_1648: its math alone 17.8-18.2 us against 15.3-15.7), kept as a
lever a sweep may name. ``x_early`` = 2 (bulk 3 only) copies x with each stage instead: the
stage's rows of x (a K group's row of M, unroll x 256 B, one bulk copy each, issued by warp
0's lanes once its lane 0 has found the slot free) land after its weights on the same
mbarrier, so the computing warps read x from shared memory and hold no next step's x in
registers (nvcc for sm_90, gate/up at 2 stages: 71 registers against 92 at M=8, 81 against 132
at M=16; the ring grows by the stages' x: 43 KiB a block at M=8, 5 an SM). Built 2026-12-05
with no device lent: bit for bit on the CUDA emulator, untimed.

``hi_in_place`` = 1 (fp16 only) takes the high nibble of each byte where it lies (nibbles 1 and
3 of each 16-bit half: bits 4-7, and 12-15 moved there by one shift of 8) into the mantissa of
64, whose last place is 1/16, so 64 + q exactly: one shift a weight word instead of three, the
same q into the same FMA, so the output is the plain pipeline's bit for bit. nvcc for sm_90,
gate/up's shipped tile: 585 instructions a batch of two K steps against 648 (2026-12-04 22:00
UTC; not yet timed on a device). bf16's 7-bit mantissa holds a nibble at bits 0-3 only, so bf16
refuses it.

``denorm`` = 1 takes each nibble pair as two subnormals of the activation type, q x 2^-133 in
bf16 (the nibble at bits 0-3, exponent field 0) or q x 2^-20 in fp16 (at bits 4-7), against
the scale times 2^133 or 2^20 (two exact multiplications by powers of two a row and K step):
the FMA's exact product is scale * q, as in the plain path, and it rounds scale * q + bias
once, as there, so the output is the plain path's bit for bit, with no magic to subtract (the
HADD2 of every pair goes: nvcc for sm_90, gate/up's shipped tile, 527 instructions a batch of
two K steps against 648 in bf16 and 585 with fp16's hi_in_place). The scaled scale must be
finite: |scale| < 2^-5 (bf16) or 2^-4 (fp16), a property of the weights, not of the tile, so
``kernels.cuda`` checks it once per weights where it captures the launch and runs the plain
path on weights that fail it or that it cannot see (a caller's traced weights, unless the
caller gives their largest scale: ``QWeights.scales_max_abs``).

``denorm`` = 2 takes each pair where it lies after at most one shift of 8: pairs (0, 4) and
(2, 6) at bits 0-3 of each half, (1, 5) and (3, 7) at bits 4-7. Below 2^8 (bf16) or 2^11 (fp16)
a bit pattern's value is the pattern times the least subnormal, across the first normal
binade too, so a nibble at bits 4-7 is q x 2^-129 (bf16) or q x 2^-20 (fp16), exactly, and the
odd pairs take the scale times 2^129 or 2^20 (the even pairs' scaled scale times 2^-4, exact):
one shift a word instead of three (nvcc for sm_90, gate/up's shipped tile: 238 instructions a
K step against 265 at ``denorm`` 1, with 95 registers against 80: the odd pairs' scales).
fp16's even pairs are q x 2^-24, so their scale is times 2^24, finite only below 2^-8: a limit
most weights' fp16 scales exceed (the bench's: 0.0085 on gate/up), where the launch falls back
to the plain path as above. bf16's limit stays 2^-5.

``col_warps`` = W > 1 (register pipeline) puts W column tiles side by side in a block over the
same K groups: warp w takes tile w % W of the block's W x n_tile columns and K group w / W. Each
K step's activations are then read by W warps at once, so L1 serves all but the first read (the
plain tile reads the 8 activation rows once per n_tile columns: on gate/up at M=8, 44 MB from L2
beside the 50 MB of weights, and x's loads were where bulk 3's warps waited most:
bench/results/h100/bulk3_stalls_1632). ``cluster`` = S > 1 (sm_90) splits the K groups among a
thread-block cluster of S blocks (``__cluster_dims__``) that add their sums in order through
distributed shared memory, as mma_group_sums' ``cluster`` does, so a block can hold one K group
of W tiles and the grid keeps its blocks. Every warp does the plain (n_tile, k_groups) tile's
warp's work, and the sums are added in the same order, so the output is that tile's bit for
bit. ``x_share`` = 1 (one K group a block: ``cluster`` = ``k_groups``) does not leave the
sharing to L1: the block's threads load each K step's activations together, 16 bytes a thread,
one step ahead into registers, and at the step store them to shared memory (two slots), meet at
the block's barrier and read their own from there: x read once a block from L2, its latency
under the step before's math, the same values into the same mma, so the output is again the
plain tile's bit for bit.

``row_warps`` = 2 (register pipeline, M = 16 exactly) gives each row tile of 8 activation rows
its own warp: warp w takes rows 8 (w % 2) to + 8 of the block's column tile and K group w / 2.
The plain M=16 tile issues two mma per dequantized weight fragment and holds two accumulator
sets (149 registers a thread on gate/up against 106 at M=8, warps active 15% against 21%:
docs/CUDA.md); here each warp holds one, as at M=8, and the two warps of a K group read the
same weights at once, so L1 may serve the second read. Each row tile's accumulator takes the
same mma in the same order as the plain tile's, and the sums are added in the same order, so
the output is the plain M=16 tile's bit for bit. Measured on an H100 (2026-12-07,
bench/results/h100/rowwarps_0907): slower alone on every point (gate/up 37.4 us against the
table tile's 31.6), since each warp dequantizes what its partner does too (warp instructions
+74%); kept as a measurement, never chosen there.

``wgmma`` = 1 (register pipeline, ``col_warps`` = 4, sm_90a) makes each K group's 4 warps one
warpgroup and each pair of a word's mma one ``wgmma.mma_async.m64nNk16``: the same dequantized A
fragments from registers (warp w's 16 rows of the 64), B, the activations, from shared memory,
N = 8 rows up to M=8 and 16 above. Why: at M=16 the mma.sync tiles pay for x (each lane loads
its rows' activations every K step, 2 KB a warp a step at M=8 and 4 KB at M=16, against 2 KB of
weights; and a second mma and accumulator set per fragment): without x's loads the M=8 tile
ran M=16 in 24.5 us against 24.3 at M=8 and 49.0 whole (an H100, bench/results/h100/xcost_1037).
Here the warpgroup's 128 threads stage a K step's x once (16 bytes a thread at M=8, 32 at
M=16, one step ahead in registers) into two slots of wgmma's B layout, and M=16 costs one
instruction where M=8 does. The sums are those of the plain tile's mma in the same order (the
CUDA emulator models both as one rounding of the 16 products and the accumulator, so there the
output is the col_warps 4 tile's bit for bit); whether the tensor core adds them in the same
order for both instructions is the device's to say (``bench/sweep_records_wgmma.WGMMA``: it
does, bit for bit at M=8 and 16, bench/results/h100/wgmma_1749). Each step
waits for its own wgmma, and meets its x, loaded one step ahead, at the barrier that publishes
it: ``wgmma`` = 2 leaves each step's wgmma in flight through the next (x in three slots; two
steps of code a loop, so that the next step's A fragments are other registers), and
``x_ahead`` = 1 loads x three steps ahead (``WGMMA_NEXT`` there; timed on an H100 on
2026-12-07, bench/results/h100/wgmma_next_2228: bit for bit, and neither pays, since with x
unstaged the tile is as slow: its weight loads hold it).

No Metal source: Apple GPUs use the scalar and simdgroup-matrix variants.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.tiling import Tiling
from kernels.variants._mma_weights_a_cuda import CUDA_HEADER, CUDA_SOURCE  # noqa: F401
from kernels.variants._portable import split_k

NAME = "mma_weights_a"
ROWS = None  # 1..16
DEFAULTS = {"n_tile": 32, "k_groups": 1, "unroll": 2, "prefetch": 0, "stages": 0,
            "l2_prefetch": 128, "x_early": 0, "min_blocks": 0, "bulk": 0, "hi_in_place": 0,
            "denorm": 0, "ablate": 0, "col_warps": 1, "cluster": 1, "x_share": 0,
            "row_warps": 1, "x_prefetch": 0, "lag": -1, "x_ahead": 0, "wgmma": 0,
            "x_rot": 0}
METAL_SOURCE = None
HEADER = ""
CUDA_LAYOUT = "mma_weights_a"
# Half-precision mma operands only; whole 128-value K steps per K group; 16-column A tiles
# (n_tile % 16) covering N; a lane's 32 values share one scale (group_size % 32); the group
# sums partial[K_GROUPS][8 * M_TILES][n_tile] must fit 48 KiB of static shared memory. The
# cp.async ring (stages >= 2) shares that memory with the partial sums; kernels.cuda checks it
# fits (24 B per lane per 16 columns per stage and K group).
CUDA_TILING = Tiling(dtypes=("bfloat16", "float16"), k_multiple=(128, "k_groups"),
                     group_multiple=32, positive=("n_tile", "k_groups", "unroll"),
                     param_choices=(("prefetch", (0, 1)), ("stages", (0, 2, 3, 4, 5, 6, 8)),
                                    ("l2_prefetch", (128, 256)), ("x_early", (0, 1, 2, 3)),
                                    ("min_blocks", (0, 2, 3, 4, 5, 6)), ("bulk", (0, 1, 2, 3)),
                                    ("hi_in_place", (0, 1)), ("denorm", (0, 1, 2)),
                                    ("ablate", (0, 1, 2, 3, 4, 5)), ("col_warps", (1, 2, 4, 8)),
                                    ("cluster", (1, 2, 4, 8)), ("x_share", (0, 1)),
                                    ("row_warps", (1, 2)), ("x_prefetch", (0, 1, 2, 3, 4, 8)),
                                    ("lag", (-1, 0, 1, 2, 3)), ("x_ahead", (0, 1)),
                                    ("wgmma", (0, 1, 2)), ("x_rot", (0, 1))),
                     param_multiples=(("n_tile", 16),),
                     shared_floats=("k_groups", "M8", "n_tile"))

def pack_weights(wq: mx.array, n_tile: int, k_groups: int, unroll: int) -> mx.array:
    """``wq`` (N, K / 8 words) laid out for ``bulk`` = 2: block b's stage s is one run of
    words, [K group][row][unroll * 16 words], so its producer fetches it in one bulk copy. The
    same words, moved: word j of K step (kg * group steps + s * unroll + i) of row b * n_tile
    + r."""
    n, words = wq.shape
    steps = words // 16 // k_groups // unroll  # stages a K group's steps make
    packed = wq.reshape(n // n_tile, n_tile, k_groups, steps, unroll * 16)
    return mx.contiguous(packed.transpose(0, 3, 2, 1, 4)).reshape(n, words)


# Bytes of the cp.async ring per lane, per 16-column tile and stage: two 16-byte weight chunks
# (columns g and g + 8) and their two 4-byte scale words and two bias words; with x_early, per
# 8 activation rows and stage, four 16-byte activation chunks.
RING_LANE_BYTES = 2 * (16 + 4 + 4)
RING_LANE_X_BYTES = 4 * 16


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="sequential", k_groups=int(params.get("k_groups", 1)),
                   operand_dtype=x.dtype, fused_dequant=True)
