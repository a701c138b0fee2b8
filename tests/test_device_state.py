"""bench/device_state: a run that changes the device's state says so, and what it found is
neither reported as figures nor chosen from (bench/results/h100/xshare_0830: a sweep under
MLX's CUDA graphs overwrote its inputs and broke stock, then reported stock at 3.6 us).
On this host's MLX (CPU): real quantized weights, real stock QMM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import cold_sweep_report
import device_state
import sm90_tile_choice as choice
import sweep_points as sp

from kernels.qweights import QWeights
from kernels.variants import VARIANTS

RUN = ROOT / "bench" / "results" / "h100" / "xshare_0830"


def arrays_of():
    w = mx.random.normal((64, 256), key=mx.random.key(1)) / 16
    qw = QWeights.quantize(w, 64, 4, mx.bfloat16)
    x = mx.random.normal((8, 256), key=mx.random.key(2)).astype(mx.bfloat16)
    mx.eval(qw.wq, qw.scales, qw.biases, x)
    return x, qw


@pytest.fixture(scope="module")
def arrays():
    return arrays_of()


def test_an_untouched_state_has_no_problems(arrays):
    x, qw = arrays
    snap = device_state.snapshot(x, qw)
    assert device_state.problems(snap, x, qw) == {}


def test_changed_inputs_and_stock_are_named_with_where(arrays):
    x, qw = arrays
    snap = device_state.snapshot(x, qw)
    x2 = mx.concatenate([x[:6], mx.full((2, 256), 2.4e-38, dtype=mx.bfloat16)])
    found = device_state.problems(snap, x2, qw)
    assert set(found) == {"x", "stock"}
    assert found["x"]["count"] == 512 and found["x"]["first"] == 6 * 256
    assert found["x"]["last"] == 8 * 256 - 1 and found["x"]["of"] == 8 * 256
    hurt = QWeights(qw.wq, qw.scales * 2, qw.biases, qw.group_size, qw.bits)
    assert set(device_state.problems(snap, x, hurt)) == {"scales", "stock"}


def test_an_array_changed_in_place_is_found():
    """The snapshot holds copies of its own: an array written in place after it (as the
    clustered launches wrote x) no longer equals it."""
    x, qw = arrays_of()
    xm = x + 0
    snap = device_state.snapshot(xm, qw)
    xm[6:] = 2.4e-38
    assert set(device_state.problems(snap, xm, qw)) == {"x", "stock"}


def test_nan_where_nan_was_is_no_change():
    import numpy as np
    a = np.array([1.0, np.nan, 3.0])
    assert device_state.changed(a.copy(), a) is None
    assert device_state.changed(np.array([1.0, 2.0, 3.0]), a)["first"] == 1


BROKEN = {"x": {"count": 2048, "of": 40960, "first": 32768, "last": 34815, "shape": [8, 5120],
                "sample": []}, "stock": {"count": 1, "of": 2, "first": 0, "last": 0,
                                         "shape": [2], "sample": []}, "when": "after the points"}


def test_the_report_says_a_shape_broke_the_state_above_its_figures():
    res = json.loads((RUN / "graphs_on_0830" / "cuda_verify_cold_sweep.json").read_text())
    assert "state broke" not in cold_sweep_report.render(res)
    res["shapes"]["gate_up/bfloat16"]["state_broken"] = BROKEN
    md = cold_sweep_report.render(res)
    line = next(ln for ln in md.splitlines() if "state broke" in ln)
    assert "gate_up/bfloat16" in line and "x (2048 of 40960 values)" in line
    assert md.index(line) < md.index("| shape |")


def test_no_tile_is_chosen_from_a_sweep_that_broke_the_state():
    import cuda_verify_ncu as cvn
    off = RUN / "graphs_off_0840"
    launches = [{**k, "us": cvn.duration_us(k)} for k in cvn.parse(
        (off / "ncu_cold.csv").read_text())]
    for k in launches:  # the unclustered 16 x 4 at W 2 made the fastest: chosen unless the
        # sweep broke the state
        if k["label"].startswith("gate_up bfloat16 M=8 tile") and "'cluster': 1}" in k["label"]:
            k["us"] = 1.0
    cold = json.loads((off / "cuda_verify_cold_sweep.json").read_text())
    # the table in effect when that sweep ran (the 2026-12-05 14:17 bench's), whose gate/up tile
    # it timed
    table = json.loads((ROOT / "bench/results/h200/bench_1417/candidate_table.json").read_text())
    swept = {name: VARIANTS[name].DEFAULTS for name in sp.SWEPT}
    _, rec = choice.choose_tiles(table, launches, cold, swept, "ncu_cold.csv")
    assert "chosen" in rec["choices"]["gate_up/bfloat16/8"]
    cold["shapes"]["gate_up/bfloat16"]["state_broken"] = BROKEN
    new, rec = choice.choose_tiles(table, launches, cold, swept, "ncu_cold.csv")
    assert "broke the device's state" in rec["choices"]["gate_up/bfloat16/8"]["skipped"]
    assert [e for e in new["entries"] if e["devices"] == ["sm_90"]] == \
        [e for e in table["entries"] if e["devices"] == ["sm_90"]]


def test_the_bench_report_flags_a_row_that_broke_the_state():
    from cuda_verify_report import render
    data = json.loads((ROOT / "bench" / "results" / "h200" / "cuda_verify.json").read_text())
    assert "state broke" not in render(data)
    data["rows"][0]["state_broken"] = {"stock": BROKEN["stock"]}
    md = render(data)
    line = next(ln for ln in md.splitlines() if "state broke" in ln)
    r = data["rows"][0]
    assert line.startswith(f"**{r['shape']} {r['dtype']} M={r['M']}:") and "(stock changed)" in line
    assert md.index(line) < md.index("| shape |")


def test_regen_takes_no_verdict_from_a_row_that_broke_the_state():
    import regen_sm90_table as regen
    params = {"n_tile": 32, "k_groups": 4, "unroll": 2, "prefetch": 0}
    row = {"shape": "gate_up", "dtype": "bfloat16", "M": 8, "variant": "mma_weights_a",
           "params": params, "cold_stock_eager_wall_us": 42.0, "cold_custom_eager_wall_us": 20.0,
           "cold_stock_eager_wall_batches_us": [41.9, 42.0, 42.1],
           "cold_custom_eager_wall_batches_us": [19.9, 20.0, 20.1]}
    assert regen.verdict(row, "mma_weights_a", params)[0] is True
    keep, fig = regen.verdict({**row, "state_broken": {"x": {}, "stock": {}}}, "mma_weights_a",
                              params)
    assert keep is False and "broke the device's state (x, stock changed)" in fig["why"]
