"""mma_weights_a's ``col_warps``, ``cluster`` and ``x_share`` (x read once for several column
tiles), run on this CPU by the CUDA emulator: every such tile is its plain (n_tile, k_groups)
register tile bit for bit, in every order of the threads tried, and its mistakes are caught.

Shapes are small but take every path: N = 64 holds 4 column tiles of 16 or 2 of 32, K = 1024
gives warps 4 and 2 K steps at 2 and 4 K groups, M = 16 two activation tiles.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from test_cuda_emulated import DTYPES, N, _case, _order_sensitive_case, _x

from kernels import cuda_config
from kernels.cuda_emu import launch
from kernels.metal_emu.executor import EmulatorError
from kernels.tiling import TilingError
from kernels.variants import VARIANTS

NAME = "mma_weights_a"
# (K, M, plain tile, col_warps, cluster): warps on 2 and 4 column tiles, K groups in one block
# (cluster 1) or one a block (cluster = k_groups) or two a block; the table's levers on top
# (unroll 2 with prefetch, x_early, denorm 2 in bf16).
TILES = [(1024, 8, {"n_tile": 16, "k_groups": 4, "unroll": 1}, 4, 4),
         (1024, 8, {"n_tile": 32, "k_groups": 4, "unroll": 2}, 2, 4),
         (1024, 8, {"n_tile": 16, "k_groups": 4, "unroll": 1, "prefetch": 1}, 4, 2),
         (1024, 16, {"n_tile": 16, "k_groups": 2, "unroll": 1, "x_early": 1}, 4, 1),
         (1024, 16, {"n_tile": 32, "k_groups": 2, "unroll": 2}, 2, 2),
         (2048, 8, {"n_tile": 16, "k_groups": 8, "unroll": 1, "prefetch": 1}, 4, 8)]


@pytest.mark.parametrize("dt", DTYPES)
def test_shared_x_tiles_give_their_plain_tiles_output_bit_for_bit(dt):
    """Each warp does the plain tile's warp's work and the K groups' sums are added in the
    plain order, across the cluster's blocks too: the output is the plain tile's, bit for bit,
    with the grid forward or its last cluster (and a cluster's last block) first; x through shared
    memory also with each block's second warp held back (``lagging``)."""
    for k, m, plain, col_warps, cluster in TILES:
        qw, x = _case(k, dt), _x(m, k, dt)
        levers = [plain] + ([{**plain, "denorm": 2}] if dt == "bfloat16" else [])
        for tile in levers:
            y0 = launch.launch(NAME, x, qw, tile)
            shared = {**tile, "col_warps": col_warps, "cluster": cluster}
            cfg = cuda_config.launch_config(NAME, m, k, N, 64, dt, shared)
            assert (cfg.cluster, cfg.threads, cfg.grid // cfg.threads) == (
                cluster, 32 * col_warps * tile["k_groups"] // cluster,
                N // (tile["n_tile"] * col_warps) * cluster)
            # x through shared memory takes one K group a block and no x_early
            shares = (0, 1) if cluster == tile["k_groups"] and not tile.get("x_early") else (0,)
            for x_share in shares:
                for order in ("forward", "reverse", "lagging")[:2 + x_share]:
                    y = launch.launch(NAME, x, qw, {**shared, "x_share": x_share}, order)
                    assert mx.array_equal(y, y0).item(), (k, m, shared, x_share, order)


def test_shared_x_tiles_add_the_k_groups_in_the_plain_order():
    """On sums whose order shows in the output (+P, 4, -P, 0 a K group), the plain tile gives 0
    and so does every block shape and cluster, in either order of the blocks."""
    qw, x = _order_sensitive_case(4)
    plain = {"n_tile": 16, "k_groups": 4, "unroll": 1}
    y0 = np.array(launch.launch(NAME, x, qw, plain).astype(mx.float32))
    assert (y0 == 0).all()
    for col_warps, cluster in ((4, 1), (4, 4), (2, 2)):
        for order in ("forward", "reverse"):
            y = launch.launch(NAME, x, qw, {**plain, "col_warps": col_warps, "cluster": cluster},
                              order)
            assert (np.array(y.astype(mx.float32)) == 0).all(), (col_warps, cluster, order)


@pytest.mark.parametrize("params,found", [
    ({"stages": 2}, "take the register pipeline"),
    ({"stages": 2, "bulk": 3}, "take the register pipeline"),
    ({"cluster": 3}, "cluster"),
    ({"cluster": 8}, "cluster=8 must divide k_groups=4"),
    ({"col_warps": 8, "n_tile": 32}, "a block's columns must divide N"),
    ({"x_share": 1, "cluster": 2}, "x_share loads x for the block's one K group"),
    ({"x_share": 1, "cluster": 4, "x_early": 1}, "x_share"),
])
def test_a_shared_x_tile_that_cannot_be_is_refused_with_one_line(params, found):
    with pytest.raises(TilingError, match=found) as e:
        cuda_config.launch_config(NAME, 8, 1024, N, 64, "bfloat16",
                                  {"n_tile": 16, "k_groups": 4, "unroll": 1, "col_warps": 2,
                                   **params})
    assert "\n" not in str(e.value)


def test_the_plain_tiles_constants_leave_their_kernel_as_it_was():
    """col_warps = cluster = 1 is the plain tile: its launch has the plain grid and block."""
    cfg = cuda_config.launch_config(NAME, 8, 5120, 17408, 64, "bfloat16",
                                    {"n_tile": 32, "k_groups": 4, "unroll": 2})
    assert (cfg.cluster, cfg.threads, cfg.grid) == (1, 128, 17408 // 32 * 128)
    assert (cfg.template["COL_WARPS"], cfg.template["CLUSTER"]) == (1, 1)


@pytest.mark.parametrize("mutant,error", [
    # every warp's sums put at the block's first column tile
    ("    const int cw = (warp % COL_WARPS) * COLS;\n", None),
    # a warp on the K group of its column neighbour
    ("  const int kgroup = rank * BLOCK_GROUPS + warp / (COL_WARPS * ROW_WARPS);\n", None),
    # blocks that leave while another still reads their partial sums
    (("      dflash2_cluster_sync();  // no block leaves while another still reads its shared "
      "memory\n"), "threads have all finished"),
])
def test_a_mistake_in_the_shared_x_epilogue_is_caught(monkeypatch, mutant, error):
    v = VARIANTS[NAME]
    assert v.CUDA_SOURCE.count(mutant) == 1, mutant
    qw, x = _case(1024, "bfloat16"), _x(8, 1024, "bfloat16")
    plain = {"n_tile": 16, "k_groups": 4, "unroll": 1}
    y0 = launch.launch(NAME, x, qw, plain)  # before the mutant: it may touch the plain tile
    wrong = {"    const int cw = (warp % COL_WARPS) * COLS;\n": "    const int cw = 0;\n",
             "  const int kgroup = rank * BLOCK_GROUPS + warp / (COL_WARPS * ROW_WARPS);\n":
                 "  const int kgroup = rank * BLOCK_GROUPS + warp % COL_WARPS;\n"}.get(mutant, "")
    monkeypatch.setattr(v, "CUDA_SOURCE", v.CUDA_SOURCE.replace(mutant, wrong))
    shared = {**plain, "col_warps": 2, "cluster": 2}
    if error is None:
        y = launch.launch(NAME, x, qw, shared)
        assert not mx.array_equal(y, y0).item()
    else:
        with pytest.raises(EmulatorError, match=error):
            launch.launch(NAME, x, qw, shared, "reverse")


@pytest.mark.parametrize("mutant,wrong", [
    # the lanes read their activations before every thread has stored its share
    ("      __syncthreads();\n      if (step + 1 < (kgroup + 1) * GROUP_STEPS) xs_issue(step + 1);\n",
     "      if (step + 1 < (kgroup + 1) * GROUP_STEPS) xs_issue(step + 1);\n"),
    # the share of the step after next loaded
    ("xs_issue(step + 1);", "xs_issue(step + 2);"),
    # a thread's share stored one chunk off
    ("(c % 16) * 16) = xr[j];", "((c + 1) % 16) * 16) = xr[j];"),
    # one slot: a warp stores the next step's share over this step's before a held-back warp
    # has read it (only the lagging order shows it: forward and reverse keep the warps in step)
    ("(step & 1) * XS_SLOT", "0 * XS_SLOT"),
])
def test_a_mistake_in_sharing_x_is_caught(monkeypatch, mutant, wrong):
    """x through shared memory, each mistake against the plain tile's output under some order of
    the threads: a read before the barrier (the warps that run first read a slot the others have
    not filled), the wrong step's share, a share stored in the wrong place, one slot for two
    steps."""
    v = VARIANTS[NAME]
    assert v.CUDA_SOURCE.count(mutant) == 1, mutant
    qw, x = _case(1024, "bfloat16"), _x(8, 1024, "bfloat16")
    plain = {"n_tile": 16, "k_groups": 4, "unroll": 1}
    y0 = launch.launch(NAME, x, qw, plain)
    monkeypatch.setattr(v, "CUDA_SOURCE", v.CUDA_SOURCE.replace(mutant, wrong))
    shared = {**plain, "col_warps": 4, "cluster": 4, "x_share": 1}
    caught = []
    for order in ("forward", "reverse", "lagging"):
        try:
            caught.append(not mx.array_equal(launch.launch(NAME, x, qw, shared, order), y0).item())
        except EmulatorError:
            caught.append(True)  # refused by the executor (e.g. a read past x): caught
    assert any(caught), caught
