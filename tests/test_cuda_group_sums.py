"""``mma_group_sums`` without a device: its tiling, its machine code, and its arithmetic.

Only a device runs the kernel (tests/test_cuda_device_levers.py). Here: nvcc's machine code for
sm_90 issues what the contract asks (the LOP3 alone a nibble pair, no half-precision FMA, the
sums of x and the scale and bias once a group), and a float32 model of the kernel's arithmetic,
with the magic read from the source it runs, stays within the bounds every half-output contract
is held to (tests/test_kernel_numerics.py): the subtraction of MAGIC * sum x must not cost the
output its precision.
"""

from __future__ import annotations

import collections
import os
import re

import mlx.core as mx
import numpy as np
import pytest

from kernels import arith, cuda, cuda_offline
from kernels.qweights import QWeights
from kernels.ulps import scaled_ulps
from kernels.variants import VARIANTS

NAME = "mma_group_sums"
V = VARIANTS[NAME]
GATE_UP = (5120, 17408)
SHIPPED_LIKE = {"n_tile": 32, "k_groups": 4, "unroll": 2, "x_early": 1}


def test_groups_that_span_two_k_steps_and_float32_are_refused_with_one_line():
    for gs, dtype, match in ((256, "bfloat16", "group_size=256"),
                             (64, "float32", "float32")):
        with pytest.raises(ValueError, match=match) as e:
            cuda.launch_config(NAME, 8, 5120, 17408, gs, dtype, SHIPPED_LIKE)
        assert "\n" not in str(e.value)
    for gs in V.GROUP_SIZES:
        cfg = cuda.launch_config(NAME, 8, 5120, 17408, gs, "bfloat16", SHIPPED_LIKE)
        assert cfg.template["GS"] == gs and cfg.threads == 128 and cfg.grid == 544 * 128


def _hot_loop_ops(dtype: str, params: dict, gs: int = 64) -> collections.Counter:
    cfg = cuda.launch_config(NAME, 8, *GATE_UP, gs, dtype, params)
    sass = cuda_offline.sass_sm90(NAME, dtype, cfg.template, cuda.kernel_header(NAME, cfg))
    ops = collections.Counter()
    for ins in cuda_offline.hot_loop(sass):
        op, args = cuda_offline.sass_operands(ins)
        ops[(op, args[2] if len(args) > 2 else "", args[4] if len(args) > 4 else "")] += 1
    return ops


def _count(ops: collections.Counter, prefix: str) -> int:
    return sum(n for (op, *_), n in ops.items() if op.startswith(prefix))


needs_sass = pytest.mark.skipif(cuda_offline.nvcc() is None or cuda_offline.nvdisasm() is None,
                                reason="nvcc or nvdisasm is not on PATH")


@needs_sass
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_k_loop_issues_the_lop3_alone_a_pair_and_the_scale_once_a_group(dtype):
    """Gate/up at M=8 with the shipped tile's shape, per batch of 2 K steps (128 nibble pairs
    a lane: 2 column tiles x 2 rows x 4 words x 4 pairs x 2 steps): 128 LOP3s of mask and magic
    and nothing else on a weight (no HADD2 of the magic, no HFMA2: mma_weights_a issues one of
    each a pair), 96 nibble shifts; 48 mma (32 of weights, 16 summing x with A = ones); and a
    group's epilogue of 10 float32 FMAs a column tile (b - MAGIC s twice, 8 outputs): 2 groups
    x 2 column tiles x 10 x 2 steps = 80. fp16's scales reach float32 through HADD2.F32, 2
    groups x 2 tiles x 4 a step: the only HADD2s."""
    ops = _hot_loop_ops(dtype, SHIPPED_LIKE)
    pairs = 128
    assert ops[("LOP3.LUT", "0xf000f", "0xea")] == pairs
    assert _count(ops, "HFMA2") == 0
    hadd = collections.Counter()
    for (op, *_), n in ops.items():
        if op.startswith("HADD2"):
            hadd[op] += n
    assert hadd == ({} if dtype == "bfloat16" else {"HADD2.F32": 32})
    shifts = {a: ops[("SHF.R.U32.HI", a, "")] for a in ("0x4", "0x8", "0xc")}
    assert shifts == dict.fromkeys(("0x4", "0x8", "0xc"), pairs // 4)
    assert _count(ops, "HMMA") == 48
    assert _count(ops, "FFMA") == 80
    total = sum(ops.values())
    assert total < 2 * 260  # 253 a K step with nvcc 13.0 against mma_weights_a's 324


def _source_magic(dtype: str) -> tuple[int, float]:
    """(the LOP3's magic word, the float the epilogue subtracts), read from the kernel source."""
    src = V.CUDA_SOURCE
    word = re.search(r"MAGIC = IS_BF16 \? (0x[0-9A-Fa-f]+)u : (0x[0-9A-Fa-f]+)u;", src)
    value = re.search(r"MAGIC_F = IS_BF16 \? ([0-9.]+)f : ([0-9.]+)f;", src)
    i = 1 if dtype == "bfloat16" else 2
    return int(word[i], 16), float(value[i])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_magic_the_lop3_ors_in_is_the_value_the_epilogue_takes_away(dtype):
    """Every nibble pair: (bits & 0x000F000F) | MAGIC read as two halves is MAGIC_F + q
    exactly, for the magic and the float the source holds."""
    magic, value = _source_magic(dtype)
    bits = np.arange(1 << 16, dtype=np.uint32)
    bits = bits | (bits[::-1] << 16)
    halves = ((bits & 0x000F000F) | magic).astype("<u4")
    if dtype == "bfloat16":
        got = (halves.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    else:
        got = halves.view(np.float16).astype(np.float32)
    q = np.stack([bits & 0xF, (bits >> 16) & 0xF], axis=1).reshape(-1)
    assert np.array_equal(got, value + q.astype(np.float32))


def _f32_fma(a, b, c):
    """fmaf in float32: the exact a * b + c (products of float32 values are exact in float64,
    their sum rounds once more there, far below float32's place), rounded to float32."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def model(x: np.ndarray, q: np.ndarray, s: np.ndarray, b: np.ndarray, gs: int, k_groups: int,
          magic: float) -> np.ndarray:
    """The kernel's arithmetic in float32 (the tensor core's adds modelled as sequential float32
    adds of exact products, in K order): per group, sum (MAGIC + q) x and sum x; then acc =
    fma(s, gq, acc), acc = fma(b - MAGIC s, gx, acc) in group order within each K group; the K
    groups' sums added in order. Returns float32 (M, N) before the rounding to T."""
    m, k = x.shape
    n = q.shape[0]
    groups = k // gs
    xg = x.reshape(m, groups, gs).astype(np.float32)
    aq = (magic + q.reshape(n, groups, gs)).astype(np.float32)
    gq = np.zeros((m, n, groups), np.float32)
    gx = np.zeros((m, groups), np.float32)
    for j in range(gs):  # exact products (8 x 8 or 11 x 11 bits), float32 sums
        gq = (gq + xg[:, None, :, j] * aq[None, :, :, j]).astype(np.float32)
        gx = (gx + xg[:, :, j]).astype(np.float32)
    bm = _f32_fma(np.float32(-magic), s, b)  # (N, G)
    per = groups // k_groups
    total = np.zeros((m, n), np.float32)
    for kg in range(k_groups):
        acc = np.zeros((m, n), np.float32)
        for g in range(kg * per, (kg + 1) * per):
            acc = _f32_fma(s[None, :, g], gq[:, :, g], acc)
            acc = _f32_fma(bm[None, :, g], gx[:, None, g], acc)
        total = (total + acc).astype(np.float32)
    return total


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("k,k_groups", [(5120, 4), (17408, 8)])
def test_the_kernels_arithmetic_stays_within_the_half_output_bounds(dtype, k, k_groups):
    """The model against float64 (scaled ulps <= 1, every half-output contract's bound) and
    against stock's portable form (<= 2), at the real K, on activations with a large common
    part (sum x large: what MAGIC * sum x cancels) as well as the suites' kind; the seed is
    printed. Also the portable form itself, which the suites hold the kernel to."""
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    _, value = _source_magic(dtype)
    dt = getattr(mx, dtype)
    cols, gs = 24, 64
    w = mx.array((rng.standard_normal((cols, k)) / np.sqrt(k)).astype(np.float32))
    qw = QWeights.quantize(w, gs, 4, dt)
    q = np.array(mx.dequantize(qw.wq, mx.ones_like(qw.scales.astype(mx.float32)),
                               mx.zeros_like(qw.scales.astype(mx.float32)), group_size=gs,
                               bits=4)).astype(np.float32)
    s = np.array(qw.scales.astype(mx.float32))
    b = np.array(qw.biases.astype(mx.float32))
    wd = np.array(arith.dequantize_f32(qw.wq, qw.scales, qw.biases, gs, 4), np.float64)
    rows = rng.integers(0, cols, 8)
    for kind, x32 in (("suites", np.array(w)[rows] + 0.3 * rng.standard_normal((8, k)) / np.sqrt(k)),
                      ("offset", 1.0 + 0.1 * rng.standard_normal((8, k)))):
        x = mx.array(x32.astype(np.float32)).astype(dt)
        xd = np.array(x.astype(mx.float32), np.float64)
        ref, scale = xd @ wd.T, np.abs(xd) @ np.abs(wd).T
        y = model(xd.astype(np.float32), q, s, b, gs, k_groups, value)
        # the float32 arithmetic within a quarter ulp (seen: 0.03 at most, fp16 "offset"), so
        # that with the final rounding's half ulp the output stays within the bound of 1; a
        # MAGIC 256 times larger (2^18 in fp16) errs by 3-6 ulps here
        assert scaled_ulps(y.astype(np.float64), ref, scale, dtype).max() <= 0.25, (kind, seed)
        yt = np.array(mx.array(y).astype(dt).astype(mx.float32), np.float64)
        port = np.array(V.portable(x, qw, {"k_groups": k_groups}).astype(mx.float32), np.float64)
        stock = np.array(VARIANTS["stock"].portable(x, qw, {}).astype(mx.float32), np.float64)
        where = f"{dtype} K={k} {kind} seed={seed}"
        for got in (yt, port):
            assert scaled_ulps(got, ref, scale, dtype).max() <= 1.0, where
            assert scaled_ulps(got, stock, scale, dtype).max() <= 2.0, where


DOWN_SHIPPED = {"n_tile": 16, "k_groups": 8, "unroll": 1, "prefetch": 1, "late_scales": 1}


@needs_sass
def test_a_cluster_tile_is_a_cluster_kernel_and_the_unclustered_tile_is_unchanged():
    """Down at M=8 with the shipped tile (K 17408, N 5120): at cluster 2 the header gives nvcc
    ``__cluster_dims__(2, 1, 1)``, the grid has twice the blocks of half the threads, and the
    machine code meets at the cluster's barrier twice (its partial sums written; read) and
    reads 8 partial sums an output from the cluster's shared memory; at cluster 1 the header
    has no attribute and the code no cluster barrier."""
    k, n = GATE_UP[1], GATE_UP[0]
    ops = {}
    for cluster in (1, 2):
        cfg = cuda.launch_config(NAME, 8, k, n, 64, "bfloat16", {**DOWN_SHIPPED,
                                                                 "cluster": cluster})
        header = cuda.kernel_header(NAME, cfg)
        assert ("__cluster_dims__(2, 1, 1)" in header) == (cluster == 2)
        assert (cfg.threads, cfg.grid // cfg.threads) == (256 // cluster, 320 * cluster)
        sass = cuda_offline.sass_sm90(NAME, "bfloat16", cfg.template, header)
        ops[cluster] = collections.Counter(cuda_offline.sass_opcode(i) for i in sass)
    assert ops[2]["UCGABAR_ARV"] == ops[2]["UCGABAR_WAIT"] == 2
    assert ops[1]["UCGABAR_ARV"] == ops[1]["UCGABAR_WAIT"] == 0
    assert ops[2]["LD"] == 8 and ops[1]["LD"] == 0
