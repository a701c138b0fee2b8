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
    """The next set (group sums favoured) and the denorm set (its tiles reach ncu as
    ``--tiles``, beside the entries' own; a denorm tile favoured), at the Ms the plan runs."""
    report = rehearsal.rehearse(tmp_path, point_m=point_m, points=points)
    assert rehearsal.problems(report, points) == []
    assert set(report["check_only"]) == {"gate_up/bfloat16", "gate_up/float16",
                                         "down/bfloat16", "down/float16"}
    assert report["ncu_launches"] > (40 if points == "next" else 8)
    # fp16's denorm 2 tiles (scales over 2^-8 there) are left out of ncu, not timed plain
    twos = sum(p[1].get("denorm") == 2 for pts in sweep_points.SETS[points].values()
               for p in pts if len(p) == 2 and isinstance(p[1], dict))
    assert report["ncu_denorm_skipped"] == ({} if not twos else
                                            {"down/float16": twos, "gate_up/float16": twos})
    assert set(report["launched"].values()) == {rehearsal.FAVOURED_AS[points]}
    assert (tmp_path / "chosen_table.json").exists() and (tmp_path / "ncu_cold.csv").exists()
