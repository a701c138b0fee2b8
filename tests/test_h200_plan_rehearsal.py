"""The next device session's Python, rehearsed on this CPU (scripts/rehearse_h200_plan.py): the
check-only sweep, the ncu run's launch list, the choice and the chosen table's launches, with
a stand-in kernel. It found ``sweep_points.selected`` failing on a variant without ``stages``
or ``bulk`` (``--no-bulk``, which h200.sh passes after a failed bulk smoke test), which would
have cost a device call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))

import rehearse_h200_plan as rehearsal
import sweep_points


@pytest.mark.parametrize("points,point_m", [("next", 8), ("denorm", 8), ("denorm", 16)])
def test_the_plan_checks_every_point_and_carries_the_fastest_variant_into_the_table(
        tmp_path, points, point_m):
    """The next set (group sums favoured) and the denorm set (a denorm tile favoured), at the Ms
    the plan runs; ncu gets the tiles the sweep checked (a bare ``--points``)."""
    report = rehearsal.rehearse(tmp_path, point_m=point_m, points=points)
    assert rehearsal.problems(report, points) == []
    assert set(report["check_only"]) == {"gate_up/bfloat16", "gate_up/float16",
                                         "down/bfloat16", "down/float16"}
    assert report["ncu_launches"] > (40 if points == "next" else 8)
    # fp16's denorm 2 tiles (scales over 2^-8 there) are left out of ncu, not timed plain; each
    # shape's own, the tiles its sweep timed (a bare --points)
    twos = {f"{op}/float16": n for op, pts in sweep_points.SETS[points].items()
            if (n := sum(p[1].get("denorm") == 2 for p in pts
                         if len(p) == 2 and isinstance(p[1], dict)))}
    assert report["ncu_denorm_skipped"] == twos
    assert set(report["launched"].values()) == {rehearsal.FAVOURED_AS[points]}
    assert (tmp_path / "chosen_table.json").exists() and (tmp_path / "ncu_cold.csv").exists()


@pytest.mark.parametrize("points", ["bulk-vs-table", "bulk-x"])
def test_the_timed_bulk_sweep_times_each_candidate_compiled_with_the_layout_made_at_load(
        tmp_path, points):
    """The plan's timed sweeps of ``bulk-vs-table`` and ``bulk-x`` (``--chain --final-top 4
    --time-each``): every point bit-exact against its register twin (the stand-in reads packed
    w back), and every final candidate timed compiled and in a chain, the bulk ones with w's
    layout made at load as an input; the table's own tile (none to make) as well."""
    res = rehearsal.rehearse_timed(tmp_path, points)
    assert res["rc"] == 0
    for key, e in res["shapes"].items():
        assert all(p.get("ok") and p["exact_vs_register"] for p in e["points"]), key
        (final,) = e["final"]
        cands = final["candidates"]
        assert len(cands) == len(e["points"]), key
        assert "custom_compiled_us" in final and "alone_custom_us" in final
        def layout(p):  # what a tile's compiled call must be given: w packed for bulk
            return [["mma_weights_a", p["n_tile"], p["k_groups"], p["unroll"]]] if p.get(
                "bulk") else []
        for c in cands[1:]:
            assert set(c["timed"]) == {"compiled_us", "alone_us", "layouts_from_load"}, c
            assert c["timed"]["layouts_from_load"] == layout(c), (key, c)
        assert final["layouts_from_load"] == layout(final["params"]), key
        assert sum(bool(layout(c)) for c in cands) == len(cands) - 1  # all but the table's


def test_the_m16_bulk_sweep_checks_and_times_every_point_at_m16(tmp_path):
    """``bulk-m16`` (gate/up only) at ``--point-m 16``: each point bit-exact against its
    register twin at M=16, and the finals timed at M=16, compiled and in a chain."""
    res = rehearsal.rehearse_timed(tmp_path, "bulk-m16", point_m=16)
    assert res["rc"] == 0 and list(res["shapes"]) == ["gate_up/bfloat16"]
    (e,) = res["shapes"].values()
    assert e["point_m"] == 16 and len(e["points"]) == len(sweep_points.BULK_M16["gate_up"])
    assert all(p.get("ok") and p["exact_vs_register"] for p in e["points"])
    (final,) = e["final"]
    assert final["M"] == 16 and "custom_compiled_us" in final and "alone_custom_us" in final


def test_a_sweep_of_a_set_without_a_shape_is_refused_before_it_starts(tmp_path, capsys):
    import cuda_verify_cold_sweep as cs
    with pytest.raises(SystemExit) as e:
        cs.main(["--out", str(tmp_path), "--points", "bulk-m16", "--shapes", "gate_up,down"])
    assert e.value.code == 2
    assert "--points bulk-m16 has no tiles for down: pass --shapes gate_up" in (
        capsys.readouterr().err)
    assert not list(tmp_path.iterdir())


def test_a_check_left_with_no_tiles_is_refused_rather_than_passing_empty(tmp_path, capsys):
    """The bulk set without its bulk tiles (the smoke failed: --no-bulk) checked nothing and
    printed "not bit-exact: none"; now one line and exit 2, before any device time."""
    import cuda_verify_cold_sweep as cs
    with pytest.raises(SystemExit) as e:
        cs.main(["--out", str(tmp_path), "--points", "bulk-denorm", "--check-only",
                 "--no-bulk", "--ms", "8"])
    assert e.value.code == 2
    assert "--points bulk-denorm keeps no tiles for gate_up, down" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
