"""``x_ahead``, a tile key of mma_weights_a: the bulk pipeline's activations loaded two K steps
ahead into registers rather than one, run on this CPU by the CUDA emulator.

Why a lever: on an H100 43% of bulk 3's stall samples waited on the next step's x, loaded one
step ahead (bench/results/h100/bulk3_stalls_1632), and x's words made up (ablate 3) took
1.8 us off the candidate tile's 22.9-23.8 (bulk_xcost_1314). The levers that moved x earlier
through memory cost more than they saved: a cp.async ring (its copies, waits and shared reads:
bulk3_xring_1648), x with each stage (bulk_x_2303), L1 prefetches (L2 traffic up 52-106 MB:
h200/xprefetch_1331). Registers were what was left: 16 more a lane at M=8 (nvcc: 92 -> 112 on
gate/up, so 4 blocks an SM, not 5; timed slower on an H100, bench/results/h100/xahead_f16_1604).
Loading earlier changes no value, so every tile gives its own output without it bit for bit,
at K groups of 1, 2 and many steps.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

from kernels import cuda_config, cuda_offline
from kernels.cuda_emu import launch
from kernels.tiling import TilingError
from kernels.variants import VARIANTS
from tests.test_cuda_bulk_emulated import (
    SCHEDULES,
    _weights,
    ptxas_with_and_without,
    with_key_bit_for_bit,
)
from tests.test_cuda_emulated import DTYPES, _x

NAME = "mma_weights_a"
BODY = VARIANTS[NAME].CUDA_SOURCE
BULK = {"n_tile": 32, "unroll": 1, "stages": 2, "bulk": 3}
# (K, M, tile): K steps a warp of 8, 2, 1 and 16 (the loads past a group's end never issued), at
# M=8, 16 (two activation tiles) and 5 (rows past M), unroll 2 (two steps a stage), denorm 2
# and a deeper ring at lag 0
TILES = [(4096, 8, {**BULK, "k_groups": 4, "denorm": 2}),
         (1024, 8, {**BULK, "k_groups": 4}),
         (512, 16, {**BULK, "k_groups": 4}),
         (4096, 5, {**BULK, "k_groups": 2, "unroll": 2, "stages": 3, "lag": 0}),
         (2048, 16, {**BULK, "k_groups": 2, "denorm": 1})]


@pytest.mark.parametrize("dt", DTYPES)
def test_x_ahead_leaves_every_tiles_output_bit_for_bit(dt):
    """Every tile in bf16 under every schedule; in fp16 three of them under the last."""
    tiles = TILES if dt == "bfloat16" else TILES[1:4]
    schedules = SCHEDULES if dt == "bfloat16" else SCHEDULES[-1:]
    ran = with_key_bit_for_bit("x_ahead", tiles, dt, schedules)
    assert ran == len(tiles) * len(schedules), ran


def test_a_step_given_the_wrong_activations_is_caught(monkeypatch):
    """Without the rotation of the step two on into the next, each later step reads the
    activations of the step before: the output is not the plain tile's."""
    rotation = "if (more2) xn[mt][i] = xf[mt][i];"
    assert BODY.count(rotation) == 1
    monkeypatch.setattr(VARIANTS[NAME], "CUDA_SOURCE", BODY.replace(rotation, ""))
    qw, x = _weights(64, 4096, "bfloat16"), _x(8, 4096, "bfloat16")
    y0 = launch.launch(NAME, x, qw, {"n_tile": 32, "k_groups": 4, "unroll": 1})
    y = launch.launch(NAME, x, qw, {**BULK, "k_groups": 4, "x_ahead": 1})
    assert not mx.array_equal(y, y0).item()


def test_x_ahead_is_refused_off_the_bulk_pipelines_load_x():
    base = {**VARIANTS[NAME].DEFAULTS, "n_tile": 32, "k_groups": 4, "unroll": 1, "x_ahead": 1}
    for other in ({}, {"stages": 2}, {"bulk": 3, "stages": 2, "x_early": 1},
                  {"bulk": 3, "stages": 2, "x_early": 2}):
        with pytest.raises(TilingError, match="x_ahead loads x two K steps ahead"):
            cuda_config.launch_config(NAME, 8, 5120, 17408, 64, "bfloat16", {**base, **other})


@pytest.mark.skipif(cuda_offline.nvcc() is None, reason="needs nvcc")
def test_the_x_ahead_set_holds_x_in_registers_and_its_held_tiles_fit_their_blocks():
    """nvcc for sm_90 at M=8 as MLX builds each launch: every x_ahead tile of the set holds
    more registers than its twin without it (the step two on is loaded, not folded away), and
    the ones held by min_blocks fit that many blocks an SM (65536 registers)."""
    ran = 0
    for shape, p, reports, threads in ptxas_with_and_without("x_ahead", "x-ahead", 8):
        assert reports[1].registers > reports[0].registers, (shape, p, reports)
        if p.get("min_blocks"):
            assert p["min_blocks"] * threads * reports[1].registers <= 65536, (p, reports)
        ran += 1
    assert ran == 3, ran
