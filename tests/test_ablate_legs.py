"""bench/ablate_legs.py: a tile's whole, loads alone and math alone, from ncu's CSV."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import ablate_legs as al
from cuda_verify_ncu import csv_of

WA = "custom_kernel_dflash2_mma_weights_a_bfloat16_t_8_2_4_2"
TILE = "{'n_tile': 32, 'k_groups': 4, 'unroll': 2, 'prefetch': 0"


def test_a_tiles_legs_group_by_its_keys_at_their_defaults(tmp_path):
    """The table's ``custom`` launch is its tile's whole; a sweep label that spells out the
    defaults is the same tile; each leg keeps its least time; a tile with no leg measured
    (a sweep's, not an ablate set's) is left out."""
    csv = tmp_path / "ncu.csv"
    csv.write_text(csv_of([
        ("gate_up bfloat16 M=8 stock", "void qmm_sm80_kernel<64>", 88.0),
        (f"gate_up bfloat16 M=8 custom {TILE}}}", WA, 26.0),
        (f"gate_up bfloat16 M=8 tile {TILE}, 'stages': 0, 'l2_prefetch': 128, 'x_early': 0, 'denorm': 2}}",
         WA, 25.0),
        (f"gate_up bfloat16 M=8 tile {TILE}, 'ablate': 1}}", WA, 22.0),
        (f"gate_up bfloat16 M=8 tile {TILE}, 'ablate': 1}}", WA, 21.0),
        (f"gate_up bfloat16 M=8 tile {TILE}, 'ablate': 2}}", WA, 19.0),
        (f"gate_up bfloat16 M=8 tile {TILE}, 'ablate': 2}}", WA, 19.5),
        (f"gate_up bfloat16 M=8 tile {TILE}, 'x_early': 1}}", WA, 27.0),
    ]))
    (row,) = al.legs([str(csv)])
    assert (row["shape"], row["dtype"], row["M"], row["variant"]) == (
        "gate_up", "bfloat16", 8, "mma_weights_a")
    assert row["tile"] == {"n_tile": 32, "k_groups": 4, "unroll": 2}
    got = {k: (v["us"], v["launches"]) for k, v in row["legs"].items()}
    assert got == {"whole_0": (26.0, 1), "whole_2": (25.0, 1), "loads_0": (21.0, 2),
                   "math_0": (19.0, 2)}
    assert row["longer_leg"] == "loads" and row["whole_over_longer"] == round(26.0 / 21.0, 3)
    # the spread beside the least time, whichever launch came first
    assert (row["legs"]["loads_0"]["us_max"], row["legs"]["math_0"]["us_max"]) == (22.0, 19.5)
    assert "21.0-22.0" in al.markdown([row], ["ncu.csv"])


def test_the_h100_runs_legs_are_the_readmes():
    """bench/results/h100/README.md's figures come out of its committed CSVs: gate/up's table
    tile at M=8 has the loads as its longer leg, the math alone at each denorm mode below it."""
    h100 = ROOT / "bench" / "results" / "h100"
    rows = al.legs([str(h100 / f) for f in ("diagnose_ablate_ncu_cold.csv",
                                           "denorm_gate_up_ncu_cold.csv")])
    (gu,) = [r for r in rows if (r["shape"], r["M"], r["variant"], r["tile"]) == (
        "gate_up", 8, "mma_weights_a", {"n_tile": 32, "k_groups": 4, "unroll": 2})]
    us = {k: v["us"] for k, v in gu["legs"].items()}
    assert us["loads_0"] == pytest.approx(21.6, abs=0.05)
    assert [round(us[f"math_{d}"], 1) for d in (0, 1, 2)] == [19.5, 18.2, 16.8]
    assert [round(us[f"whole_{d}"], 1) for d in (0, 1, 2)] == [25.9, 30.2, 25.6]
    assert gu["legs"]["loads_0"]["dram_pct"] == pytest.approx(61.8, abs=0.05)
    assert gu["longer_leg"] == "loads"


def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path):
    script = [sys.executable, str(ROOT / "bench" / "ablate_legs.py")]
    r = subprocess.run([*script, str(tmp_path / "none.csv")], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "no such file" in r.stderr
    stock_only = tmp_path / "stock.csv"
    stock_only.write_text(csv_of([("gate_up bfloat16 M=8 stock", "qmm_sm80_kernel", 88.0)]))
    r = subprocess.run([*script, str(stock_only)], capture_output=True, text=True, check=False)
    assert r.returncode == 1 and "no ablated launch" in r.stderr and "Traceback" not in r.stderr


def test_a_tile_whose_math_alone_ran_at_denorm_2_only_is_read_at_denorm_2(tmp_path):
    """The bulk tiles' math alone is timed at denorm 2 only (bench/sweep_points.BULK_TILES):
    their longer leg and whole over it are read at that mode, not left blank, and say so."""
    bulk = "{'n_tile': 32, 'k_groups': 4, 'unroll': 1, 'prefetch': 0, 'stages': 4, 'bulk': 3"
    csv = tmp_path / "ncu.csv"
    csv.write_text(csv_of([
        (f"gate_up bfloat16 M=8 tile {bulk}}}", WA, 24.0),
        (f"gate_up bfloat16 M=8 tile {bulk}, 'denorm': 2}}", WA, 20.0),
        (f"gate_up bfloat16 M=8 tile {bulk}, 'ablate': 1}}", WA, 14.0),
        (f"gate_up bfloat16 M=8 tile {bulk}, 'denorm': 2, 'ablate': 2}}", WA, 16.0),
    ]))
    (row,) = al.legs([str(csv)])
    assert row["longer_leg"] == "math (dn2)" and row["whole_over_longer"] == 1.25


def test_the_whole_and_the_math_without_x_loads_are_legs_at_the_tiles_mode(tmp_path):
    """ablate 3 (the whole without the activation loads), 4 (the math without them) and 5 (x's
    loads from L1) are legs of their own, read at the same denorm mode as the row's other
    legs, and shown."""
    csv = tmp_path / "ncu.csv"
    times = {0: 30.0, 1: 21.0, 2: 24.0, 3: 26.5, 4: 17.5, 5: 27.25}  # by ablate, at denorm 2
    csv.write_text(csv_of([(f"gate_up bfloat16 M=16 tile {TILE}, 'denorm': 2, 'ablate': {a}}}",
                            WA, us) for a, us in times.items()]))
    (row,) = al.legs([str(csv)])
    us = {k: v["us"] for k, v in row["legs"].items()}
    assert us == {"whole_2": 30.0, "loads_0": 21.0, "math_2": 24.0, "no_x_2": 26.5,
                  "pure_2": 17.5, "x_l1_2": 27.25}
    assert row["mode"] == 2 and row["longer_leg"] == "math (dn2)"
    assert "| 26.5 | 17.5 | 27.2 |" in al.markdown([row], ["ncu.csv"])


def test_a_set_of_the_whole_and_x_legs_alone_reads_them_at_the_wholes_mode(tmp_path):
    """The xl1 set times a bulk tile at denorm 2 whole, without x's loads and with x from L1,
    and no math alone: the row takes the whole's mode, so its x legs show (they read '-' at
    mode 0 before)."""
    csv = tmp_path / "ncu.csv"
    times = {0: 36.0, 3: 26.0, 5: 32.0}
    csv.write_text(csv_of([(f"gate_up bfloat16 M=16 tile {TILE}, 'denorm': 2, 'ablate': {a}}}",
                            WA, us) for a, us in times.items()]))
    (row,) = al.legs([str(csv)])
    assert row["mode"] == 2 and "longer_leg" not in row
    assert "| 26.0 | - | 32.0 |" in al.markdown([row], ["ncu.csv"])
