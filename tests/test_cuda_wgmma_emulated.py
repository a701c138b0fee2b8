"""``wgmma``, a tile key of mma_weights_a: each K group's 4 warps a warpgroup, each pair of a
word's mma one ``wgmma.mma_async.m64nNk16`` whose B, the activations, the warpgroup staged
once in shared memory, run on this CPU by the CUDA emulator.

Why a lever: at M=16 the mma.sync tiles pay for x, each lane loading its rows' activations
every K step (without those loads the M=8 tile ran M=16 as fast as M=8 on an H100:
bench/results/h100/xcost_1037), and time must stay flat from M=1 to M=16 (issue 14). The
emulator models wgmma as each warp's 16 rows of A by the 16 x N B its descriptor names, one
rounding as mma.sync's model, so here every tile gives the plain tile's output bit for bit;
whether the tensor core adds the same way is the device's check (bench/sweep_records_wgmma.WGMMA).
"""

from __future__ import annotations

import sys
from pathlib import Path

import mlx.core as mx
import pytest

from kernels import cuda, cuda_config, cuda_offline
from kernels.cuda_emu import launch
from kernels.tiling import TilingError
from kernels.variants import VARIANTS
from tests.test_cuda_bulk_emulated import _weights
from tests.test_cuda_emulated import DTYPES, _x

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import cuda_verify as cv
import sweep_points as sp
import sweep_records_wgmma as sw

NAME = "mma_weights_a"
BODY = VARIANTS[NAME].CUDA_SOURCE
WG = {"n_tile": 16, "col_warps": 4, "wgmma": 1}
# (K, M, tile): M = 1, 5 (rows past M: B's zero rows), 8 (N = 8), 13 and 16 (N = 16); K steps
# a warpgroup of 8, 2 and 1 (slots reused, the last step's next load never issued); unroll,
# prefetch, denorm 2 and the cp.async ring; x_ahead (x three K steps ahead) over 8 steps, over
# one (fewer than it looks ahead: the loads past the group never issued) and on the ring; wgmma
# 2 (a step's wgmma in flight, x in three slots) over 4 and 8 steps, with prefetch and unroll 2
TILES = [(1024, 8, {**WG, "k_groups": 1, "unroll": 2, "x_ahead": 1}),
         (1024, 16, {**WG, "k_groups": 2, "unroll": 1, "prefetch": 1, "wgmma": 2}),
         (512, 5, {**WG, "k_groups": 4, "unroll": 1, "x_ahead": 1}),
         (512, 1, {**WG, "k_groups": 2, "unroll": 2}),
         (2048, 13, {**WG, "k_groups": 2, "unroll": 2, "denorm": 2, "wgmma": 2}),
         # the cp.async ring: 4 and 6 stages over 8 and 16 K steps, 2 over 4 a warpgroup
         (1024, 8, {**WG, "k_groups": 1, "unroll": 1, "stages": 4}),
         (2048, 16, {**WG, "k_groups": 1, "unroll": 1, "stages": 6}),
         (1024, 13, {**WG, "k_groups": 2, "unroll": 1, "stages": 2, "x_ahead": 1})]


@pytest.mark.parametrize("dt", DTYPES)
def test_wgmma_gives_the_plain_tiles_output_bit_for_bit(dt):
    """Two warpgroups' worth of columns (N = 128), so a block's column base counts too."""
    for k, m, tile in TILES:
        if dt == "float16" and tile.get("denorm") == 2:
            tile = {**tile, "denorm": 1}
        qw, x = _weights(128, k, dt), _x(m, k, dt)
        y0 = launch.launch(NAME, x, qw, {"n_tile": 16, "k_groups": tile["k_groups"],
                                         "unroll": 1})
        y = launch.launch(NAME, x, qw, tile)
        assert mx.array_equal(y, y0).item(), (k, m, tile)
        assert not mx.array_equal(y0, mx.zeros_like(y0)).item()


# Each mutant breaks one thing the emulator must see: a pair at the other k-slot of its block,
# x's next step never loaded (the slot holds the wrong step), B read from the other slot, the
# second half of a word's pairs given the first half's block; with x_ahead, the later steps'
# registers not moved down, and the steps it looks ahead at the start not loaded. (The tile
# each runs on: an index of TILES.)
MUTANTS = [("dflash2_wgmma_b_offset(8 * jj + 2 * tq, n)) = b[2 * h + jj];",
            "dflash2_wgmma_b_offset(8 * jj + 2 * tq, n)) = b[2 * h + 1 - jj];", 1),
           (("if (step + WG_DEPTH < (kgroup + 1) * GROUP_STEPS) wg_issue(step + WG_DEPTH, "
             "wr[WG_DEPTH - 1]);"), "", 1),
           ("const unsigned char* slot = wg_base + wg_slot(step) * WG_SLOT;",
            "const unsigned char* slot = wg_base + wg_slot(step + 1) * WG_SLOT;", 1),
           ("slot + (2 * i + 1) * WG_KBLOCK);", "slot + (2 * i) * WG_KBLOCK);", 1),
           ("wr[d][j] = wr[d + 1][j];", "wr[d][j] = wr[d][j];", 0),
           ("if (step + d < (kgroup + 1) * GROUP_STEPS) wg_issue(step + d, wr[d]);", ";", 0)]


@pytest.mark.parametrize("mutant", range(len(MUTANTS)))
def test_a_broken_staging_or_b_is_caught(monkeypatch, mutant):
    right, wrong, at = MUTANTS[mutant]
    assert BODY.count(right) == 1, right
    monkeypatch.setattr(VARIANTS[NAME], "CUDA_SOURCE", BODY.replace(right, wrong))
    k, m, tile = TILES[at]
    qw, x = _weights(64, k, "bfloat16"), _x(m, k, "bfloat16")
    y0 = launch.launch(NAME, x, qw, {"n_tile": 16, "k_groups": tile["k_groups"], "unroll": 1})
    y = launch.launch(NAME, x, qw, tile)
    assert not mx.array_equal(y, y0).item()


def test_wgmma_is_refused_off_a_warpgroup_of_the_register_pipeline_or_ring():
    base = {**VARIANTS[NAME].DEFAULTS, **WG, "k_groups": 2, "unroll": 1}
    ours = "wgmma makes each K group's 4 warps a warpgroup"
    two = "wgmma=2 leaves a step's wgmma in flight"
    for other, match in (({"col_warps": 2}, ours), ({"x_early": 1}, ours),
                         ({"ablate": 3, "stages": 2}, ours),
                         ({"x_prefetch": 2}, ours), ({"cluster": 2}, ours),
                         ({"wgmma": 2}, two), ({"wgmma": 2, "stages": 2, "prefetch": 1}, two),
                         ({"wgmma": 2, "unroll": 2, "k_groups": 8}, two),  # 5 steps a group: unroll 1
                         ({"bulk": 3, "stages": 2}, "col_warps and cluster take"),
                         ({"stages": 2, "wgmma": 0}, "col_warps and cluster take")):
        with pytest.raises(TilingError, match=match):
            cuda_config.launch_config(NAME, 8, 5120, 17408, 64, "bfloat16", {**base, **other})
    cfg = cuda_config.launch_config(NAME, 16, 5120, 17408, 64, "bfloat16", base)
    assert (cfg.threads, cfg.grid // cfg.threads, cfg.template["WGMMA"]) == (256, 272, True)


def test_ablate_3_and_4_leave_wgmmas_x_unstaged():
    """The diagnostic of what staging x costs a wgmma tile
    (bench/sweep_records_wgmma.WGMMA_ABLATE, timed beside the whole tile): with ablate 3 (and 4, the weights made up too) no step loads
    or stages x, so B stays the zeros the warpgroup starts with and every output is 0, where the
    whole tile's are not; the ring has no such path and is refused."""
    k, m, tile = TILES[1]
    qw, x = _weights(64, k, "bfloat16"), _x(m, k, "bfloat16")
    whole = launch.launch(NAME, x, qw, tile)
    assert not mx.array_equal(whole, mx.zeros_like(whole)).item()
    for ablate in (3, 4):
        y = launch.launch(NAME, x, qw, {**tile, "ablate": ablate})
        assert mx.array_equal(y, mx.zeros_like(y)).item(), ablate
    assert cuda_config.takes_x_ablate({**WG, "wgmma": 1})
    assert not cuda_config.takes_x_ablate({**WG, "wgmma": 1, "stages": 4})


# One tile of each kind the sets hold: all of K in a warpgroup with prefetch, 4 K groups (512
# threads), the ring with all of K and with 2 K groups (the rest differ from these in constants)
COMPILED = [((16, 1, 1, 1, 0), sw.WG), ((16, 4, 1, 0, 0), sw.WG), ((16, 1, 1, 0, 6), sw.WG),
            ((16, 2, 1, 0, 2), sw.WG), ((16, 1, 1, 1, 0), sw.AHEAD), ((16, 2, 1, 0, 2), sw.AHEAD),
            ((16, 1, 1, 1, 0), sw.INFLIGHT)]


def test_every_wgmma_tile_of_the_sets_has_a_launch():
    ran = 0
    for shape, pts in (*sp.SETS["wgmma"].items(), *sp.SETS["wgmma-ring"].items(),
                       *sp.SETS["wgmma-next"].items(), *sp.SETS["wgmma-ablate"].items()):
        k, n = cv.SHAPES[shape]
        for pt in pts:
            p = sp.as_params(pt)
            if p.get("wgmma"):
                for m in (1, 8, 16):
                    cfg = cuda_config.launch_config(NAME, m, k, n, 64, "bfloat16",
                                                    {**VARIANTS[NAME].DEFAULTS, **p})
                    assert cfg.template["WGMMA"] and cfg.threads % 128 == 0
                ran += 1
    assert ran == 21 + 13 + 6, ran
    assert all(pt in sw.WGMMA["gate_up"] + sw.WGMMA_RING["gate_up"] + sw.WGMMA_NEXT["gate_up"]
               for pt in COMPILED)


@pytest.mark.skipif(cuda_offline.nvcc() is None, reason="needs nvcc")
@pytest.mark.parametrize("pt", COMPILED, ids=str)
def test_a_wgmma_tile_compiles_to_warpgroup_mma_for_sm90a_and_fits_its_block(pt):
    """nvcc for sm_90a as MLX builds each launch (gate/up): the tile issues wgmma (8 a K step
    of each batch's code, no mma.sync), N = 8 rows at M=8 and 16 at M=16, and at M=16 (the
    most registers) compiles without a spill, a block's registers fitting an SM."""
    p = sp.as_params(pt)
    k, n = cv.SHAPES["gate_up"]
    for m, nw in ((8, 8), (16, 16)):
        cfg = cuda_config.launch_config(NAME, m, k, n, 64, "bfloat16",
                                        {**VARIANTS[NAME].DEFAULTS, **p})
        ptx = cuda_offline.ptx(NAME, cfg)
        # a and b take turns (prefetch); the ring's loop is one step
        batches = 2 if cfg.template["PREFETCH"] else 1
        steps = 1 if cfg.template["STAGES"] else cfg.template["UNROLL"] * batches
        assert ptx.count("wgmma.mma_async") == 8 * steps, p
        assert f"m64n{nw}k16" in ptx and "mma.sync" not in ptx, (p, m)
    report = cuda_offline.compile_launch(NAME, cfg)
    assert report.spill_bytes == 0 and report.registers * cfg.threads <= 65536, (p, report)


@pytest.mark.skipif(cuda_offline.nvcc() is None or cuda_offline.nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_wgmma_2_leaves_a_step_in_flight_and_waits_for_all_before_the_sums():
    """What the emulator cannot show (it runs each wgmma at once): in the machine code for
    sm_90a, wgmma 1 waits for every group each step (``WARPGROUP.DEPBAR.LE gsb0, 0x0``), wgmma 2
    for all but one (``0x1``, one a step of code: the two batches taking turns) and for all
    once after the loop, before the accumulators are read; ptxas serialized nothing (its
    warning would name the wgmma pipeline)."""
    k, n = cv.SHAPES["gate_up"]
    waits = {}
    for wg in (1, 2):
        p = {**VARIANTS[NAME].DEFAULTS, **sp.as_params(((16, 1, 1, 1, 0), {**sw.WG, "wgmma": wg}))}
        cfg = cuda_config.launch_config(NAME, 8, k, n, 64, "bfloat16", p)
        sass = cuda_offline.sass_sm90(NAME, cfg.activation, cfg.template,
                                      cuda.kernel_header(NAME, cfg))
        waits[wg] = [ln.split("DEPBAR")[1].split(";")[0].strip() for ln in sass
                     if "WARPGROUP.DEPBAR" in ln]
        msgs, _ = cuda_offline._nvcc_sm90(NAME, cfg.activation, cfg.template,
                                          cuda.kernel_header(NAME, cfg), "-cubin",
                                          "--ptxas-options=-v")
        assert "serialized" not in msgs, msgs[-800:]
    assert waits[1] == [".LE gsb0, 0x0"] * 2, waits[1]
    assert waits[2] == [".LE gsb0, 0x1"] * 2 + [".LE gsb0, 0x0"], waits[2]
