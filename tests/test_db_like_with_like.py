"""Regressions compare like with like: same suite, same device variant, the path under test (not
a test's reference computations), with the cause named; acceptance is tracked; ingest is
idempotent; one tree-hash algorithm. On real SQLite files (and PostgreSQL where configured)."""

from __future__ import annotations

import json

import pytest
from db_fixtures import (
    backends,
    device,
    fresh_db,
    meas,
    record,
    result,
    sel,
    session_finish,
    session_start,
    write_jsonl,
)
from sqlalchemy import text

from db import open_history
from db.ingest import ingest_jsonl
from db.regressions import analyse
from kernels.recorder import Selection, recording, reference, report

NODE_A = "suites/test_parity.py::test_wrapper_bit_exact_with_raw_dispatch[gate_up-bfloat16]"
NODE_B = "suites/test_parity.py::test_verifier_off_equals_stock[gate_up-bfloat16]"
ON = {"env": {}, "table_hash": "t1" * 32, "mlx_version": "0.32.4"}
OFF = {"env": {"DFLASH2_CUSTOM_VERIFIER": "0"}, "table_hash": "t1" * 32, "mlx_version": "0.32.4"}


@pytest.fixture(params=backends())
def h(request, tmp_path):
    hist = open_history(fresh_db(request.param, tmp_path))
    yield hist
    hist.close()


def role(s: dict, r: str) -> dict:
    return {**s, "role": r}


def run(h, results, *, suite="m8-parity", started, context=None, dev=None):
    rid = record(h, [(dev or device(), "mac-1", results)], suite=suite, started=started)
    if context is not None:
        with h.engine.begin() as c:
            c.execute(text("UPDATE runs SET context = :c WHERE id = :i"),
                      {"c": json.dumps(context), "i": rid})
    return rid


def test_unlike_suites_are_never_compared(h):
    """m8-parity then numeric-bounds on one device: nothing comparable, no flag; the report says
    so instead of "no regressions"."""
    run(h, [result(NODE_A, selections=[sel("scalar_kmajor")])], started=1000.0)
    nb = run(h, [result("suites/test_numeric_bounds.py::test_bound[gate_up-bfloat16-8]",
                        selections=[sel("stock", reason="fallback:shape")])],
             suite="numeric-bounds", started=2000.0)
    rep = analyse(h, nb)
    assert rep.flags == [] and not rep.compared
    (c,) = rep.comparisons
    assert c.against is None and c.why.startswith("no comparable earlier run")


def test_baselines_are_per_suite(h):
    m8 = run(h, [result(NODE_A, selections=[sel("scalar_kmajor")])], started=1000.0)
    nb = run(h, [result(NODE_A, selections=[sel("stock")])], suite="numeric-bounds",
             started=1500.0)
    dev_key = analyse(h, m8).comparisons[0].variant_key
    h.set_baseline(nb, [dev_key])
    h.set_baseline(m8, [dev_key])  # and another suite's baseline stays: one per suite
    later = run(h, [result(NODE_A, selections=[sel("scalar_kmajor")])], started=2000.0)
    rep = analyse(h, later)
    assert [(c.against, c.why) for c in rep.comparisons] == [(m8, "baseline")]
    assert rep.flags == []
    with h.engine.connect() as c:
        assert sorted(c.execute(text("SELECT suite, run_id FROM baselines"))) == sorted(
            [("m8-parity", m8), ("numeric-bounds", nb)])


def test_a_fallback_hidden_by_reference_selections_is_flagged_from_to_with_its_cause(h):
    """The shape's pooled set of variants is {scalar_kmajor, stock} in both runs (the tests'
    reference dispatches), yet the wrapper, the path under test, fell back to stock."""
    before = [result(NODE_A, selections=[sel("scalar_kmajor"),
                                         role(sel("scalar_kmajor"), "reference")]),
              result(NODE_B, selections=[role(sel("stock", reason="fallback:disabled"),
                                              "reference")])]
    after = [result(NODE_A, selections=[sel("stock", reason="fallback:disabled"),
                                        role(sel("scalar_kmajor"), "reference")]),
             result(NODE_B, selections=[role(sel("stock", reason="fallback:disabled"),
                                             "reference")])]
    run(h, before, started=1000.0, context=ON)
    r2 = run(h, after, started=2000.0, context=OFF)
    rep = analyse(h, r2)
    (f,) = [f for f in rep.flags if f.kind == "kernel_selection"]
    assert f.severity == "high" and (f.baseline, f.current) == (["scalar_kmajor"], ["stock"])
    assert f.evidence.startswith("gate_up bf16 (8,5120,17408) on applegpu_g13s @mac-1: "
                                 "scalar_kmajor -> stock (fallback: disabled); cause: the "
                                 "environment disabled the custom verifier "
                                 "(DFLASH2_CUSTOM_VERIFIER=0)"), f.evidence
    assert f.details["tests"] == [NODE_A]
    # A change in a reference alone is no kernel-selection flag.
    r3 = run(h, [result(NODE_A, selections=[sel("scalar_kmajor"),
                                            role(sel("narrow_output"), "reference")]),
                 result(NODE_B, selections=[role(sel("stock", reason="fallback:disabled"),
                                                 "reference")])], started=3000.0, context=ON)
    h.set_baseline(run(h, before, started=2500.0, context=ON),
                   [rep.comparisons[0].variant_key])
    assert [f.kind for f in analyse(h, r3).flags] == []


@pytest.mark.parametrize("change,expected", [
    ({"table_hash": "t2" * 32}, "selection table changed (t1t1t1t1t1t1 -> t2t2t2t2t2t2)"),
    ({"env": {"DFLASH2_EMULATE_METAL": "0"}}, "environment DFLASH2_EMULATE_METAL: unset -> '0'"),
    ({}, "nothing recorded changed"),
])
def test_the_flag_names_what_changed(h, change, expected):
    run(h, [result(NODE_A, selections=[sel("scalar_kmajor")])], started=1000.0, context=ON)
    r2 = run(h, [result(NODE_A, selections=[sel("narrow_output")])], started=2000.0,
             context={**ON, **change})
    (f,) = analyse(h, r2).flags
    assert f.kind == "kernel_selection" and expected in f.evidence, f.evidence


def test_an_mlx_upgrade_is_named_as_the_cause(h):
    run(h, [result(NODE_A, selections=[sel("scalar_kmajor")])], started=1000.0, context=ON)
    r2 = run(h, [result(NODE_A, selections=[sel("stock", reason="fallback:unsupported")])],
             started=2000.0, context=ON, dev=device(mlx_version="0.33.0"))
    (f,) = [f for f in analyse(h, r2).flags if f.kind == "kernel_selection"]
    assert "MLX upgraded 0.32.4 -> 0.33.0" in f.evidence


def _greedy(value: float) -> list[dict]:
    return [result("suites/test_greedy_e2e.py::test_greedy_exact[custom-budget40-boundary]",
                   measurements=[meas("accepted_per_block", value, unit="tokens/block")])]


def test_acceptance_collapse_is_a_high_regression_and_small_noise_is_not(h):
    for i, v in enumerate([3.2, 3.25, 3.2]):
        run(h, _greedy(v), suite="greedy-e2e", started=1000.0 + i)
    assert analyse(h, run(h, _greedy(3.15), suite="greedy-e2e", started=1500.0)).flags == []
    rep = analyse(h, run(h, _greedy(0.0), suite="greedy-e2e", started=2000.0))
    (f,) = rep.flags
    assert (f.kind, f.severity) == ("acceptance_drop", "high") and "collapsed" in f.evidence
    half = analyse(h, run(h, _greedy(1.6), suite="greedy-e2e", started=1800.0))
    assert [(f.kind, f.severity) for f in half.flags] == [("acceptance_drop", "medium")]


def test_the_same_results_ingested_twice_are_one_run(h, tmp_path):
    events = [session_start(), result(NODE_A, selections=[sel("scalar_kmajor")]),
              session_finish()]
    path = write_jsonl(tmp_path / "r.jsonl", events)
    first = ingest_jsonl(h, path)
    # The same events again, as a copy whose keys are in another order.
    copy = tmp_path / "copy.jsonl"
    copy.write_text("".join(json.dumps(dict(reversed(list(e.items())))) + "\n" for e in events))
    assert ingest_jsonl(h, path) == first == ingest_jsonl(h, copy)
    with h.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM runs")).scalar() == 1
        assert c.execute(text("SELECT count(*) FROM results")).scalar() == 1
    other = write_jsonl(tmp_path / "o.jsonl", [session_start(t=5.0), *events[1:]])
    assert ingest_jsonl(h, other) != first  # other results: another run


def test_selections_in_a_reference_block_are_tagged_and_stored_so(h):
    s = Selection("gate_up", "bfloat16", 8, 5120, 17408, "scalar_kmajor", "tuned", "portable")
    with recording() as sink:
        report(s)
        with reference():
            report(Selection("gate_up", "bfloat16", 8, 5120, 17408, "stock", "fallback:x",
                             "portable"))
    assert [x.role for x in sink] == ["under_test", "reference"]
    ev = result(NODE_A, selections=[x.to_json() for x in sink] + [sel("narrow_output")])
    run(h, [ev], started=1.0)
    with h.engine.connect() as c:
        assert sorted(c.execute(text("SELECT variant, role FROM selections"))) == [
            ("narrow_output", "under_test"), ("scalar_kmajor", "under_test"),
            ("stock", "reference")]
    with pytest.raises(ValueError, match="role"):
        Selection("o", "bfloat16", 8, 1, 1, "stock", "x", role="oracle")


def test_one_tree_hash_for_farm_run_and_local_pytest():
    from pathlib import Path

    from db.revision import current_revision
    from farm.fleet import shipping

    repo = Path(__file__).resolve().parent.parent
    local, shipped = current_revision(repo), shipping.revision(repo)
    assert local["tree_hash"] == shipped["tree_hash"] and len(local["tree_hash"]) == 64


def test_the_cli_says_already_recorded_and_no_comparable_run(tmp_path):
    from typer.testing import CliRunner

    from farm.cli import app as cli

    cli._register()
    db = str(tmp_path / "h.db")
    path = write_jsonl(tmp_path / "r.jsonl", [session_start(), result(NODE_A), session_finish()])

    def farm(*argv):
        try:
            res = CliRunner().invoke(cli.app, list(argv), catch_exceptions=False)
            return res.exit_code, res.output
        except SystemExit as e:  # `farm regressions` exits through SystemExit
            return e.code, ""

    code, out = farm("ingest", str(path), "--db", db)
    assert code == 0 and out.startswith("recorded run")
    code, out = farm("ingest", str(path), "--db", db)
    assert code == 0 and out.startswith("already recorded as run"), out
    res = CliRunner().invoke(cli.app, ["regressions", "--db", db])
    assert res.exit_code == 0 and "no comparable earlier run" in res.output, res.output
    assert "0 regression" not in res.output
