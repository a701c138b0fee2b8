"""``x_prefetch``, a tile key of mma_weights_a: each K step's activation lines brought into L1
that many steps ahead (``prefetch.global.L1``), run on this CPU by the CUDA emulator.

Why a lever: on an H100 (2026-12-07 13:14 UTC, bench/results/h100/bulk_xcost_1314) the table
candidate's bulk tile ran 22.9-23.8 us whole and 21.1-22.0 with x's words made up (ablate 3),
and its L2 traffic showed x already read about once an SM (87.3 MB against 77.1 without x):
what x costs is each step's first read of its lines from L2, one step ahead under the DRAM
stream, not its bytes. A prefetch changes no value, so every tile must give its own output
without it bit for bit; the emulator reads each prefetched line's first byte, so a prefetch
outside x is refused as a load there would be.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

from kernels import cuda_config, cuda_offline
from kernels.cuda_emu import launch
from kernels.metal_emu.executor import EmulatorError
from kernels.tiling import TilingError
from kernels.variants import VARIANTS
from tests.test_cuda_bulk_emulated import _weights
from tests.test_cuda_emulated import DTYPES, _x

NAME = "mma_weights_a"
BODY = VARIANTS[NAME].CUDA_SOURCE
# (K, M, tile): the register pipeline (unroll 2 and 1 with x_early, at M=8 and 16, row warps),
# the cp.async ring without x_early, and the bulk pipeline (the chosen table's gate/up tile)
TILES = [(2048, 8, {"n_tile": 32, "k_groups": 2, "unroll": 2, "denorm": 2}),
         (2048, 16, {"n_tile": 32, "k_groups": 2, "unroll": 1, "x_early": 1}),
         (2048, 16, {"n_tile": 16, "k_groups": 2, "unroll": 1, "row_warps": 2}),
         (2048, 8, {"n_tile": 16, "k_groups": 2, "unroll": 1, "stages": 3}),
         (4096, 8, {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 2, "bulk": 3,
                    "denorm": 2}),
         (4096, 5, {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 2, "bulk": 3})]


@pytest.mark.parametrize("dt", DTYPES)
def test_x_prefetch_leaves_every_tiles_output_bit_for_bit(dt):
    """Every tile in bf16; in fp16 (whose nibbles take another path, the same prefetches) a
    register tile (M=16), the ring and a bulk tile (M=5)."""
    ran = 0
    tiles = TILES if dt == "bfloat16" else [TILES[1], TILES[3], TILES[5]]
    for k, m, tile in tiles:
        qw, x = _weights(64, k, dt), _x(m, k, dt)
        y0 = launch.launch(NAME, x, qw, tile)
        # 1: a step's only; 8: a K group's steps (the first step's loop, every later one past
        # the group's end)
        for d in (1, 8):
            y = launch.launch(NAME, x, qw, {**tile, "x_prefetch": d})
            assert mx.array_equal(y, y0).item(), (k, m, tile, d)
            ran += 1
    assert ran == 2 * len(tiles), ran


def test_a_prefetch_past_its_k_group_or_past_x_is_caught(monkeypatch):
    """Without the K group's end the last group's prefetches run past x: refused."""
    guard = "if (step + X_PREFETCH < end) dflash2_prefetch_l1"
    assert BODY.count(guard) == 1
    monkeypatch.setattr(VARIANTS[NAME], "CUDA_SOURCE",
                        BODY.replace(guard, "if (true) dflash2_prefetch_l1"))
    qw, x = _weights(64, 2048, "bfloat16"), _x(8, 2048, "bfloat16")
    with pytest.raises(EmulatorError, match="out of bounds|out-of-bounds|outside") as e:
        launch.launch(NAME, x, qw, {"n_tile": 32, "k_groups": 2, "unroll": 2, "x_prefetch": 2})
    assert "\n" not in str(e.value)


def test_x_prefetch_is_refused_where_x_does_not_come_from_load_xs_global_loads():
    base = {**VARIANTS[NAME].DEFAULTS, "n_tile": 32, "k_groups": 4, "unroll": 1,
            "x_prefetch": 2}
    for other in ({"x_early": 3}, {"bulk": 3, "stages": 2, "x_early": 1},
                  {"bulk": 3, "stages": 2, "x_early": 2}, {"ablate": 3},
                  {"x_share": 1, "cluster": 4}):
        with pytest.raises(TilingError, match="x_prefetch brings into L1"):
            cuda_config.launch_config(NAME, 8, 5120, 17408, 64, "bfloat16", {**base, **other})


@pytest.mark.skipif(cuda_offline.nvcc() is None or cuda_offline.nvdisasm() is None,
                    reason="needs nvcc and nvdisasm")
def test_x_prefetch_compiles_to_l1_prefetches_and_off_leaves_the_machine_code_alone():
    """L1 prefetches (CCTL.E.PF1) in the hot loop, at most x_prefetch of them (one a step and,
    behind the first step's branch, the steps between), and none when off."""
    base = {**VARIANTS[NAME].DEFAULTS, "n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 2,
            "bulk": 3, "denorm": 2}
    counts = {}
    for d in (0, 2):
        cfg = cuda_config.launch_config(NAME, 8, 5120, 17408, 64, "bfloat16",
                                        {**base, "x_prefetch": d})
        sass = cuda_offline.sass_sm90(NAME, "bfloat16", cfg.template)
        counts[d] = sum(1 for i in sass if cuda_offline.sass_opcode(i) == "CCTL"
                        and ".PF1" in i)
        loop = cuda_offline.hot_loop(sass)
        in_loop = sum(1 for i in loop if ".PF1" in i)
        assert (1 <= in_loop <= d) if d else in_loop == 0, (d, in_loop)
    assert counts[0] == 0 and counts[2] >= 2


def test_the_x_prefetch_set_times_each_tile_beside_itself_without_and_launches_at_both_ms():
    """``x-prefetch``: every tile at x_prefetch 0 too (the baseline of the same run), the
    table's M=8 and M=16 register tiles and the chosen table's bulk gate/up tile among them,
    each a launch on its shape at M=8 and 16 (the run times each at both)."""
    import json
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "bench"))
    import cuda_verify as cv
    import sweep_points as sp
    tables = [json.loads((root / f).read_text()) for f in (
        "kernels/selection_table.json", "bench/results/h200/layouts_1853/chosen_table.json")]
    for shape, pts in sp.SETS["x-prefetch"].items():
        tiles = [sp.as_params(pt) for pt in pts]
        # (the bulk tile held to 5 blocks an SM: its baseline is the unbounded tile's)
        assert all({**t, "x_prefetch": 0, "min_blocks": 0} in tiles for t in tiles), shape
        assert {t["x_prefetch"] for t in tiles} == {0, 2, 3}
        shipped = [sp.point_of(e["variant"], e["params"]) for tb in tables for e in tb["entries"]
                   if e["devices"] == ["sm_90"] and e["shapes"][0] == shape
                   and e["M"] in (8, 16) and e["dtypes"] == ["bfloat16"]
                   and e["variant"] == NAME]
        whole = [{**VARIANTS[NAME].DEFAULTS, **t} for t in tiles]
        assert shipped and all({**VARIANTS[NAME].DEFAULTS, **t} in whole for t in shipped)
        k, n = cv.SHAPES[shape]
        for t in tiles:
            for m in (8, 16):
                cfg = cuda_config.launch_config(NAME, m, k, n, 64, "bfloat16", t)
                assert cfg.template["X_PREFETCH"] == t["x_prefetch"] and cfg.grid > 0
