"""A thread-block cluster is never launched under MLX's CUDA graphs, nor selected.

On an H100 (2026-12-07, bench/results/h100/xshare_0830) a batch of clustered launches under
MLX's graph cache left stock QMM running at the launch floor with wrong output and overwrote
the clustered kernel's own inputs; with ``MLX_USE_CUDA_GRAPHS=0`` nothing changed. These tests
hold the two guards on any host: the launch refuses before anything is built (past the guard,
a CPU host's MLX says it has no CUDA back-end, and a CUDA host builds the kernel), and the
selection table refuses the tile.
"""

from __future__ import annotations

import mlx.core as mx
import pytest

from kernels import cuda
from kernels.selection import build_table
from kernels.tiling import TilingError

K, N = 1024, 256
CLUSTERED = {"mma_weights_a": {"n_tile": 32, "k_groups": 4, "unroll": 2, "col_warps": 2,
                               "cluster": 4},
             "mma_group_sums": {"n_tile": 16, "k_groups": 4, "unroll": 1, "prefetch": 0,
                                "x_early": 0, "min_blocks": 0, "cluster": 2}}


def _goes_past_the_guard(name: str, params: dict) -> None:
    """The launcher is made (a CUDA host) or fails only for want of CUDA (a CPU host)."""
    try:
        cuda.launcher(name, 8, K, N, 64, mx.bfloat16, params)
    except RuntimeError as e:
        assert "No CUDA back-end" in str(e)


@pytest.fixture(autouse=True)
def _fresh_launchers():
    cuda.clear_caches()
    yield
    cuda.clear_caches()


@pytest.mark.parametrize(("value", "on"), [(None, True), ("1", True), ("0", False),
                                           (" 0 ", False), ("2", True), ("off", True)])
def test_graphs_are_on_unless_mlx_would_read_zero(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("MLX_USE_CUDA_GRAPHS", raising=False)
    else:
        monkeypatch.setenv("MLX_USE_CUDA_GRAPHS", value)
    assert cuda.cuda_graphs_on() is on


@pytest.mark.parametrize("name", sorted(CLUSTERED))
def test_a_clustered_launch_is_refused_while_graphs_are_on(monkeypatch, name):
    monkeypatch.delenv("MLX_USE_CUDA_GRAPHS", raising=False)
    with pytest.raises(TilingError, match=r"cluster=\d needs MLX_USE_CUDA_GRAPHS=0"):
        cuda.launcher(name, 8, K, N, 64, mx.bfloat16, CLUSTERED[name])


@pytest.mark.parametrize("name", sorted(CLUSTERED))
def test_with_graphs_off_a_clustered_launch_goes_on_to_build(monkeypatch, name):
    monkeypatch.setenv("MLX_USE_CUDA_GRAPHS", "0")
    _goes_past_the_guard(name, CLUSTERED[name])


def test_an_unclustered_launch_is_not_refused(monkeypatch):
    monkeypatch.delenv("MLX_USE_CUDA_GRAPHS", raising=False)
    plain = {k: v for k, v in CLUSTERED["mma_weights_a"].items() if k != "cluster"}
    _goes_past_the_guard("mma_weights_a", plain)


@pytest.mark.parametrize("name", sorted(CLUSTERED))
def test_a_table_entry_with_a_cluster_is_refused(name):
    entry = {"devices": ["sm_90"], "dtypes": ["bfloat16"], "M": 8, "bits": 4,
             "group_sizes": [64], "shapes": ["s"], "variant": name,
             "params": CLUSTERED[name]}
    with pytest.raises(ValueError, match="cluster=.* never a kernel to select"):
        build_table({"shapes": {"s": [K, N]}, "entries": [entry]})
    plain = {k: v for k, v in CLUSTERED[name].items() if k != "cluster"}
    build_table({"shapes": {"s": [K, N]}, "entries": [{**entry, "params": plain}]})
