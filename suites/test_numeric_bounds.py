"""numeric-bounds: per verify path (M = 4, 8, 16; gate/up, down, out; bf16, fp16), the contract
deviation against the pinned bound and the accuracy against float64 in ulps of the output dtype.

Every result records deviation, bound, headroom (deviation / bound), ulps, and whether the
pinned bound is tighter than one ulp at the outputs' magnitude (a rounding flip alone breaks it).
"""

import numpy as np
import pytest

from kernels.ulps import max_ulp_at, scaled_ulps, ulps
from suites import support
from suites.bounds import accuracy_ulps, deviation_bound

PATHS = [(m, op, dt) for m in (4, 8, 16) for op in ("gate_up", "down", "out")
         for dt in ("bfloat16", "float16")]
IDS = [f"m{m}-{op}-{dt}" for m, op, dt in PATHS]


@pytest.mark.parametrize("m,op,dtype", PATHS, ids=IDS)
def test_bound(m, op, dtype, measure):
    c = support.case(op, dtype)
    y, s = support.f64(support.verify_path(c, m)), support.f64(support.stock(c, m))
    bound = deviation_bound(m, op)
    dev = float(np.max(np.abs(y - s)))
    one_ulp = max_ulp_at(s, dtype)
    measure.record("deviation", dev, "abs", bound)
    measure.record("bound", bound, "abs")
    measure.record("headroom", dev / bound, "ratio", 1.0)
    measure.record("deviation_ulps", dev / one_ulp, "ulp")
    measure.record("bound_below_ulp", float(bound < one_ulp), "flag")
    # Certified argmax: a row whose stock top-1 margin exceeds twice the deviation cannot flip.
    top2 = np.sort(s, axis=1)[:, -2:]
    certified = (top2[:, 1] - top2[:, 0]) > 2 * dev
    flipped = certified & (np.argmax(y, axis=1) != np.argmax(s, axis=1))
    measure.record("certified_rows", float(certified.sum()), "rows")
    assert not flipped.any(), f"argmax flipped on certified rows {np.flatnonzero(flipped)}"
    assert dev <= bound, (f"M={m} {op} {dtype}: max |path - stock| = {dev:g} > bound {bound:g}"
                          f" (one ulp at max |y| = {one_ulp:g})")


@pytest.mark.parametrize("m,op,dtype", PATHS, ids=IDS)
def test_accuracy(m, op, dtype, measure):
    c = support.case(op, dtype)
    y = support.f64(support.verify_path(c, m))
    ref, scale = c.reference(m)
    scaled = float(scaled_ulps(y, ref, scale, dtype).max())
    own = float(ulps(y, ref, dtype).max())
    rel = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
    bound = accuracy_ulps(dtype)
    measure.record("ulps", scaled, "ulp", bound)
    measure.record("ulps_own_magnitude", own, "ulp")
    measure.record("rel_l2_vs_f64", rel, "ratio")
    assert scaled <= bound, (f"M={m} {op} {dtype}: {scaled:.3g} ulps from float64 "
                             f"(relative L2 {rel:.3g}) > {bound:g} ulps")
