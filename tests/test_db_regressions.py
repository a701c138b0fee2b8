"""Each regression kind is found on a crafted pair of runs and not on identical runs."""

from __future__ import annotations

import pytest
from db_fixtures import backends, device, fresh_db, meas, record, result, sel

from db import open_history
from db.regressions import analyse, find_regressions

NODE = "suites/test_parity.py::test_m8[gate_up-bfloat16]"


@pytest.fixture(params=backends())
def h(request, tmp_path):
    hist = open_history(fresh_db(request.param, tmp_path))
    yield hist
    hist.close()


def pair(h, before: list[dict], after: list[dict], dev: dict | None = None,
         after_dev: dict | None = None):
    dev = dev or device()
    r1 = record(h, [(dev, "mac-1", before)], started=1000.0)
    r2 = record(h, [(after_dev or dev, "mac-1", after)], started=2000.0)
    return r1, r2


def kinds(flags) -> list[str]:
    return sorted(f.kind for f in flags if f.is_regression)


def check(h, before, after, kind, **kw):
    """The crafted pair flags exactly ``kind``; the same run twice flags nothing."""
    r1, r2 = pair(h, before, after, **kw)
    flags = find_regressions(h, r2, against=r1)
    assert kinds(flags) == [kind], [f.evidence for f in flags]
    assert all(f.evidence and "\n" not in f.evidence for f in flags)
    s1, s2 = pair(h, before, before, **kw)
    assert find_regressions(h, s2, against=s1) == []
    return flags


def test_fallback_to_stock_is_a_high_kernel_selection_flag(h):
    flags = check(h, [result(selections=[sel("scalar_kmajor")])],
                  [result(selections=[sel("stock", reason="fallback:shape")])],
                  "kernel_selection")
    (f,) = flags
    assert f.severity == "high" and "stock" in f.evidence and f.details["tests"] == [NODE]
    assert (f.baseline, f.current) == (["scalar_kmajor"], ["stock"])


def test_tuned_to_other_tuned_is_a_lesser_kernel_selection_flag(h):
    (f,) = check(h, [result(selections=[sel("scalar_kmajor")])],
                 [result(selections=[sel("narrow_output")])], "kernel_selection")
    assert f.severity == "medium"


def _impl(variant: str, impl: str | None, **kw) -> dict:
    return {**sel(variant, **kw), "impl": impl}


def test_implementation_change_alone_is_a_note_and_its_measurements_are_not_compared(h):
    """Same device, shape and variant; only the implementation changed (portable ->
    metal-emulated), and with it the output digest and the ulps: nothing regressed, one note."""
    emu = device(emulated=True, chip="emulated on EPYC", backend="cpu")
    fp = "k/5120x17408"
    before = [result(selections=[_impl("scalar_kmajor", "portable")],
                     measurements=[meas("ulps", 0.0)],
                     fingerprints=[{"key": fp, "digest": "a" * 64}])]
    after = [result(selections=[_impl("scalar_kmajor", "metal-emulated")],
                    measurements=[meas("ulps", 3.0)],
                    fingerprints=[{"key": fp, "digest": "b" * 64}])]
    r1, r2 = pair(h, before, after, dev=emu)
    report = analyse(h, r2, against=r1)
    assert report.regressions == [] and kinds(report.flags) == []
    (f,) = report.flags
    assert (f.kind, f.severity, f.is_regression) == ("implementation_changed", "note", False)
    assert (f.baseline, f.current) == (["portable"], ["metal-emulated"])
    assert f.subject == "gate_up bf16 (8,5120,17408)" and "(emulated)" in f.device
    assert f.details["variant"] == "scalar_kmajor" and f.details["not_compared"] == [NODE]
    assert "portable -> metal-emulated" in f.evidence and "\n" not in f.evidence
    # The same implementation both times: those very measurements are compared, and flagged.
    s1, s2 = pair(h, [before[0]], [{**after[0], "selections": before[0]["selections"]}],
                  dev=emu)
    assert kinds(find_regressions(h, s2, against=s1)) == ["fingerprint", "numeric_drift"]


def test_variant_change_is_flagged_whatever_the_implementations(h):
    (f,) = check(h, [result(selections=[_impl("scalar_kmajor", "metal")])],
                 [result(selections=[_impl("stock", "stock-native", reason="fallback:shape")])],
                 "kernel_selection")
    assert f.severity == "high"
    assert "scalar_kmajor[metal] -> stock[stock-native]" in f.evidence
    assert f.details["impls"] == {"before": {"scalar_kmajor": ["metal"]},
                                  "now": {"stock": ["stock-native"]}}
    r1, r2 = pair(h, [result(selections=[_impl("scalar_kmajor", "portable")])],
                  [result(selections=[_impl("narrow_output", "metal-emulated")])])
    assert [f.kind for f in find_regressions(h, r2, against=r1)] == ["kernel_selection"]


def test_unknown_implementation_matches_any(h):
    """Rows recorded before selections named their implementation are compared as before."""
    (f,) = check(h, [result(selections=[sel("scalar_kmajor")], measurements=[meas("ulps", 0.0)])],
                 [result(selections=[_impl("scalar_kmajor", "metal")],
                         measurements=[meas("ulps", 2.0)])], "numeric_drift")
    r1, r2 = pair(h, [result(selections=[sel("scalar_kmajor")])],
                  [result(selections=[_impl("scalar_kmajor", "metal")])])
    assert find_regressions(h, r2, against=r1) == []
    assert f.details["measure"] == "ulps"


def test_perf_baseline_samples_come_from_the_same_implementation(h):
    node = "suites/test_bench.py::test_verify_microbench[bfloat16-gate_up]"

    def bench(value: float, impl: str) -> list[dict]:
        return [result(node, selections=[_impl("scalar_kmajor", impl)],
                       measurements=[meas("rows_per_s", value, unit="rows/s")])]

    for i, v in enumerate([1000, 1010, 990, 1005, 995, 1002]):
        record(h, [(device(), "mac-1", bench(v, "portable"))], started=1000.0 + i)
    slower = record(h, [(device(), "mac-1", bench(100, "metal-emulated"))], started=2000.0)
    assert [f.kind for f in find_regressions(h, slower)] == ["implementation_changed"]
    # Back on portable, as slow: the window's portable samples judge it, the emulated one not.
    dropped = record(h, [(device(), "mac-1", bench(100, "portable"))], started=3000.0)
    flags = find_regressions(h, dropped)
    assert sorted(f.kind for f in flags) == ["implementation_changed", "perf_drop"]
    (f,) = [f for f in flags if f.is_regression]
    assert sorted(f.details["baseline_samples"]) == [990, 995, 1000, 1002, 1005, 1010]


def test_fingerprint_change_same_arch_and_mlx(h):
    (f,) = check(h, [result(fingerprints=[{"key": "k/5120x17408", "digest": "a" * 64}])],
                 [result(fingerprints=[{"key": "k/5120x17408", "digest": "b" * 64}])],
                 "fingerprint")
    assert f.severity == "medium" and f.details["key"] == "k/5120x17408"


def test_fingerprint_change_with_only_mlx_changed_is_a_note(h):
    r1, r2 = pair(h, [result(fingerprints=[{"key": "k", "digest": "a"}])],
                  [result(fingerprints=[{"key": "k", "digest": "b"}])],
                  after_dev=device(mlx_version="0.33.0"))
    report = analyse(h, r2)  # no baseline set: the same device's previous run, old MLX
    (f,) = report.flags
    assert (f.kind, f.severity, f.is_regression) == ("fingerprint", "note", False)
    assert "only the MLX version changed" in f.evidence
    assert report.regressions == [] and report.comparisons[0].against == r1


def test_new_unexpected_failure(h):
    (f,) = check(h, [result()], [result(outcome="failed", message="boom\nsecond line")],
                 "new_failure")
    assert f.severity == "high" and f.evidence.endswith("boom")


def test_known_failure_is_not_a_new_failure(h):
    xfail = result(outcome="failed", category="expected_fail", expected="fail")
    r1, r2 = pair(h, [result()], [xfail])
    assert find_regressions(h, r2, against=r1) == []


@pytest.mark.parametrize("name", ["deviation_ulps", "ulps"])
def test_numeric_drift_by_ulps(h, name):
    (f,) = check(h, [result(measurements=[meas(name, 0.0)])],
                 [result(measurements=[meas(name, 2.0)])], "numeric_drift")
    assert f.details["measure"] == name
    r1, r2 = pair(h, [result(measurements=[meas("ulps", 0.0)])],
                  [result(measurements=[meas("ulps", 1.0)])])
    assert find_regressions(h, r2, against=r1) == []  # one ulp is within reach


@pytest.mark.parametrize(("before", "after", "level"), [(0.4, 0.6, 0.5), (0.6, 0.95, 0.9)])
def test_numeric_drift_by_headroom(h, before, after, level):
    (f,) = check(h, [result(measurements=[meas("deviation", before * 1e-3, 1e-3)])],
                 [result(measurements=[meas("deviation", after * 1e-3, 1e-3)])],
                 "numeric_drift")
    assert f.details["level"] == level


def test_deviation_turning_non_finite_is_drift(h):
    (f,) = check(h, [result(measurements=[meas("deviation", 1e-4, 1e-3)])],
                 [result(measurements=[meas("deviation", None, 1e-3)])], "numeric_drift")
    assert f.severity == "high"


def _xpass():
    return result(outcome="passed", category="unexpected_pass", expected="fail",
                  link="crbug/1")


def test_stale_expectation_after_consecutive_passes(h):
    runs = [record(h, [(device(), "mac-1", [_xpass()])], started=1000.0 + i) for i in range(3)]
    assert find_regressions(h, runs[1]) == []  # two in a row: not yet stale
    (f,) = find_regressions(h, runs[2])
    assert f.kind == "stale_expectation" and f.details["runs"] == runs[::-1]
    assert "crbug/1" in f.evidence
    # Identical runs where the expected failure keeps failing: nothing is stale.
    xfail = result(outcome="failed", category="expected_fail", expected="fail")
    same = [record(h, [(device(host="x"), "mac-2", [xfail])], started=5000.0 + i)
            for i in range(3)]
    assert find_regressions(h, same[2]) == []


def test_stale_streak_is_broken_by_a_failure(h):
    xfail = result(outcome="failed", category="expected_fail", expected="fail")
    for i, ev in enumerate([_xpass(), xfail, _xpass(), _xpass()]):
        last = record(h, [(device(), "mac-1", [ev])], started=1000.0 + i)
    assert find_regressions(h, last) == []


def _bench(value: float, latency: float = 100.0):
    return [result("suites/test_bench.py::test_verify_microbench[bfloat16-gate_up]",
                   measurements=[meas("rows_per_s", value, unit="rows/s"),
                                 meas("m8_median_us", latency, unit="us"),
                                 meas("m8_over_m4", 1.0, unit="ratio")])]


def _bench_runs(h, values, latencies=None, start=1000.0):
    lat = latencies or [100.0] * len(values)
    return [record(h, [(device(), "mac-1", _bench(v, t))], started=start + i)
            for i, (v, t) in enumerate(zip(values, lat, strict=True))]


def test_perf_drop_against_the_earlier_window(h):
    runs = _bench_runs(h, [1000, 1010, 990, 1005, 995, 1002, 800],
                       [100, 101, 99, 100, 100, 101, 100])
    flags = find_regressions(h, runs[-1])
    assert kinds(flags) == ["perf_drop"], [f.evidence for f in flags]
    (f,) = flags
    assert f.details["name"] == "rows_per_s" and len(f.details["baseline_samples"]) == 6
    assert "Welch t" in f.evidence
    # The same value again: nothing dropped.
    same = _bench_runs(h, [1000, 1010, 990, 1005, 995, 1002, 1000], start=5000.0)
    assert find_regressions(h, same[-1]) == []


def test_perf_latency_growth_is_a_drop_and_noise_is_not(h):
    runs = _bench_runs(h, [1000] * 6, [100, 102, 98, 100, 101, 99], start=1000.0)
    slow = record(h, [(device(), "mac-1", _bench(1000, 150))], started=2000.0)
    (f,) = find_regressions(h, slow)
    assert f.details["name"] == "m8_median_us"
    noisy = _bench_runs(h, [1000, 900, 1100, 950, 1050, 960, 1080], start=3000.0)
    assert find_regressions(h, noisy[-1]) == []  # within the window's own noise
    assert runs


def test_perf_never_alerts_on_too_few_samples(h):
    runs = _bench_runs(h, [1000, 1001, 999, 1000, 100])  # 4 earlier runs: fewer than MIN_BACK
    assert find_regressions(h, runs[-1]) == []


def test_welch_catches_a_real_step_once_and_never_the_noise(h):
    """24 runs with 3% noise, a real 15% step at run 12: analysing every run, the step run is
    the only one flagged (later runs see the step in their earlier window, with a smaller t),
    and the same noise without a step flags nothing."""
    import random

    rng = random.Random(20261203)
    noise = [1000 * (1 + rng.gauss(0, 0.03)) for _ in range(24)]
    stepped = [v * (0.85 if i >= 12 else 1.0) for i, v in enumerate(noise)]
    lat = [100.0] * 24
    step_runs = _bench_runs(h, stepped, lat, start=1000.0)
    flagged = [i for i, r in enumerate(step_runs) if kinds(find_regressions(h, r))]
    assert flagged == [12], flagged
    h2_runs = [record(h, [(device(host="quiet"), "quiet", _bench(v, 100.0))],
                      started=5000.0 + i) for i, v in enumerate(noise)]
    assert [i for i, r in enumerate(h2_runs) if kinds(find_regressions(h, r))] == []


def _fleet(h, digests, deviations, started):
    devs = [(device(), f"mac-{i}", [result(fingerprints=[{"key": "k", "digest": d}],
                                           measurements=[meas("deviation", v, 1e-2)])])
            for i, (d, v) in enumerate(zip(digests, deviations, strict=True))]
    return record(h, devs, started=started)


def test_consensus_odd_device_out(h):
    run = _fleet(h, ["a", "a", "b"], [1e-3, 1e-3, 1e-3], 1000.0)
    (f,) = find_regressions(h, run)
    assert (f.kind, f.device) == ("consensus", "applegpu_g13s @mac-2")
    run = _fleet(h, ["a", "a", "a"], [1e-3, 1e-3, 7.8e-3], 2000.0)
    flags = [f for f in find_regressions(h, run) if f.kind == "consensus"]
    assert [f.device for f in flags] == ["applegpu_g13s @mac-2"]
    assert "deviation" in flags[0].evidence
    same = _fleet(h, ["a", "a", "a"], [1e-3, 1e-3, 1e-3], 3000.0)
    assert [f for f in find_regressions(h, same) if f.kind == "consensus"] == []


def test_consensus_needs_three_devices_of_one_generation(h):
    mixed = [(device(), "mac-0", [result(fingerprints=[{"key": "k", "digest": "a"}])]),
             (device(), "mac-1", [result(fingerprints=[{"key": "k", "digest": "a"}])]),
             (device(arch="applegpu_g14g", generation=14, size="g"), "mac-2",
              [result(fingerprints=[{"key": "k", "digest": "b"}])])]
    assert find_regressions(h, record(h, mixed)) == []


def test_baseline_is_used_over_the_previous_run(h):
    good = record(h, [(device(), "mac-1", [result(selections=[sel("scalar_kmajor")])])],
                  started=1000.0)
    record(h, [(device(), "mac-1", [result(selections=[sel("stock")])])], started=2000.0)
    now = record(h, [(device(), "mac-1", [result(selections=[sel("stock")])])],
                 started=3000.0)
    assert find_regressions(h, now) == []  # against the previous run: unchanged
    variant = next(iter(_variants(h, good)))
    h.set_baseline(good, [variant])
    report = analyse(h, now)
    assert report.comparisons[0].why == "baseline" and report.comparisons[0].against == good
    assert kinds(report.flags) == ["kernel_selection"]


def test_emulated_device_never_compares_with_real(h):
    real = record(h, [(device(), "mac-1", [result(selections=[sel("scalar_kmajor")])])],
                  started=1000.0)
    emu = record(h, [(device(emulated=True, chip="emulated on EPYC", backend="cpu"), "mac-1",
                      [result(selections=[sel("stock")])])], started=2000.0)
    report = analyse(h, emu, against=real)
    assert report.flags == [] and report.comparisons[0].against is None


def _variants(h, run_id):
    from db.queries import run_jobs

    return {j["device"]["variant_key"] for j in run_jobs(h, run_id)}
