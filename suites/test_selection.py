"""selection: the selector's choice and reason for every row of ``expected_selections.json``
(device profile x production shape x dtype x M). A change names device, shape, old and new."""

import pytest

from kernels.selection import select
from suites import support
from suites.expected_selections import PROFILES, profile_device

ROWS = support.load_json("expected_selections.json")["rows"]


@pytest.mark.parametrize("profile", PROFILES)
def test_selection_matches_expected(profile, measure):
    dev = profile_device(profile)
    changes = []
    rows = [r for r in ROWS if r["device"] == profile]
    assert rows, f"no expected selections for {profile}"
    for r in rows:
        got = select(dev, r["dtype"], r["M"], r["K"], r["N"])
        if (got.variant, got.reason) != (r["variant"], r["reason"]):
            changes.append(f"{profile} {r['op']} ({r['K']}, {r['N']}) {r['dtype']} M={r['M']}: "
                           f"expected {r['variant']} ({r['reason']}), "
                           f"now {got.variant} ({got.reason})")
    measure.record("rows_checked", float(len(rows)), "rows")
    measure.record("rows_changed", float(len(changes)), "rows", 0.0)
    assert not changes, "kernel selection changed:\n" + "\n".join(changes)
