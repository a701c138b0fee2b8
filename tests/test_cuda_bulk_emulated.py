"""mma_weights_a's bulk pipeline (sm_90 bulk copies on mbarriers) run on this CPU by the CUDA
emulator (kernels/cuda_emu): the exact kernel body, its mbarriers and copies on the executor's
(kernels/metal_emu/runtime), every copy's size, alignment, source buffer and destination
checked.

The gate/up tile the next table ships on the H200 (bulk 3, 2 stages, denorm 2) had run on
no CPU: its only checks before a device were its launch config and its machine code
(tests/test_cuda_bulk.py). Each tile here must give its plain register pipeline's output bit
for bit whether each copy lands as it is issued or only once every thread is blocked (a read
before its wait then finds the bytes that were there before), and whether the warps keep step
or one is held back until nothing else can run (a slot refilled before it has read it then
shows); shapes make every ring wrap (more stages of K than the ring holds). What it cannot
show is speed, or a race that neither schedule brings out.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from kernels import cuda, cuda_config, cuda_offline
from kernels.cuda_emu import launch
from kernels.metal_emu.executor import COPIES, EmulatorError
from kernels.qweights import QWeights
from kernels.tiling import TilingError
from kernels.variants import VARIANTS
from tests.test_cuda_emulated import DTYPES, _errors, _first_steps, _x, cuda_limit_fits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import cuda_verify as cv
import sweep_points as sp

NAME = "mma_weights_a"


def _weights(n: int, k: int, dt: str, spread: float = 0.25) -> QWeights:
    w = mx.random.normal((n, k), key=mx.random.key(k + n)) * (spread / k ** 0.5)
    return QWeights.quantize(w, 64, 4, DTYPES[dt])


# (order, copies): the executor's schedules. "lagging" holds each block's second warp back
# until nothing else can run, so the others run ahead of it as far as the barriers let them.
SCHEDULES = [(order, copies) for order in ("forward", "lagging") for copies in COPIES]


def with_key_bit_for_bit(key: str, tiles: list, dt: str, schedules) -> int:
    """Each (K, M, tile) of ``tiles``, with ``key`` = 1, under each schedule: the output of its
    plain register twin (the same n_tile and k_groups, unroll 1) bit for bit, as is the tile
    without the key; the runs it made. For the levers that move loads and change no value."""
    ran = 0
    for k, m, tile in tiles:
        qw, x = _weights(64, k, dt), _x(m, k, dt)
        y0 = launch.launch(NAME, x, qw, {"n_tile": tile["n_tile"], "k_groups": tile["k_groups"],
                                         "unroll": 1})
        assert mx.array_equal(launch.launch(NAME, x, qw, tile), y0).item(), (k, m, tile)
        for order, copies in schedules:
            y = launch.launch(NAME, x, qw, {**tile, key: 1}, order, copies=copies)
            assert mx.array_equal(y, y0).item(), (key, k, m, tile, order, copies)
            ran += 1
    return ran


def ptxas_with_and_without(key: str, set_name: str, m: int):
    """For each bf16 tile of sweep_points' set ``set_name`` that sets ``key``: (shape, params,
    {0: ptxas' report without the key, 1: with it}, threads a block), nvcc for sm_90 at M=``m``
    as MLX builds each launch. For the levers whose point is the registers they take."""
    for shape, pts in sp.SETS[set_name].items():
        k, n = cv.SHAPES[shape]
        for pt in pts:
            p = sp.as_params(pt)
            if not p.get(key):
                continue
            reports = {}
            for v in (0, 1):
                cfg = cuda_config.launch_config(NAME, m, k, n, 64, "bfloat16", {**p, key: v})
                assert cfg.template[key.upper()] is bool(v)
                reports[v] = cuda_offline.compile_launch(NAME, cfg)
            yield shape, p, reports, cfg.threads


BULK = [{"bulk": 1, "stages": 3}, {"bulk": 1, "stages": 2, "unroll": 2},
        {"bulk": 2, "stages": 4}, {"bulk": 2, "stages": 2, "unroll": 2},
        {"bulk": 3, "stages": 2}, {"bulk": 3, "stages": 3}, {"bulk": 3, "stages": 2, "unroll": 2},
        {"bulk": 3, "stages": 2, "denorm": 2}, {"bulk": 3, "stages": 3, "denorm": 1},
        {"bulk": 3, "stages": 2, "x_early": 1}, {"bulk": 3, "stages": 2, "x_early": 2},
        {"bulk": 3, "stages": 3, "x_early": 2, "denorm": 2},
        {"bulk": 3, "stages": 2, "x_early": 2, "unroll": 2}]
# (K, k_groups, M, levers): every lever at 8 K steps a warp and M=8; at M=16 (two activation
# tiles) and at M=4 with 2 K groups (rows of x neither copied nor read) the pipelines and x's
# two rings. Each tile is a clang build of its own, so not every pair.
SHAPES = ((4096, 4, 8, BULK), (4096, 4, 16, [BULK[i] for i in (0, 2, 4, 9, 10)]),
          (2048, 2, 4, [BULK[i] for i in (4, 10, 12)]))


@pytest.mark.parametrize("dt", DTYPES)
def test_every_bulk_pipeline_gives_the_register_pipelines_output_bit_for_bit(dt):
    """bulk 1 (a producer warp, a copy a row), 2 (packed w, a copy a stage) and 3 (packed, warp
    0's lane 0 the producer; with x_early 2, x copied with each stage by warp 0's lanes), with
    the levers a sweep names on them, each copy landing as issued and as late as it can, with
    every warp in step and with one held back: the plain register pipeline's output bit for
    bit, which holds the bounds; every ring wraps."""
    ran = 0
    for k, k_groups, m, levers in SHAPES:
        qw, x = _weights(64, k, dt), _x(m, k, dt)
        assert cuda_limit_fits(qw, dt)
        plain = {"n_tile": 32, "k_groups": k_groups, "unroll": 1}
        y0 = launch.launch(NAME, x, qw, plain)
        f64, port = _errors(y0, x, qw, VARIANTS[NAME].portable(x, qw, plain), dt)
        assert f64 <= 1.0 and port <= 2.0, (k, k_groups, m, f64, port)
        for lever in levers:
            p = {**plain, **lever}
            try:
                cfg = cuda_config.launch_config(NAME, m, k, 64, 64, dt, p)
            except TilingError:  # fp16 at denorm 2 is the plain path's (scales over its limit)
                continue
            steps = k // 128 // k_groups // p["unroll"]
            assert cfg.shared_memory and steps > p["stages"], (p, steps)  # the ring wraps
            for order, copies in SCHEDULES:
                y = launch.launch(NAME, x, qw, p, order, copies=copies)
                assert mx.array_equal(y, y0).item(), (k, k_groups, m, lever, order, copies)
            ran += 1
    assert ran >= 20, ran


def _swept_bulk_tiles() -> list[tuple[str, dict]]:
    """Every bulk tile of the sets the device plan times next (bulk-vs-table, bulk-x) and of
    the candidate table it will bench (bench/results/h200/layouts_1853/chosen_table.json), by
    the shape it runs on."""
    tiles = [(shape, sp.as_params(pt)) for name in ("bulk-vs-table", "bulk-x", "bulk-lag")
             for shape, pts in sp.SETS[name].items() for pt in pts
             if sp.as_params(pt).get("bulk")]
    chosen = json.loads((ROOT / "bench/results/h200/layouts_1853/chosen_table.json").read_text())
    tiles += [(shape, e["params"]) for e in chosen["entries"] if e["params"].get("bulk")
              for shape in e["shapes"]]
    unique = {json.dumps([s, p], sort_keys=True): (s, p) for s, p in tiles}
    return list(unique.values())


def _at_real_k(tiles: list[tuple[str, dict]], dt: str, schedules, m: int = 8) -> None:
    """Each tile at its shape's own K over two column tiles at M=m: its register twin within
    the bounds, and the tile that twin's output bit for bit under each schedule."""
    for shape, p in tiles:
        k = cv.SHAPES[shape][0]
        qw, x = _weights(2 * p["n_tile"], k, dt), _x(m, k, dt)
        if p.get("denorm"):  # the denorm path is what runs, not the plain one it falls back to
            assert float(mx.abs(qw.scales).max()) < cuda.DENORM_SCALE_LIMIT[(dt, p["denorm"])]
        twin = sp.register_twin(p)
        y0 = launch.launch(NAME, x, qw, twin)
        f64, port = _errors(y0, x, qw, VARIANTS[NAME].portable(x, qw, twin), dt)
        assert f64 <= 1.0 and port <= 2.0, (shape, p, f64, port)
        for order, copies in schedules:
            y = launch.launch(NAME, x, qw, p, order, copies=copies)
            assert mx.array_equal(y, y0).item(), (shape, p, order, copies)


def test_the_planned_bulk_tiles_run_at_their_shapes_real_k():
    """The bulk tiles the next device calls time and bench, each at its shape's own K
    (gate/up 5120: 10 K steps a warp; down 17408: 17) over two column tiles, bf16 at M=8: the
    register twin's output bit for bit under every schedule, and that twin within the
    bounds. The candidate table's gate/up entry is among them."""
    tiles = _swept_bulk_tiles()
    assert ("gate_up", {"n_tile": 32, "k_groups": 4, "unroll": 1, "prefetch": 0, "bulk": 3,
                        "denorm": 2, "stages": 2}) in tiles
    assert {s for s, _ in tiles} == {"gate_up", "down"}
    assert sum(p.get("x_early") == 2 for _, p in tiles) == 4
    _at_real_k(tiles, "bfloat16", SCHEDULES)


def test_the_fp16_bulk_tiles_run_at_their_shapes_real_k():
    """bulk-f16's bulk tiles (denorm 1, hi_in_place, plain) in fp16, as the bf16 ones above but
    under one schedule (the second warp held back, the copies late); the scales (spread 0.25)
    under fp16 denorm 1's 2^-4, so the denorm path is what runs."""
    tiles = [(shape, sp.as_params(pt)) for shape, pts in sp.SETS["bulk-f16"].items()
             for pt in pts if sp.as_params(pt).get("bulk")]
    assert len(tiles) == 6 and {s for s, _ in tiles} == {"gate_up", "down"}
    _at_real_k(tiles, "float16", SCHEDULES[-1:])


def test_the_m16_register_sets_bulk_tiles_run_at_m16_and_their_shapes_real_k():
    """bulk-m16-regs's bulk tiles (more warps an SM at M=16: 16 x 2, 16 x 4, min_blocks; down
    16 x 4 and 16 x 8), bf16 at M=16 under one schedule (the second warp held back, the copies
    late): each its register twin's output bit for bit, before a device times them."""
    tiles = [(shape, sp.as_params(pt)) for shape, pts in sp.SETS["bulk-m16-regs"].items()
             for pt in pts if sp.as_params(pt).get("bulk")]
    assert len(tiles) == 9 and {p["n_tile"] for _, p in tiles} == {16, 32}
    _at_real_k(tiles, "bfloat16", SCHEDULES[-1:], m=16)


BODY = VARIANTS[NAME].CUDA_SOURCE
# (what the source says, a mistake in its place, what the emulator says of it); each runs with
# the copies landing as late as they can, but the refill before a warp has read, which runs
# with the copies landing at once and the second warp held back.
MISTAKES = {
    "no wait on a stage's copy": (
        "        if constexpr (!NO_W) dflash2_mbar_wait(full + slot, (st / STAGES) & 1);\n",
        "", "arrived on more times in one phase than its count"),
    "no wait on the scales' copy": (
        "      dflash2_mbar_wait(sb_full, 0);\n", "", "still in flight"),
    "half a stage's bytes expected": (
        "dflash2_mbar_expect_tx(full + st % STAGES, PAYLOAD + X_PAYLOAD);",
        "dflash2_mbar_expect_tx(full + st % STAGES, (PAYLOAD + X_PAYLOAD) / 2);",
        "deadlock in threadgroup .* waiting on an mbarrier"),
    "a stage read from the next stage's words": (
        "w32 + (blockIdx.x * N_ST + st) * (PAYLOAD / 4)",
        "w32 + (blockIdx.x * N_ST + st + 1) * (PAYLOAD / 4)",
        "out-of-bounds bulk copy from buffer 'w'"),
    "a stage copied one slot on": (
        "      dflash2_bulk_g2s(ring + (st % STAGES) * STAGE_BYTES,",
        "      dflash2_bulk_g2s(ring + (st % STAGES + 1) * STAGE_BYTES,",
        "past the end of the launch's dynamic shared memory"),
    "a slot released by one warp of four": (
        "        dflash2_mbar_init(empty + i, K_GROUPS);",
        "        dflash2_mbar_init(empty + i, 1);",
        "deadlock in threadgroup .* waiting on an mbarrier"),
    "the scales' barrier never initialised": (
        "      dflash2_mbar_init(sb_full, 1);\n", "", "before its mbarrier.init"),
    "a slot refilled before every warp has read it": (
        "            dflash2_mbar_wait(empty + (st - LAG) % STAGES, ((st - LAG) / STAGES) & 1);\n",
        "", "deadlock in threadgroup .* waiting on an mbarrier"),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_bulk_pipeline_that_misses_a_wait_or_miscounts_is_caught(monkeypatch, mistake):
    """Each mistake, in the table's bulk tile (3, 2 stages) at gate/up's K, is refused with one
    line naming it: a read before its wait, a copy no thread waits for, bytes the barrier never
    sees, a copy out of w or past the ring, a refill before the slot's readers are done (the
    slot's barrier then completes twice before the held-back warp waits, and it waits on)."""
    source, wrong, found = MISTAKES[mistake]
    assert BODY.count(source) == 1, mistake
    monkeypatch.setattr(VARIANTS[NAME], "CUDA_SOURCE", BODY.replace(source, wrong))
    p = {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 2, "bulk": 3}
    qw, x = _weights(64, 5120, "bfloat16"), _x(8, 5120, "bfloat16")
    order, copies = (("lagging", "at_issue") if mistake.startswith("a slot refilled")
                     else ("forward", "late"))
    with pytest.raises(EmulatorError, match=found) as e:
        launch.launch(NAME, x, qw, p, order, copies=copies)
    assert "\n" not in str(e.value)


def test_bulk_ablate_takes_out_the_part_it_names():
    """The bulk tiles' legs as the device times them: ``ablate`` 1, the ring's words read back
    and no math (every output zero); 2, no weights copied, the math alone on words made up
    from the step (the output no longer depends on w); 3, x's words made up (the whole
    without x's loads: on x no longer); 4, both made up; 5, x's loads each from the K group's
    first step (L1 hits after it). The emulator runs each."""
    k, dt = 5120, "bfloat16"
    x = _x(8, k, dt)
    qa = _weights(64, k, dt)
    qb = QWeights(qa.wq ^ mx.array(0x5A5A5A5A, dtype=mx.uint32), qa.scales, qa.biases, 64, 4)
    p = {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 2, "bulk": 3, "denorm": 2}
    whole = np.array(launch.launch(NAME, x, qa, p).astype(mx.float32))
    loads = np.array(launch.launch(NAME, x, qa, {**p, "ablate": 1}, copies="late")
                     .astype(mx.float32))
    math = [np.array(launch.launch(NAME, x, q, {**p, "ablate": 2}).astype(mx.float32))
            for q in (qa, qb)]
    assert (loads == 0).all() and np.abs(whole).max() > 0
    assert np.array_equal(math[0], math[1]) and not np.array_equal(math[0], whole)
    # 3: x's words made up (the output follows w, no longer x); 4: both made up
    xb = -x * 0.5
    no_x = [np.array(launch.launch(NAME, xx, q, {**p, "ablate": 3}, copies="late")
                     .astype(mx.float32)) for xx, q in ((x, qa), (xb, qa), (x, qb))]
    assert np.isfinite(no_x[0]).all() and np.abs(no_x[0]).max() > 0
    assert np.array_equal(no_x[0], no_x[1]) and not np.array_equal(no_x[0], no_x[2])
    assert not np.array_equal(no_x[0], whole)
    pure = [np.array(launch.launch(NAME, xx, q, {**p, "ablate": 4}).astype(mx.float32))
            for xx, q in ((x, qa), (xb, qb))]
    assert np.array_equal(pure[0], pure[1])
    assert not np.array_equal(pure[0], no_x[0]) and not np.array_equal(pure[0], math[0])
    # 5: every step's x loads read the K group's first step (the whole on x so repeated)
    x_first = _first_steps(x, p["k_groups"])
    hot = np.array(launch.launch(NAME, x, qa, {**p, "ablate": 5}).astype(mx.float32))
    assert np.array_equal(hot, np.array(launch.launch(NAME, x_first, qa, p).astype(mx.float32)))
    assert not np.array_equal(hot, whole)


def test_a_bad_copies_mode_is_refused_with_one_line():
    qw, x = _weights(64, 1024, "bfloat16"), _x(8, 1024, "bfloat16")
    with pytest.raises(EmulatorError, match="bad copies 'soon': one of at_issue, late"):
        launch.launch(NAME, x, qw, {"n_tile": 32, "k_groups": 2, "unroll": 1}, copies="soon")


def test_a_leader_that_refills_a_stage_later_is_still_right():
    """Not a mistake: warp 0's lane 0 refilling the slot of the stage before its own at 2
    stages (LAG 1: the next stage goes out only as it is needed) is slower, never wrong, and so
    is any lag below the ring's stages. Its
    lane waits on an mbarrier while the rest of its warp runs on to the next mma: the executor
    must hold their mma.sync until that lane comes (the whole warp takes part in it), not
    resolve it without the lane, which leaves NaN where a device gives the right sums."""
    qw, x = _weights(32, 1024, "bfloat16"), _x(8, 1024, "bfloat16")
    plain = {"n_tile": 32, "k_groups": 1, "unroll": 1}
    y0 = launch.launch(NAME, x, qw, plain)
    # lag = stages - 1 (the latest refill), and lag 0 at 3 and 4 stages (the tile key ``lag``:
    # the ring STAGES - 1 ahead, warp 0 waiting on the slowest warp)
    for stages, lag in ((2, 1), (3, 2), (3, 0), (4, 0)):
        cfg = cuda_config.launch_config(NAME, 8, 1024, 32, 64, "bfloat16",
                                        {**VARIANTS[NAME].DEFAULTS, **plain, "stages": stages,
                                         "bulk": 3, "lag": lag})
        assert cfg.template["LAG"] == lag
        for order, copies in SCHEDULES:
            y = launch.launch(NAME, x, qw, {**plain, "stages": stages, "bulk": 3, "lag": lag},
                              order, copies=copies)
            assert mx.array_equal(y, y0).item(), (stages, lag, order, copies)
    for stages in (2, 3):  # the default: 0 at 2 stages, 1 from 3
        cfg = cuda_config.launch_config(NAME, 8, 1024, 32, 64, "bfloat16",
                                        {**VARIANTS[NAME].DEFAULTS, **plain, "stages": stages,
                                         "bulk": 3})
        assert cfg.template["LAG"] == (stages > 2)
    with pytest.raises(TilingError, match="lag=2 refills a slot 2 stages back"):
        cuda_config.launch_config(NAME, 8, 1024, 32, 64, "bfloat16",
                                  {**VARIANTS[NAME].DEFAULTS, **plain, "stages": 2, "bulk": 3,
                                   "lag": 2})
