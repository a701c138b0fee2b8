"""mma_group_sums: stock's contract on the tensor cores, a group's scale and bias applied once.

Contract (stock's numbers, ``mma_weights_a``'s K split): each weight is ``scale * q + bias`` in
float32, never rounded to the activation dtype; activations as given (bf16 or fp16); float32
sums over ``k_groups`` contiguous K groups (one warp each), added in order; one rounding to the
activation dtype. The portable form is stock's with that split (``split_k``, sequential
layout): within a K group the kernel's order is the tensor core's and its terms are grouped by
quantization group, so like every split-K contract it is held to the suites' bounds, not to
the bit.

How: a weight is never dequantized. A LOP3 puts two nibbles into the mantissa of MAGIC (128 in
bf16, 1024 in fp16), which is MAGIC + q exactly; ``mma.sync.m16n8k16`` sums (MAGIC + q) x over
one quantization group in float32 (the products are exact: 8 x 8 significant bits in bf16, 11
x 11 in fp16, within float32's 24), and an mma with A = ones sums x over the same K. After the
group's last mma, per output value, ``acc += s * sum (MAGIC + q) x`` and ``acc += (b - MAGIC s)
* sum x``, each one float32 FMA; ``b - MAGIC s`` is one FMA too, exact unless b is below 2^-15
of MAGIC s. The cancellation of MAGIC * sum x costs log2(MAGIC / 7.5) bits of float32's 24 (4
in bf16, 7 in fp16), far above the output's 8 or 11.

Why: ``mma_weights_a`` spends 240 of its 324 instructions a K step (gate/up's shipped tile,
nvcc for sm_90: bench/results/sass_static.md) on dequantization, a LOP3, an HADD2 and an HFMA2
a nibble pair. Here a pair costs the LOP3 alone and, per group and 16 columns, ~14 instructions
of epilogue; the ones-mma adds 8 mma a K step at M=8. Worth it if the warps wait on their own
instructions rather than on memory (docs/CUDA.md, "`mma_group_sums`: the stock contract as a variant").

Lanes: every mma's 16 K values must lie in one quantization group, so a lane's 4 words of a K
step are laid by group (``_mma_group_sums_cuda``): two 8-byte weight loads a row at GS = 64
instead of one 16-byte load. GS is 32, 64 or 128; a group never spans two K steps.

``unroll``, ``prefetch``, ``x_early`` and ``min_blocks`` are the register pipeline's levers, as in
``mma_weights_a``, and ``late_scales`` = 1 loads a step's scales and biases at its math instead
of with the batch (a prefetched batch then holds the weights alone: gate/up's prefetched
unroll-1 tile at M=8 takes 84 registers instead of 130 or 108, 5 blocks an SM instead of 3 or
4). None changes the arithmetic, so each must equal its plain twin bit for bit.

``cluster`` = S > 1 (sm_90) splits a column tile's ``k_groups`` among a thread-block cluster
of S blocks (``__cluster_dims__``), each taking k_groups / S of them in rank order: the grid
has S times the blocks, each 1/S of the threads. The blocks meet at the cluster's barrier and
each adds 1/S of the tile's outputs from every block's partial sums (distributed shared
memory), all the K groups in order, so the float adds are the S = 1 tile's and so is the
output, bit for bit, whichever block finishes first. Why: down's 320 column tiles of 16 (the
mma's least) put 3 blocks on some of the H200's 132 SMs and 2 on others, the busiest SM 1.24x
the mean; at S = 2, 640 blocks of 4 warps hold 5 an SM at most against 4.85 (docs/CUDA.md,
"The 70% goal"). A reduction through global memory would need a counter zeroed before every
launch, and MLX's ``init_value`` fills every output, y and the workspace too.

No Metal source: Apple GPUs use the scalar and simdgroup-matrix variants.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.tiling import Tiling
from kernels.variants._mma_group_sums_cuda import CUDA_HEADER, CUDA_SOURCE  # noqa: F401
from kernels.variants._portable import split_k

NAME = "mma_group_sums"
ROWS = None  # 1..16
DEFAULTS = {"n_tile": 32, "k_groups": 1, "unroll": 2, "prefetch": 0, "x_early": 0,
            "min_blocks": 0, "late_scales": 0, "ablate": 0, "cluster": 1}
METAL_SOURCE = None
HEADER = ""
CUDA_LAYOUT = "mma_group_sums"
# Half-precision mma operands only; whole 128-value K steps per K group; 16-column A tiles
# (n_tile % 16) covering N; groups of 32, 64 or 128 (kernels.cuda refuses the others: a group
# must not span two K steps); the group sums partial[K_GROUPS][8 * M_TILES][n_tile] in 48 KiB of
# static shared memory.
CUDA_TILING = Tiling(dtypes=("bfloat16", "float16"), k_multiple=(128, "k_groups"),
                     group_multiple=32, positive=("n_tile", "k_groups", "unroll"),
                     param_choices=(("prefetch", (0, 1)), ("x_early", (0, 1)),
                                    ("min_blocks", (0, 2, 3, 4, 5, 6)), ("late_scales", (0, 1)),
                                    ("ablate", (0, 1, 2)), ("cluster", (1, 2, 4))),
                     param_multiples=(("n_tile", 16),),
                     shared_floats=("k_groups", "M8", "n_tile"))
GROUP_SIZES = (32, 64, 128)
# Besides the weights' mma, one more mma pair a word and activation tile sums x (A = ones): the
# static report counts a K step's mma with it (bench/sass_static.py).
SUMS_X_MMA = True


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="sequential", k_groups=int(params.get("k_groups", 1)))
