"""The mma variants' CUDA kernel bodies, run on this CPU by the emulator (kernels/cuda_emu/).

No GPU runs in CI, and the levers below had run on none: the emulator runs the exact body
(the headers' inline PTX as C++ of its semantics), so a lane that reads the wrong K, a lever
that changes the numbers or a tile that writes out of bounds is found here first. What it
cannot show: the tensor core's own rounding (the emulated mma sums its products exactly and
rounds once), and speed. Shapes are small but take every path: K = 1152 is 9 K steps (an odd
count for a warp at one K group, which prefetch's turns end on the first batch), K = 1024 at
2 and 4 K groups gives warps 4 and 2 steps.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from kernels import arith, cuda_config
from kernels.cuda_emu import build, launch
from kernels.metal_emu.executor import EmulatorError
from kernels.qweights import QWeights
from kernels.tiling import TilingError
from kernels.ulps import scaled_ulps
from kernels.variants import VARIANTS

N = 64
DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16}


def _case(k: int, dt: str, gs: int = 64, spread: float = 1.0) -> QWeights:
    w = mx.random.normal((N, k), key=mx.random.key(k + gs)) * (spread / k ** 0.5)
    return QWeights.quantize(w, gs, 4, DTYPES[dt])


def _x(m: int, k: int, dt: str) -> mx.array:
    return (mx.random.normal((m, k), key=mx.random.key(m)) / k ** 0.25).astype(DTYPES[dt])


def _errors(y: mx.array, x: mx.array, qw: QWeights, port: mx.array, dt: str) -> tuple:
    """(scaled ulps against float64, against the portable form) of y."""
    wd = np.array(arith.dequantize_f32(qw.wq, qw.scales, qw.biases, qw.group_size, 4),
                  np.float64)
    xd = np.array(x.astype(mx.float32), np.float64)
    yd = np.array(y.astype(mx.float32), np.float64)
    scale = np.abs(xd) @ np.abs(wd).T
    assert np.isfinite(yd).all()
    return (scaled_ulps(yd, xd @ wd.T, scale, dt).max(),
            scaled_ulps(yd, np.array(port.astype(mx.float32), np.float64), scale, dt).max())


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("gs", [32, 64, 128])
def test_group_sums_holds_the_half_output_bound_at_every_group_size_and_m(dt, gs):
    """Its lanes lay K by group (one 16-byte load a row at 128, two 8-byte at 64, four words
    at 32) and apply a group's scale and bias once: within 1 scaled ulp of float64 and 2 of
    its portable form (stock's contract), at M = 1, 8 and 16 (one and two activation tiles)."""
    k = 1024
    qw = _case(k, dt, gs)
    v = VARIANTS["mma_group_sums"]
    for m in (1, 8, 16):
        x = _x(m, k, dt)
        p = {"n_tile": 32, "k_groups": 2, "unroll": 1}
        y = launch.launch("mma_group_sums", x, qw, p)
        f64, port = _errors(y, x, qw, v.portable(x, qw, p), dt)
        assert f64 <= 1.0 and port <= 2.0, (m, f64, port)


LEVERS = {
    "mma_group_sums": [{"prefetch": 1}, {"prefetch": 1, "unroll": 2}, {"unroll": 2},
                       {"x_early": 1}, {"unroll": 2, "x_early": 1},
                       {"prefetch": 1, "x_early": 1}, {"late_scales": 1},
                       {"late_scales": 1, "prefetch": 1},
                       {"late_scales": 1, "prefetch": 1, "unroll": 2, "x_early": 1}],
    "mma_weights_a": [{"prefetch": 1}, {"prefetch": 1, "unroll": 2}, {"unroll": 2},
                      {"unroll": 2, "x_early": 1}, {"stages": 3}, {"stages": 2, "x_early": 1},
                      {"hi_in_place": 1}, {"hi_in_place": 1, "prefetch": 1},
                      {"hi_in_place": 1, "stages": 3}, {"denorm": 1},
                      {"denorm": 1, "unroll": 2, "x_early": 1}, {"denorm": 1, "stages": 3},
                      {"denorm": 2}, {"denorm": 2, "unroll": 2, "x_early": 1},
                      {"denorm": 2, "stages": 3}, {"denorm": 2, "prefetch": 1}],
}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("name", LEVERS)
def test_every_lever_gives_the_plain_register_pipelines_output_bit_for_bit(name, dt):
    """Each lever of each variant (prefetch's batches taking turns, whole batches of unroll,
    activations loaded early, mma_weights_a's cp.async ring and fp16's ``hi_in_place``,
    mma_group_sums' scales loaded at each step's math) at K
    steps a warp of 9 (odd), 4 and 2 at M=8, and 4 at M=16 (two activation tiles): the plain
    pipeline's output bit for bit, and that output within the bounds (1 scaled ulp of
    float64, 2 of the portable form). Each tile is a clang build (~2 s, cached by content)."""
    v = VARIANTS[name]
    for k, k_groups, m in ((1152, 1, 8), (1024, 2, 8), (1024, 2, 16), (1024, 4, 8)):
        # scales under every denorm limit (fp16's at denorm 2, 2^-8, is the least): the
        # emulator runs what it is given, so an overflow would show, not fall back
        qw = _case(k, dt, spread=0.25)
        assert cuda_limit_fits(qw, dt)
        plain = {"n_tile": 32, "k_groups": k_groups, "unroll": 1}
        x = _x(m, k, dt)
        y0 = launch.launch(name, x, qw, plain)
        f64, port = _errors(y0, x, qw, v.portable(x, qw, plain), dt)
        assert f64 <= 1.0 and port <= 2.0, (k, k_groups, m, f64, port)
        for lever in LEVERS[name]:
            try:  # bf16 refuses hi_in_place; a ring of 2 x 2 K groups at M=16 is 56 KiB
                cuda_config.launch_config(name, m, k, N, 64, dt, {**plain, **lever})
            except TilingError:
                continue
            y = launch.launch(name, x, qw, {**plain, **lever})
            assert mx.array_equal(y, y0).item(), (k, k_groups, m, lever)


def test_x_early_3_rings_the_activations_through_shared_memory_bit_for_bit():
    """``x_early`` 3: each lane's activations copied (cp.async) into its warp's ring of 2 K
    steps, one step ahead of their math, in the register pipeline: the plain pipeline's output
    bit for bit, at 9 steps a warp (odd), at M=16 (two activation tiles, and a warp per 8 rows)
    and M=4 (rows past M never copied), with unroll, prefetch and denorm beside it; refused
    with another pipeline, and where its ring and the partial sums pass 48 KiB. (bf16: the
    ring moves 16-byte chunks whatever the half type.)"""
    dt = "bfloat16"
    qw = _case(1152, dt, spread=0.25)
    levers = [{"x_early": 3}, {"x_early": 3, "unroll": 2, "prefetch": 1, "denorm": 1}]
    for m, k_groups, extra in ((8, 1, {}), (16, 3, {}), (16, 1, {"row_warps": 2}), (4, 3, {})):
        x = _x(m, 1152, dt)
        plain = {"n_tile": 32, "k_groups": k_groups, "unroll": 1, **extra}
        y0 = launch.launch("mma_weights_a", x, qw, plain)
        for lever in levers:
            y = launch.launch("mma_weights_a", x, qw, {**plain, **lever})
            assert mx.array_equal(y, y0).item(), (m, k_groups, extra, lever)
    base = {**VARIANTS["mma_weights_a"].DEFAULTS, "n_tile": 32, "k_groups": 4, "x_early": 3}
    for other, why in (({"stages": 2}, "x_early=3 change the activation loads"),
                       ({"bulk": 3, "stages": 2, "unroll": 1}, "register pipeline alone"),
                       ({"k_groups": 8}, "exceed the 48 KiB")):
        with pytest.raises(TilingError, match=why):
            cuda_config.launch_config("mma_weights_a", 16, 5120, 17408, 64, dt, {**base, **other})


def cuda_limit_fits(qw: QWeights, dt: str) -> bool:
    from kernels.cuda import DENORM_SCALE_LIMIT  # needs no CUDA backend: a table of numbers
    top = float(mx.abs(qw.scales).max().astype(mx.float32).item())
    return all(top < lim for (d, _), lim in DENORM_SCALE_LIMIT.items() if d == dt)


@pytest.mark.parametrize("source,wrong,found", [
    # a lane base of x in mma_weights_a's layout (32 t, not 8 WPG t): past x's end at M=8
    ("const T* x_lane = x + g * K + 8 * WPG * t;", "const T* x_lane = x + g * K + 32 * t;",
     "out-of-bounds read of buffer 'x'"),
    # every group of a K step scaled by the first group's scale and bias: in bounds, wrong
    ("const int j = i / WPG;    // the group's place in the step",
     "const int j = 0;", "bound")])
def test_a_kernel_that_reads_the_wrong_k_or_scale_is_caught(monkeypatch, source, wrong, found):
    """The emulator tells: mma_group_sums with its lanes' activations laid as mma_weights_a's
    faults on the guarded buffer; with each step's second group given the first group's scale
    and bias, its output leaves the bound by far."""
    v = VARIANTS["mma_group_sums"]
    assert source in v.CUDA_SOURCE
    monkeypatch.setattr(v, "CUDA_SOURCE", v.CUDA_SOURCE.replace(source, wrong))
    qw, x = _case(1024, "bfloat16"), _x(8, 1024, "bfloat16")
    p = {"n_tile": 32, "k_groups": 2, "unroll": 1}
    if found == "bound":
        f64, _ = _errors(launch.launch("mma_group_sums", x, qw, p), x, qw,
                         v.portable(x, qw, p), "bfloat16")
        assert f64 > 4.0
    else:
        with pytest.raises(EmulatorError, match=found):
            launch.launch("mma_group_sums", x, qw, p)


def test_the_split_k_sources_are_refused_with_one_line():
    """(The bulk pipeline runs: tests/test_cuda_bulk_emulated.py.)"""
    qw, x = _case(1024, "bfloat16"), _x(8, 1024, "bfloat16")
    with pytest.raises(build.NotEmulated, match="only the mma variants") as e:
        launch.launch("scalar_kmajor", x, qw, {})
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["mma_weights_a", "mma_group_sums"])
def test_ablate_takes_out_the_part_it_names(name):
    """``ablate`` times a kernel with a part taken out, never a kernel to select: 1 leaves the
    loads and no math (every output zero), 2 leaves the math and no weight loads (the output
    no longer depends on the weight words: two sets of words under the same scales give the
    same bits, while the kernel itself tells them apart). An ablated ring is refused."""
    k, dt = 1024, "bfloat16"
    x = _x(8, k, dt)
    qa = _case(k, dt)
    # other weight words, the same scales and biases (which ablate 2 still loads)
    qb = QWeights(qa.wq ^ mx.array(0x5A5A5A5A, dtype=mx.uint32), qa.scales, qa.biases, 64, 4)
    p = {"n_tile": 32, "k_groups": 2, "unroll": 2, "prefetch": 1}
    whole = [np.array(launch.launch(name, x, q, p).astype(mx.float32)) for q in (qa, qb)]
    loads = np.array(launch.launch(name, x, qa, {**p, "ablate": 1}).astype(mx.float32))
    math = [np.array(launch.launch(name, x, q, {**p, "ablate": 2}).astype(mx.float32))
            for q in (qa, qb)]
    assert not np.array_equal(whole[0], whole[1])
    assert (loads == 0).all() and np.abs(whole[0]).max() > 0
    assert np.array_equal(math[0], math[1]) and not np.array_equal(math[0], whole[0])
    if name == "mma_weights_a":  # the math alone under denorm: the same made-up weights' sums
        for mode in (1, 2):
            y = launch.launch(name, x, qa, {**p, "denorm": mode, "ablate": 2})
            assert np.array_equal(np.array(y.astype(mx.float32)), math[0]), mode
        with pytest.raises(TilingError, match="ablate takes a part out of the register"):
            cuda_config.launch_config(name, 8, k, N, 64, dt, {**p, "stages": 3, "ablate": 1})


@pytest.mark.parametrize("m, extra", [(8, {}), (16, {"x_early": 1}), (8, {"denorm": 2})])
def test_ablate_3_and_4_take_out_the_activation_loads(m, extra):
    """mma_weights_a's register pipeline: 3 makes the activation words up instead of loading
    them (the output no longer depends on x, still on the weights), 4 the weight words too (on
    neither: only the scales and biases are loaded). Elsewhere, one line."""
    k, dt = 1024, "bfloat16"
    qa = _case(k, dt)
    qb = QWeights(qa.wq ^ mx.array(0x5A5A5A5A, dtype=mx.uint32), qa.scales, qa.biases, 64, 4)
    xa, xb = _x(m, k, dt), -_x(m, k, dt) * 0.5
    p = {"n_tile": 32, "k_groups": 2, "unroll": 2, **extra}

    def run(x, q, ablate):
        y = launch.launch("mma_weights_a", x, q, {**p, "ablate": ablate})
        return np.array(y.astype(mx.float32))
    whole = run(xa, qa, 0)
    assert not np.array_equal(whole, run(xb, qa, 0))
    no_x = [run(x, q, 3) for x, q in ((xa, qa), (xb, qa), (xa, qb))]
    assert np.isfinite(no_x[0]).all() and np.abs(no_x[0]).max() > 0
    assert np.array_equal(no_x[0], no_x[1]) and not np.array_equal(no_x[0], no_x[2])
    assert not np.array_equal(no_x[0], whole)
    pure = [run(x, q, 4) for x, q in ((xa, qa), (xb, qb))]
    assert np.array_equal(pure[0], pure[1]) and not np.array_equal(pure[0], no_x[0])
    assert not np.array_equal(pure[0], run(xa, qa, 2))
    for other in ({"bulk": 3, "stages": 2, "k_groups": 4, "unroll": 1, "x_early": 1},
                  {"stages": 3}):
        with pytest.raises(TilingError, match="activation loads of the register pipeline alone"):
            cuda_config.launch_config("mma_weights_a", 8, k, N, 64, dt,
                                      {**VARIANTS["mma_weights_a"].DEFAULTS, **p, **other,
                                       "ablate": 3})


def _first_steps(x: mx.array, k_groups: int) -> mx.array:
    """x with every K step of each K group made that group's first step's 128 activations."""
    gk = x.shape[1] // k_groups
    return mx.concatenate([mx.tile(x[:, g * gk:g * gk + 128], (1, gk // 128))
                           for g in range(k_groups)], axis=1)


@pytest.mark.parametrize("m, extra", [(8, {}), (16, {"x_early": 1})])
def test_ablate_5_loads_each_k_groups_first_step_of_x_every_step(m, extra):
    """ablate 5 keeps every activation load and makes each one read its K group's first step,
    lines L1 holds after that step (a time of x's loads that do not wait on L2, not a result):
    bit for bit the whole kernel given x with each group's first step repeated, and not the
    kernel's output on x. Refused on wgmma, whose x goes through shared memory. (The tiles of
    the ablate 3 and 4 test, so the whole kernels' builds are shared; the bulk pipeline's case
    is in test_cuda_bulk_emulated.)"""
    k, dt = 1024, "bfloat16"
    qw, x = _case(k, dt), _x(m, k, dt)
    p = {"n_tile": 32, "k_groups": 2, "unroll": 2, **extra}

    def run(xx, ablate):
        return np.array(launch.launch("mma_weights_a", xx, qw, {**p, "ablate": ablate})
                        .astype(mx.float32))
    hot = run(x, 5)
    assert np.array_equal(hot, run(_first_steps(x, p["k_groups"]), 0))
    assert not np.array_equal(hot, run(x, 0))
    wg = {**VARIANTS["mma_weights_a"].DEFAULTS, "n_tile": 16, "k_groups": 2, "unroll": 1,
          "prefetch": 1, "col_warps": 4, "wgmma": 1, "ablate": 5}
    with pytest.raises(TilingError, match="never 5"):
        cuda_config.launch_config("mma_weights_a", 8, k, 256, 64, dt, wg)


def test_a_table_entry_that_selects_an_ablated_kernel_is_refused():
    from kernels.selection import build_table
    entry = {"devices": ["sm_90"], "dtypes": ["bfloat16"], "M": 8, "bits": 4,
             "group_sizes": [64], "shapes": ["s"], "variant": "mma_weights_a",
             "params": {"n_tile": 32, "k_groups": 4, "unroll": 2, "ablate": 1}}
    with pytest.raises(ValueError, match="ablate=1 is a measurement, never a kernel to select"):
        build_table({"shapes": {"s": [5120, 17408]}, "entries": [entry]})
    build_table({"shapes": {"s": [5120, 17408]}, "entries": [{**entry, "params": {
        "n_tile": 32, "k_groups": 4, "unroll": 2}}]})


# (K, k_groups, M, cluster, levers): K steps a warp of 4 and 2, one and two activation tiles,
# clusters of 2 and 4 blocks, the shipped down tile's levers (prefetch, late scales).
CLUSTERS = [(1024, 4, 8, 2, {}), (1024, 4, 8, 4, {}), (1024, 2, 16, 2, {"x_early": 1}),
            (2048, 8, 8, 2, {"prefetch": 1, "late_scales": 1}),
            (2048, 8, 8, 4, {"prefetch": 1, "late_scales": 1})]


@pytest.mark.parametrize("dt", DTYPES)
def test_a_cluster_of_blocks_gives_the_unclustered_tiles_output_bit_for_bit(dt):
    """``cluster`` splits a column tile's K groups among a cluster of blocks that add them in
    order through each other's shared memory: the tile's output with cluster 1, bit for bit,
    whether the grid runs forward or its last cluster (and a cluster's last block) first. Each
    block is its own threadgroup of the executor, with its own shared memory."""
    for k, k_groups, m, cluster, levers in CLUSTERS:
        qw, x = _case(k, dt), _x(m, k, dt)
        plain = {"n_tile": 16, "k_groups": k_groups, "unroll": 1, **levers}
        cfg = cuda_config.launch_config("mma_group_sums", m, k, N, 64, dt,
                                        {**plain, "cluster": cluster})
        assert (cfg.cluster, cfg.threads, cfg.grid // cfg.threads) == (
            cluster, 32 * k_groups // cluster, N // 16 * cluster)
        y0 = launch.launch("mma_group_sums", x, qw, plain)
        for order in ("forward", "reverse"):
            y = launch.launch("mma_group_sums", x, qw, {**plain, "cluster": cluster}, order)
            assert mx.array_equal(y, y0).item(), (k, k_groups, m, cluster, levers, order)


def test_a_cluster_that_does_not_divide_the_k_groups_is_refused_with_one_line():
    with pytest.raises(TilingError, match="cluster=4 must divide k_groups=2") as e:
        cuda_config.launch_config("mma_group_sums", 8, 1024, N, 64, "bfloat16",
                                  {"n_tile": 16, "k_groups": 2, "unroll": 1, "cluster": 4})
    assert "\n" not in str(e.value)
    with pytest.raises(TilingError, match="cluster"):
        cuda_config.launch_config("mma_group_sums", 8, 1024, N, 64, "bfloat16",
                                  {"n_tile": 16, "k_groups": 4, "unroll": 1, "cluster": 3})


@pytest.mark.parametrize("order", ["forward", "reverse"])
def test_a_cluster_that_leaves_before_its_blocks_have_read_is_caught(monkeypatch, order):
    """A block's shared memory goes with its last thread: without the cluster's second barrier
    a block may leave while another still adds its partial sums. The executor refuses a read of
    a finished block's memory, in either order of the blocks."""
    v = VARIANTS["mma_group_sums"]
    last = "    dflash2_cluster_sync();  // no block leaves while another still reads its shared memory\n"
    assert last in v.CUDA_SOURCE
    monkeypatch.setattr(v, "CUDA_SOURCE", v.CUDA_SOURCE.replace(last, ""))
    qw, x = _case(1024, "bfloat16"), _x(8, 1024, "bfloat16")
    with pytest.raises(EmulatorError, match="threads have all finished"):
        launch.launch("mma_group_sums", x, qw,
                      {"n_tile": 16, "k_groups": 4, "unroll": 1, "cluster": 2}, order)


def _order_sensitive_case(k_groups: int) -> tuple[QWeights, mx.array]:
    """Weights whose K groups' float32 sums are +P, 4, -P, 0 (P = 15 x 2^18 x 256, its ulp
    64) against activations of ones: added in K order (P + 4) rounds the 4 away and the output
    is 0; in any order that meets -P before the 4 it is 4. Half outputs hide most reorderings
    of float32 sums (a last-place change rarely moves the rounding); these do not."""
    k, gs = 256 * k_groups, 64
    per = k // k_groups // gs  # quantization groups a K group
    scale = np.zeros((N, k // gs), np.float32)
    bias = np.zeros((N, k // gs), np.float32)
    scale[:, :per] = 2.0 ** 18
    bias[:, per:2 * per] = 2.0 ** -6
    scale[:, 2 * per:3 * per] = -(2.0 ** 18)
    qw = QWeights(mx.full((N, k // 8), 0xFFFFFFFF, dtype=mx.uint32),
                  mx.array(scale).astype(mx.bfloat16), mx.array(bias).astype(mx.bfloat16), gs, 4)
    return qw, mx.ones((8, k), dtype=mx.bfloat16)


def test_the_cluster_adds_the_k_groups_in_the_unclustered_order():
    """The cluster's blocks add every K group's sums in K order, block 0's first: on sums where
    the order shows in the output (``_order_sensitive_case``), the unclustered tile gives 0 and
    every cluster gives 0, in either order of its blocks."""
    qw, x = _order_sensitive_case(4)
    plain = {"n_tile": 16, "k_groups": 4, "unroll": 1}
    y0 = np.array(launch.launch("mma_group_sums", x, qw, plain).astype(mx.float32))
    assert (y0 == 0).all()
    p = np.float32(15 * 2 ** 18 * 256)
    assert (p + np.float32(4)) - p == 0 and (p - p) + np.float32(4) == 4
    for cluster in (2, 4):
        for order in ("forward", "reverse"):
            y = launch.launch("mma_group_sums", x, qw, {**plain, "cluster": cluster}, order)
            assert (np.array(y.astype(mx.float32)) == 0).all(), (cluster, order)


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("dt", DTYPES)
def test_denorm_is_exact_below_its_scale_limit_and_overflows_at_it(dt, mode):
    """``denorm``'s kernel multiplies each scale by 2^133 (bf16) or 2^20 (fp16; 2^24 for the
    nibbles at bits 0-3 at ``denorm`` 2): with every scale the largest value below the limit
    ``kernels.cuda`` keeps it to, its output is the plain path's bit for bit; at the limit
    itself the scaled scale is infinite and the output is not finite, so the limit is the
    kernel's own, not a guess."""
    from kernels.cuda import DENORM_SCALE_LIMIT  # needs no CUDA backend: a table of numbers
    k, dtype = 1024, DTYPES[dt]
    limit = DENORM_SCALE_LIMIT[dt, mode]
    below = limit * (1 - 2.0 ** -(8 if dt == "bfloat16" else 11))  # T's next value down
    assert mx.array(below).astype(dtype).item() == below < limit
    base = _case(k, dt)
    x = _x(8, k, dt)
    plain = {"n_tile": 32, "k_groups": 2, "unroll": 1}
    for s, exact in ((below, True), (limit, False)):
        qw = QWeights(base.wq, mx.full(base.scales.shape, s, dtype), base.biases, 64, 4)
        y0 = launch.launch("mma_weights_a", x, qw, plain)
        y = launch.launch("mma_weights_a", x, qw, {**plain, "denorm": mode})
        assert mx.isfinite(y0).all().item()
        if exact:
            assert mx.array_equal(y, y0).item()
        else:
            assert not mx.isfinite(y).all().item()
