"""``x_rot``, a tile key of mma_weights_a: the bulk pipeline loads the next K step's activations
word by word into the registers this step's word has just left, run on this CPU by the CUDA
emulator and, for its registers, compiled by nvcc.

Why a lever: at M=16 the bulk tile takes 132 registers (3 blocks an SM against 5 at M=8), and
its no-x floor is 25.9 us against 36.0 whole (an H100, bench/results/h100/xl1_2231): a lane
holds a step's activations twice, the step being used (32 registers at M=16) and the next one
loading (32 more). Loading the next step's word i once word i's pairs are taken holds them once.
Loading in another order changes no value, so every tile gives its own output without it bit
for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import cuda_verify as cv

NAME = "mma_weights_a"
BODY = VARIANTS[NAME].CUDA_SOURCE
BULK = {"n_tile": 32, "unroll": 1, "stages": 2, "bulk": 3}
# (K, M, tile): K steps a warp of 8, 2, 1 and 16 (no load past a group's end), at M=16 (two
# activation tiles), 8 and 5 (rows past M), unroll 2 (two steps a stage), denorm 1 and 2, a
# deeper ring at lag 0, min_blocks (registers held, so spills: the same values), and 16, 32 and
# 64 columns a warp
TILES = [(4096, 16, {**BULK, "k_groups": 4, "denorm": 2}),
         (1024, 8, {**BULK, "k_groups": 4}),
         (512, 16, {**BULK, "k_groups": 4}),
         (4096, 5, {**BULK, "k_groups": 2, "unroll": 2, "stages": 3, "lag": 0}),
         (2048, 16, {**BULK, "n_tile": 16, "k_groups": 8, "denorm": 2, "min_blocks": 3}),
         (2048, 13, {**BULK, "k_groups": 2, "denorm": 1}),
         (1024, 16, {**BULK, "n_tile": 64, "k_groups": 2, "denorm": 2})]


@pytest.mark.parametrize("dt", DTYPES)
def test_x_rot_leaves_every_tiles_output_bit_for_bit(dt):
    """Every tile in bf16 under every schedule; in fp16 three of them under the last."""
    tiles = TILES if dt == "bfloat16" else TILES[:3]
    schedules = SCHEDULES if dt == "bfloat16" else SCHEDULES[-1:]
    ran = with_key_bit_for_bit("x_rot", tiles, dt, schedules)
    assert ran == len(tiles) * len(schedules), ran


@pytest.mark.parametrize("mistake", [
    # the next step's word loaded before this step's word has given its pairs
    ("mma_math_then(wq, sc, bi, xa, [&](int i) {",
     "mma_math_then(wq, sc, bi, xa, [&](int i_) { const int i = (i_ + 1) & 3;"),
    # this step's word again, not the next step's
    ("load_x_word(xa, step + 1, i)", "load_x_word(xa, step, i)"),
])
def test_a_word_loaded_out_of_turn_is_caught(monkeypatch, mistake):
    old, new = mistake
    assert BODY.count(old) == 1
    monkeypatch.setattr(VARIANTS[NAME], "CUDA_SOURCE", BODY.replace(old, new))
    qw, x = _weights(64, 4096, "bfloat16"), _x(16, 4096, "bfloat16")
    y0 = launch.launch(NAME, x, qw, {"n_tile": 32, "k_groups": 4, "unroll": 1})
    y = launch.launch(NAME, x, qw, {**BULK, "k_groups": 4, "x_rot": 1})
    assert not mx.array_equal(y, y0).item()


def test_x_rot_is_refused_off_the_bulk_pipelines_plain_load_x():
    base = {**VARIANTS[NAME].DEFAULTS, "n_tile": 32, "k_groups": 4, "unroll": 1, "x_rot": 1}
    for other in ({}, {"stages": 2}, {"bulk": 3, "stages": 2, "x_early": 1},
                  {"bulk": 3, "stages": 2, "x_ahead": 1}, {"bulk": 3, "stages": 2, "ablate": 3},
                  {"bulk": 3, "stages": 2, "x_prefetch": 2}):
        with pytest.raises(TilingError, match="x_rot loads the next K step's activations"):
            cuda_config.launch_config(NAME, 16, 5120, 17408, 64, "bfloat16", {**base, **other})


@pytest.mark.skipif(cuda_offline.nvcc() is None, reason="needs nvcc")
def test_x_rot_holds_fewer_registers_and_its_held_tiles_fit_their_blocks():
    """nvcc for sm_90 at M=16 as MLX builds each launch: every x_rot tile of the set takes
    fewer registers than its twin without it, or, held by min_blocks to the same count, spills
    less (nvcc 13: gate/up's bulk tile 132 -> 126, 4 blocks an SM, not 3; held to 5 blocks, 64
    bytes spilled against 220; down's 16 x 8 held to 3 blocks, none against 136)."""
    ran = 0
    for shape, p, reports, threads in ptxas_with_and_without("x_rot", "bulk-m16-xrot", 16):
        old, new = reports[0], reports[1]
        assert (new.registers < old.registers
                or (new.registers == old.registers and new.spill_bytes < old.spill_bytes)), \
            (shape, p, reports)
        if p.get("min_blocks"):
            assert p["min_blocks"] * threads * new.registers <= 65536, (p, reports)
        ran += 1
    assert ran >= 4, ran


@pytest.mark.skipif(cuda_offline.nvcc() is None or cuda_offline.nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_x_rot_drops_the_selects_of_the_next_steps_x():
    """The bulk tile's K loop (the machine code's innermost loop with the mma, a K step of 128)
    issues fewer instructions with x_rot at M=8 and 16: without it each step ends putting the
    next step's x into the registers the math reads (``if (more) xa = xn``: a SEL a register,
    16 a lane at M=8, 32 at M=16); with it the loads land there (nvcc 13, bf16: 307 -> 286
    at M=8, 367 -> 329 at M=16)."""
    from kernels import cuda

    k, n = cv.SHAPES["gate_up"]
    tile = {**VARIANTS[NAME].DEFAULTS, **BULK, "k_groups": 4, "denorm": 2}
    for m in (8, 16):
        counts = {}
        for r in (0, 1):
            cfg = cuda_config.launch_config(NAME, m, k, n, 64, "bfloat16", {**tile, "x_rot": r})
            sass = cuda_offline.sass_sm90(NAME, cfg.activation, cfg.template,
                                          cuda.kernel_header(NAME, cfg))
            loop = cuda_offline.hot_loop(sass)
            counts[r] = (len(loop), sum(cuda_offline.sass_opcode(i) == "HMMA" for i in loop))
        assert counts[1][1] == counts[0][1] == 2 * m, (m, counts)  # the same mma
        assert counts[1][0] <= counts[0][0] - 2 * m, (m, counts)  # the SELs (2M a lane) gone
