"""mma_weights_a's ``row_warps`` (a warp per 8 activation rows at M=16, so each warp holds one
accumulator set, as at M=8), run on this CPU by the CUDA emulator: every such tile is the plain
M=16 tile bit for bit, in both orders of the grid, and its mistakes are caught.

N = 64 holds 4 column tiles of 16 or 2 of 32; K = 1024 and 2048 give warps 1-4 K steps at 2, 4
and 8 K groups.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from test_cuda_emulated import DTYPES, N, _case, _x

from kernels import cuda_config
from kernels.cuda_emu import launch
from kernels.metal_emu.executor import EmulatorError
from kernels.tiling import TilingError
from kernels.variants import VARIANTS

NAME = "mma_weights_a"
# (K, plain tile): the table's M=16 levers (unroll 2, prefetch, x_early) at 2, 4 and 8 K groups.
TILES = [(1024, {"n_tile": 16, "k_groups": 4, "unroll": 1}),
         (1024, {"n_tile": 32, "k_groups": 2, "unroll": 2}),
         (1024, {"n_tile": 32, "k_groups": 4, "unroll": 1, "x_early": 1}),
         (2048, {"n_tile": 16, "k_groups": 8, "unroll": 1, "prefetch": 1}),
         (2048, {"n_tile": 32, "k_groups": 8, "unroll": 2, "x_early": 1})]


@pytest.mark.parametrize("dt", DTYPES)
def test_row_warps_give_the_plain_m16_tiles_output_bit_for_bit(dt):
    """Each row tile's accumulator takes the plain tile's mma in its order, and the K groups'
    sums are added in the plain order: the output is the plain M=16 tile's, bit for bit, with
    the grid forward or reversed; denorm 2 on top in bf16."""
    for k, plain in TILES:
        qw, x = _case(k, dt), _x(16, k, dt)
        levers = [plain] + ([{**plain, "denorm": 2}] if dt == "bfloat16" else [])
        for tile in levers:
            y0 = launch.launch(NAME, x, qw, tile)
            rows = {**tile, "row_warps": 2}
            cfg = cuda_config.launch_config(NAME, 16, k, N, 64, dt, rows)
            assert (cfg.threads, cfg.grid // cfg.threads) == (64 * tile["k_groups"],
                                                              N // tile["n_tile"])
            assert (cfg.template["M_ROWS"], cfg.template["ROW_WARPS"]) == (8, 2)
            for order in ("forward", "reverse"):
                y = launch.launch(NAME, x, qw, rows, order)
                assert mx.array_equal(y, y0).item(), (k, rows, order)


def test_each_row_tile_reads_its_own_rows():
    """Rows 8-15 differ from rows 0-7 in x, and so in y: a warp on the wrong rows shows."""
    k = 1024
    qw, x = _case(k, "bfloat16"), _x(16, k, "bfloat16")
    plain = {"n_tile": 16, "k_groups": 4, "unroll": 1}
    y0 = np.array(launch.launch(NAME, x, qw, plain).astype(mx.float32))
    assert not np.array_equal(y0[:8], y0[8:])
    y = np.array(launch.launch(NAME, x, qw, {**plain, "row_warps": 2}).astype(mx.float32))
    assert np.array_equal(y, y0)


@pytest.mark.parametrize("m,params,found", [
    (8, {}, "M=16 exactly"),
    (12, {}, "not M=12"),
    (16, {"stages": 2}, "register pipeline"),
    (16, {"stages": 2, "bulk": 3}, "register pipeline"),
    (16, {"col_warps": 2}, "col_warps=2"),
    (16, {"cluster": 2}, "cluster=2"),
    (16, {"x_share": 1, "cluster": 4}, "x_share=1"),
    (16, {"k_groups": 32}, "threads a block exceed"),
])
def test_a_row_warps_tile_that_cannot_be_is_refused_with_one_line(m, params, found):
    with pytest.raises(TilingError, match=found) as e:
        cuda_config.launch_config(NAME, m, 4096, N, 64, "bfloat16",
                                  {"n_tile": 16, "k_groups": 4, "unroll": 1, "row_warps": 2,
                                   **params})
    assert "\n" not in str(e.value)


def test_the_plain_tiles_constants_leave_their_kernel_as_it_was():
    """row_warps = 1 is the plain tile: M_ROWS the whole M, the plain grid and block."""
    cfg = cuda_config.launch_config(NAME, 16, 5120, 17408, 64, "bfloat16",
                                    {"n_tile": 32, "k_groups": 4, "unroll": 2})
    assert (cfg.threads, cfg.grid) == (128, 17408 // 32 * 128)
    assert (cfg.template["M_ROWS"], cfg.template["ROW_WARPS"]) == (16, 1)


MUTANTS = {
    # every warp on rows 0-7
    "  const T* x_lane = x + (8 * rw + g) * K + 32 * t;\n":
        "  const T* x_lane = x + g * K + 32 * t;\n",
    # every warp's sums stored at rows 0-7
    "      part[warp / ROW_WARPS][8 * rw + 2 * t][16 * c + g] = acc[0][c][0];\n":
        "      part[warp / ROW_WARPS][2 * t][16 * c + g] = acc[0][c][0];\n",
    # a warp on its row neighbour's K group
    "  const int kgroup = rank * BLOCK_GROUPS + warp / (COL_WARPS * ROW_WARPS);\n":
        "  const int kgroup = rank * BLOCK_GROUPS + warp / COL_WARPS % K_GROUPS;\n",
    # the sums of the first row tile only: the emulator finds rows 8-15 of y never written
    "  for (int e = threadIdx.x; e < ROW_WARPS * M_ROWS * COLS; e += blockDim.x) {\n":
        "  for (int e = threadIdx.x; e < M_ROWS * COLS; e += blockDim.x) {\n",
}
UNWRITTEN = "  for (int e = threadIdx.x; e < ROW_WARPS * M_ROWS * COLS; e += blockDim.x) {\n"


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_a_mistake_in_the_row_warps_is_caught(monkeypatch, mutant):
    v = VARIANTS[NAME]
    assert v.CUDA_SOURCE.count(mutant) == 1, mutant
    qw, x = _case(1024, "bfloat16"), _x(16, 1024, "bfloat16")
    plain = {"n_tile": 16, "k_groups": 4, "unroll": 1}
    y0 = launch.launch(NAME, x, qw, plain)  # before the mutant: it may touch the plain tile
    monkeypatch.setattr(v, "CUDA_SOURCE", v.CUDA_SOURCE.replace(mutant, MUTANTS[mutant]))
    if mutant == UNWRITTEN:
        with pytest.raises(EmulatorError, match="never written"):
            launch.launch(NAME, x, qw, {**plain, "row_warps": 2})
        return
    y = launch.launch(NAME, x, qw, {**plain, "row_warps": 2})
    assert not mx.array_equal(y, y0).item()
