"""The HTML report's trend data read from the results' JSON details (schema 0006): each
plotted measure lands under the kernel the result measured -- its first tuned selection, as
(variant, dtype, M, K, N) -- and a bench test's rows_per_s under its own subject."""

from __future__ import annotations

from db_fixtures import device, meas, record, result, sel

from db import open_history
from db.queries import run_jobs
from farm.report.trends import PlotKey, load_trends


def test_trends_key_each_measure_by_the_first_tuned_selection(tmp_path):
    h = open_history(tmp_path / "h.db")
    run = record(h, [(device(), "mac-1", [
        result("t.py::acc[x]", measurements=[meas("ulps", 2.0), meas("ulps", 9.0),
                                            meas("ignored", 1.0)],
               selections=[sel("stock", M=4), sel("scalar_kmajor", M=8),
                           sel("simd_kmajor", M=16)]),
        result("t.py::bench[x]", measurements=[meas("rows_per_s", 7.5e6)]),
        result("t.py::none[x]"),
    ])])
    dev = run_jobs(h, run)[0]["device"]["id"]
    trends = load_trends(h, [run], [dev])
    key = PlotKey("scalar_kmajor", "bfloat16", 8, 5120, 17408)
    assert set(trends) == {key, ("bench", "t.py::bench[x]")}
    cell = trends[key]["ulps"][(dev, run)]
    assert cell.values == [2.0] and cell.tests == ["t.py::acc[x]"]  # a name's first value
    assert trends[("bench", "t.py::bench[x]")]["rows_per_s"][(dev, run)].values == [7.5e6]
    assert load_trends(h, [], [dev]) == {}
    h.close()
