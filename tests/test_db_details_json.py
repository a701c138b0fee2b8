"""Schema 0006: a result's measurements, selections and fingerprints as JSON columns of its row.

Migrating a 0005 history moves every child row into the JSON exactly (values to the last bit,
order, NULLs); the views of the old tables' names read them back with the old columns; a
downgrade restores the tables; odd input is stored as the tolerant reader says, never failing a
batch. Real databases (SQLite files in tmp_path; PostgreSQL when FARM_TEST_DB_URL is set)."""

from __future__ import annotations

import json
import math

import pytest
from alembic import command
from db_fixtures import backends, device, fresh_db, meas, record, result, seed_old_job, sel
from sqlalchemy import inspect, text

from db import open_history
from db.details import LAYOUTS
from db.engine import make_engine
from db.location import resolve
from db.migrate import HEAD, alembic_config
from db.queries import result_details, run_results

# Values that a lossy JSON writer would change: 17 significant digits, tiny and huge doubles,
# non-ASCII and escapes, NULLs where the old columns allowed them.
TRICKY = [0.1 + 0.2, 1e-300 * 3.3, 1.7976931348623157e308, -0.0, 123456789.12345679, None]
PG_ONLY_SKIP = "needs PostgreSQL"


def _migrate(target: str, revision: str, down: bool = False) -> None:
    eng = make_engine(resolve(target), "write")
    with eng.connect() as conn:
        (command.downgrade if down else command.upgrade)(alembic_config(conn), revision)
        conn.commit()
    eng.dispose()


def _history_at_0005(target: str) -> dict[str, dict[int, list[tuple]]]:
    """A 0005 history: two results with children inserted interleaved (so child ids do not
    follow results), one without any; returns what each table holds per nodeid, in id order."""
    _migrate(target, "0005")
    eng = make_engine(resolve(target), "write")
    with eng.begin() as c:
        seed_old_job(c, suite="s")
        for nodeid in ("t.py::a[x]", "t.py::b", "t.py::empty"):
            c.execute(text("INSERT INTO results (job_id, nodeid, test_id, params, outcome, "
                           "category) SELECT id, :n, :n, '', 'passed', 'expected_pass' "
                           "FROM jobs"), {"n": nodeid})
        ids = dict(c.execute(text("SELECT nodeid, id FROM results")).all())
        a, b = ids["t.py::a[x]"], ids["t.py::b"]
        for k, v in enumerate(TRICKY):  # interleaved: a, b, a, b, ...
            for rid in (a, b):
                c.execute(text("INSERT INTO measurements (result_id, name, value, unit, bound) "
                               "VALUES (:r, :n, :v, :u, :b)"),
                          {"r": rid, "n": f"m{k}-caf\u00e9 \"q\"\\", "v": v,
                           "u": None if k % 2 else "ulp", "b": v if k % 3 else None})
        for k, (rid, impl, role) in enumerate([(b, "metal", "reference"), (a, None, None),
                                               (b, None, "under_test")]):
            c.execute(text('INSERT INTO selections (result_id, op, dtype, "M", "K", "N", '
                           "variant, reason, impl, role) VALUES (:r, 'gate_up', 'bfloat16', "
                           ":m, 5120, 17408, :v, :reason, :i, :role)"),
                      {"r": rid, "m": 2**30 + k, "v": f"v{k}", "reason": None if k else "tuned",
                       "i": impl, "role": role})
        for k in range(3):
            c.execute(text("INSERT INTO fingerprints (result_id, key, digest) "
                           "VALUES (:r, :k, :d)"), {"r": a, "k": f"k{2 - k}", "d": "d" * 64})
        before = _children(c, "tables")
    eng.dispose()
    return before


def _children(c, source: str) -> dict[str, dict[str, list[tuple]]]:
    """Per table (or view), per nodeid, the rows' fields in the old order: by id from the 0005
    tables, by position from the views."""
    order = "t.id" if source == "tables" else "t.result_id, t.pos"
    out: dict[str, dict[str, list[tuple]]] = {}
    for kind, fields in LAYOUTS.items():
        cols = ", ".join(f't."{f}"' for f in fields)
        rows = c.execute(text(f"SELECT r.nodeid, {cols} FROM {kind} t JOIN results r "
                              f"ON r.id = t.result_id ORDER BY {order}")).all()
        for nodeid, *values in rows:
            out.setdefault(kind, {}).setdefault(nodeid, []).append(tuple(values))
    return out


def _same(a, b) -> bool:
    """Exactly equal, floats to the bit (-0.0 included)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, (list, tuple, dict)):
        items = (lambda x: sorted(x.items())) if isinstance(a, dict) else list
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same(x, y) for x, y in zip(items(a), items(b), strict=True)))
    return a == b and type(a) is type(b)


@pytest.mark.parametrize("kind", backends())
def test_0005_history_upgrades_keeping_every_child_row_exactly(kind, tmp_path):
    target = fresh_db(kind, tmp_path)
    before = _history_at_0005(target)
    assert sum(len(v) for t in before.values() for v in t.values()) == 2 * len(TRICKY) + 6
    h = open_history(target)  # migrates to head
    with h.engine.connect() as c:
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar() == HEAD
        after = _children(c, "views")
        empty = c.execute(text("SELECT measurements_json, selections_json, fingerprints_json "
                               "FROM results WHERE nodeid = 't.py::empty'")).one()
        ids = dict(c.execute(text("SELECT nodeid, id FROM results")).all())
    assert _same(after, before), (after, before)
    assert tuple(empty) == (None, None, None)  # no children: NULL, not "[]"
    # The library's reader decodes the same values from the JSON directly.
    got = result_details(h, list(ids.values()))
    for kind_ in LAYOUTS:
        for nodeid, rows in before[kind_].items():
            want = [dict(zip(LAYOUTS[kind_], r, strict=True)) for r in rows]
            assert _same(got[ids[nodeid]][kind_], want), (kind_, nodeid)
    h.close()


@pytest.mark.parametrize("kind", backends())
def test_0006_downgrades_to_the_0005_tables_and_up_again_keeping_every_row(kind, tmp_path):
    ref = fresh_db(kind, tmp_path / "ref") if kind == "postgresql" else str(
        tmp_path / "ref.db")
    _migrate(ref, "0005")
    target = fresh_db(kind, tmp_path)
    h = open_history(target)
    record(h, [(device(), "mac-1", [
        result("t.py::a[x]", measurements=[meas("deviation", 0.1 + 0.2, 1e-3),
                                          meas("ulps", None, unit=None)],
               selections=[sel("scalar_kmajor"), {**sel("stock", M=16), "impl": "metal",
                                                  "role": "reference"}],
               fingerprints=[{"key": "k/1", "digest": "ab" * 32}]),
        result("t.py::b"),
    ])])
    with h.engine.connect() as c:
        at_head = _children(c, "views")
    h.close()
    _migrate(target, "0005", down=True)
    eng = make_engine(resolve(target), "write")
    eng_ref = make_engine(resolve(ref), "write")
    insp, insp_ref = inspect(eng), inspect(eng_ref)
    for table in ("results", *LAYOUTS):
        assert ([(col["name"], str(col["type"]), col["nullable"])
                 for col in insp.get_columns(table)]
                == [(col["name"], str(col["type"]), col["nullable"])
                    for col in insp_ref.get_columns(table)]), table
        assert ({ix["name"]: ix["column_names"] for ix in insp.get_indexes(table)}
                == {ix["name"]: ix["column_names"] for ix in insp_ref.get_indexes(table)}), table
    assert not insp.get_view_names()
    with eng.connect() as c:
        assert _same(_children(c, "tables"), at_head)
    eng.dispose()
    eng_ref.dispose()
    h = open_history(target)  # up again
    with h.engine.connect() as c:
        assert _same(_children(c, "views"), at_head)
    h.close()


@pytest.mark.parametrize("kind", backends())
def test_the_views_have_the_old_columns_and_types(kind, tmp_path):
    h = open_history(fresh_db(kind, tmp_path))
    record(h, [(device(), "mac-1", [result(
        "t.py::a", measurements=[meas("deviation", 2.5, 1.0)],
        selections=[{**sel("scalar_kmajor"), "impl": "metal"}],
        fingerprints=[{"key": "k", "digest": "d"}])])])
    with h.engine.connect() as c:
        for kind_, fields in LAYOUTS.items():
            res = c.execute(text(f"SELECT * FROM {kind_}"))
            assert tuple(res.keys()) == ("result_id", "pos", *fields)
            row = res.one()
            assert row.pos == 0 and isinstance(row.result_id, int)
        assert tuple(c.execute(text("SELECT name, value, unit, bound FROM measurements")).one()) \
            == ("deviation", 2.5, "abs", 1.0)
        assert tuple(c.execute(text('SELECT op, dtype, "M", "K", "N", variant, reason, impl, '
                                    "role FROM selections")).one()) == (
            "gate_up", "bfloat16", 8, 5120, 17408, "scalar_kmajor", "tuned", "metal",
            "under_test")
        # Typed as the old columns were: a filter on a number compares numbers.
        assert c.execute(text('SELECT count(*) FROM selections WHERE "M" > 7 AND "M" < 9')
                         ).scalar() == 1
        assert c.execute(text("SELECT count(*) FROM measurements WHERE value > 2.4")
                         ).scalar() == 1
    h.close()


def _odd() -> dict:
    """A result whose details are full of what a buggy or hostile writer sends."""
    return {
        "type": "result", "nodeid": "t.py::odd[caf\udce9]", "outcome": "passed",
        "measurements": [
            {"name": "nan", "value": float("nan"), "unit": "u\udcff", "bound": float("inf")},
            {"name": "ninf", "value": float("-inf"), "bound": -1e308 * 10},
            {"name": "huge", "value": 10**400, "bound": True},
            {"name": "text", "value": "3.5", "unit": 7},
            {"name": "", "value": 1.0}, {"value": 2.0}, "junk", None,
            {"name": "ok", "value": 1, "unit": None, "bound": 2},
        ],
        "selections": [
            {"op": "gate_up", "dtype": "bf16", "M": 2**70, "K": 1, "N": 1, "variant": "v"},
            {"op": "gate_up", "dtype": "bf16", "M": "\u00b2", "K": 1, "N": 1, "variant": "v"},
            {"op": "gate_up", "dtype": "bf16", "M": "--5", "K": 1, "N": 1, "variant": "v"},
            {"op": "gate_up", "dtype": None, "M": "16", "K": 8.0, "N": True, "variant": "v"},
            {"op": "gate_up", "dtype": 3, "M": " 16 ", "K": 8.0, "N": 4, "variant": "v\udcfe",
             "impl": "rocm", "role": "bogus", "reason": ["x"]},
        ],
        "fingerprints": [{"key": "k\udcfd", "digest": "d"}, {"key": "", "digest": "d"},
                         {"key": "k", "digest": 5}, ["k", "d"]],
    }


@pytest.mark.parametrize("kind", backends())
def test_odd_details_are_stored_tolerantly_as_valid_json(kind, tmp_path):
    h = open_history(fresh_db(kind, tmp_path))
    run = h.start_run("s", "g13s", None)
    job = h.add_job(run, device(), "mac-1", "Darwin", None)
    ok = result("t.py::fine", measurements=[meas("deviation", 0.5)])
    assert h.ingest_events(job, [_odd(), ok]) == 2  # the batch is kept whole
    with h.engine.connect() as c:
        raw = c.execute(text("SELECT measurements_json, selections_json, fingerprints_json "
                             "FROM results WHERE nodeid LIKE 't.py::odd%'")).one()
        views = _children(c, "views")
        fine_sels = c.execute(text("SELECT selections_json, fingerprints_json FROM results "
                                   "WHERE nodeid = 't.py::fine'")).one()
    assert tuple(fine_sels) == (None, None)  # none: NULL, not "[]"
    nodeid = "t.py::odd[caf\\udce9]"  # the surrogate escaped, not lost
    assert views["measurements"][nodeid] == [
        ("nan", None, "u\\udcff", None), ("ninf", None, None, None),
        ("huge", None, None, None), ("text", None, "7", None), ("ok", 1.0, None, 2.0)]
    assert views["selections"][nodeid] == [
        ("gate_up", "3", 16, 8, 4, "v\\udcfe", "['x']", None, "under_test")]
    assert views["fingerprints"][nodeid] == [("k\\udcfd", "d"), ("k", "5")]
    assert views["measurements"]["t.py::fine"] == [("deviation", 0.5, "abs", None)]
    for column in raw:
        json.loads(column)  # strict JSON: no NaN / Infinity tokens
        assert "NaN" not in column and "Infinity" not in column
    # And the library's readers read it back the same way.
    [odd, fine] = run_results(h, run)
    assert [x["value"] for x in odd["measurements"]] == [None, None, None, None, 1.0]
    assert odd["selections"][0]["M"] == 16 and fine["measurements"][0]["value"] == 0.5
    h.close()


def test_a_hand_written_bad_json_column_reads_as_no_details(tmp_path):
    """Only the farm writes the columns, but a history edited by hand must still be readable
    by every command: a malformed or non-array column reads as no details."""
    h = open_history(tmp_path / "h.db")
    run = record(h, [(device(), "mac-1", [
        result("t.py::a", measurements=[meas("deviation", 0.5)]), result("t.py::b"),
        result("t.py::c", measurements=[meas("deviation", 0.25)])])])
    with h.engine.begin() as c:
        c.execute(text("UPDATE results SET measurements_json = '[[\"x\", 1' "
                       "WHERE nodeid = 't.py::a'"))
        c.execute(text("UPDATE results SET measurements_json = '{\"x\": 1}', "
                       "selections_json = '[5, [\"op\"]]' WHERE nodeid = 't.py::b'"))
    a, b, c_ = run_results(h, run)
    assert a["measurements"] == [] and b["measurements"] == []
    assert b["selections"] == [dict.fromkeys(LAYOUTS["selections"]) | {"op": "op"}]
    assert c_["measurements"][0]["value"] == 0.25
    h.close()


@pytest.mark.parametrize("kind", backends())
def test_details_of_which_none_were_kept_are_null(kind, tmp_path):
    h = open_history(fresh_db(kind, tmp_path))
    record(h, [(device(), "mac-1", [{
        **result("t.py::dropped"), "measurements": [{"value": 1.0}, "x"],
        "selections": [{"op": "", "variant": "v", "M": 1, "K": 1, "N": 1}],
        "fingerprints": [{"key": "", "digest": "d"}]}])])
    with h.engine.connect() as c:
        assert tuple(c.execute(text("SELECT measurements_json, selections_json, "
                                    "fingerprints_json FROM results")).one()) == (None,) * 3
    h.close()


@pytest.mark.parametrize("kind", backends())
def test_show_counts_each_result_once_per_distinct_selection(kind, tmp_path):
    """`farm show`'s selections are read from the JSON and counted here, as the old
    ``count(DISTINCT result_id)`` did: a selection a test made twice counts the test once."""
    from db.queries import show_run

    h = open_history(fresh_db(kind, tmp_path))
    twice = [sel("scalar_kmajor"), sel("scalar_kmajor"), {**sel("stock"), "impl": "metal"}]
    run = record(h, [(device(), "mac-1", [result("t.py::a", selections=twice),
                                          result("t.py::b", selections=twice[:1])])])
    got = {(s["variant"], s["impl"]): s["tests"] for s in show_run(h, run)["selections"]}
    assert got == {("scalar_kmajor", None): 2, ("stock", "metal"): 1}
    h.close()


def test_export_json_results_carry_decoded_details_not_the_json_columns(tmp_path):
    """`farm export --format json` keeps its documented keys (docs/RESULTS_FORMAT.md): the
    details decoded under their names, never the raw ``*_json`` columns beside them."""
    from db.export import to_json

    h = open_history(tmp_path / "h.db")
    run = record(h, [(device(), "mac-1", [result(
        "t.py::a", measurements=[meas("deviation", 0.5)], selections=[sel("stock")],
        fingerprints=[{"key": "k", "digest": "d"}])])])
    [r] = json.loads(to_json(h, run))["jobs"][0]["results"]
    assert set(r) == {"id", "job_id", "nodeid", "test_id", "params", "outcome", "category",
                      "expected", "link", "reason", "duration", "message", "output", "time",
                      "node", "host", "measurements", "selections", "fingerprints"}
    assert r["measurements"] == [{"name": "deviation", "value": 0.5, "unit": "abs",
                                  "bound": None}]
    assert r["fingerprints"] == [{"key": "k", "digest": "d"}]
    h.close()
