"""Bulk ingestion and `farm history` at scale (issue 15): what the fast paths must keep.

- Every row `ingest_events` writes through executemany of tuples equals what the per-row reader
  it replaced produced, field by field, for a corpus of odd events (kept below as the oracle).
- Migration 0005 swaps the large tables' indexes and back, keeping every row.
- `test_history` walks runs newest first and looks each job up by index, and answers exactly what
  ordering every result of the test by (run start, result id) would, ties included.
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from db_fixtures import backends, device, fresh_db, record, result, session_start
from sqlalchemy import event, inspect, text
from typer.testing import CliRunner

import db.history
from db import open_history, queries
from db.engine import make_engine
from db.events import category_of, clean_text, impl_of, role_of
from db.ingest import ingest_jsonl
from db.location import resolve
from db.migrate import alembic_config
from db.models import Base
from farm.cli.app import _register, app
from farm.errors import FarmError

REPO = Path(__file__).resolve().parent.parent

# -- the oracle: the per-result reader ingestion used before bulk rows (verbatim logic) ---------


def _o_str(v, default=None):
    if v is None:
        return default
    return clean_text(v if isinstance(v, str) else str(v))


def _o_float(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _o_int(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def _o_dicts(v):
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def oracle(ev) -> tuple | None:
    """(result fields, measurements, selections, fingerprints) as the old reader stored them."""
    if not isinstance(ev, dict) or ev.get("type") != "result":
        return None
    nodeid = _o_str(ev.get("nodeid"))
    if not nodeid:
        return None
    outcome = _o_str(ev.get("outcome"), "error")
    exp = ev.get("expectation") if isinstance(ev.get("expectation"), dict) else {}
    test_id = _o_str(ev.get("test_id")) or nodeid.split("[", 1)[0]
    params = _o_str(ev.get("params"))
    if params is None:
        params = nodeid[len(test_id) + 1: -1] if nodeid.startswith(test_id + "[") else ""
    res = (nodeid, test_id, params, outcome, category_of(outcome, exp),
           _o_str(exp.get("expected")), _o_str(exp.get("link")), _o_str(exp.get("reason")),
           _o_float(ev.get("duration")), _o_str(ev.get("message"), ""), _o_str(ev.get("output")),
           _o_float(ev.get("time")), _o_str(ev.get("farm_node")), _o_str(ev.get("farm_host")))
    meas = [(n, _o_float(x.get("value")), _o_str(x.get("unit")), _o_float(x.get("bound")))
            for x in _o_dicts(ev.get("measurements")) if (n := _o_str(x.get("name")))]
    sels = []
    for s in _o_dicts(ev.get("selections")):
        shape = [_o_int(s.get(k)) for k in ("M", "K", "N")]
        op, variant = _o_str(s.get("op")), _o_str(s.get("variant"))
        if op and variant and None not in shape:
            sels.append((op, _o_str(s.get("dtype"), ""), *shape, variant,
                         _o_str(s.get("reason")), impl_of(s), role_of(s)))
    fps = [(k, d) for f in _o_dicts(ev.get("fingerprints"))
           if (k := _o_str(f.get("key"))) and (d := _o_str(f.get("digest")))]
    return res, meas, sels, fps


ODD = [None, True, False, 0, 1, -3, 7.0, 7.5, float("nan"), float("inf"), -float("inf"), "",
       "12", " 8", "-4", "x", "caf\udce9", "\udcff", "日本", 123456, [], {}, [1], {"a": 1}]


def odd_events(seed: int, n: int) -> list:
    """Result events whose every field is sometimes missing, mistyped, non-finite or holds
    undecodable bytes, with other event types and non-objects between them."""
    rnd = random.Random(seed)

    def pick(*usual):
        return rnd.choice(usual) if rnd.random() < 0.7 else rnd.choice(ODD)

    out: list = []
    for i in range(n):
        if rnd.random() < 0.05:
            out.append(rnd.choice(["not an object", 3, None, {"type": "log", "x": 1},
                                   {"type": "result"}, {"type": "result", "nodeid": ""}]))
            continue
        ev = {"type": "result", "nodeid": pick(f"suites/t.py::t{i % 7}[p{i}]",
                                               f"suites/t.py::t{i % 7}", f"caf\udce9::t{i}")}
        for key, usual in (("test_id", (f"suites/t.py::t{i % 7}",)), ("params", (f"p{i}",)),
                           ("outcome", ("passed", "failed", "skipped", "crashed", "timeout")),
                           ("duration", (0.5, 2, 1e-9)), ("message", ("ok", "boom \udcfe")),
                           ("output", ("long\noutput",)), ("time", (1764680001.25,)),
                           ("farm_node", ("node-a",)), ("farm_host", ("mac-1",))):
            if rnd.random() < 0.85:
                ev[key] = pick(*usual)
        if rnd.random() < 0.9:
            ev["expectation"] = pick({"expected": pick("pass", "fail"), "link": pick("crbug/1"),
                                      "reason": pick("known"),
                                      "category": pick("expected_pass", "bogus")})
        ev["measurements"] = pick([
            {"name": pick("deviation", "ulps"), "value": pick(0.25, 3),
             "unit": pick("abs"), "bound": pick(1e-3, None)}
            if rnd.random() < 0.9 else pick("junk") for _ in range(rnd.randrange(0, 5))])
        ev["selections"] = pick([
            {"op": pick("gate_up"), "dtype": pick("bfloat16"), "M": pick(8, 8.0, "16"),
             "K": pick(5120), "N": pick(17408), "variant": pick("scalar_kmajor", "stock"),
             "reason": pick("tuned"), "impl": pick("metal", "portable", "rocm"),
             "role": pick("under_test", "reference", "bogus")}
            for _ in range(rnd.randrange(0, 3))])
        ev["fingerprints"] = pick([{"key": pick(f"k{j}"), "digest": pick("d" * 8)}
                                   for j in range(rnd.randrange(0, 3))])
        out.append(ev)
    return out


def stored(h, job: int) -> list[tuple]:
    """Every result of ``job`` with its children, in write order, as the oracle shapes it."""
    with h.engine.connect() as c:
        res = c.execute(text(
            "SELECT id, nodeid, test_id, params, outcome, category, expected, link, reason, "
            "duration, message, output, time, node, host FROM results WHERE job_id = :j "
            "ORDER BY id"), {"j": job}).all()
        kids = {}
        for table, cols in (("measurements", "name, value, unit, bound"),
                            ("selections", 'op, dtype, "M", "K", "N", variant, reason, impl, role'),
                            ("fingerprints", "key, digest")):
            for row in c.execute(text(f"SELECT result_id, {cols} FROM {table} ORDER BY result_id, pos")):
                kids.setdefault((table, row[0]), []).append(tuple(row[1:]))
    return [(tuple(r[1:]), kids.get(("measurements", r[0]), []),
             kids.get(("selections", r[0]), []), kids.get(("fingerprints", r[0]), []))
            for r in res]


@pytest.mark.parametrize("kind", backends())
def test_bulk_rows_are_what_the_per_result_reader_stored(kind, tmp_path):
    h = open_history(fresh_db(kind, tmp_path))
    run = h.start_run("s", "g13s", None)
    expected, jobs = {}, []
    for seed in range(3):  # batches into several jobs, interleaved: ids keep increasing
        jobs.append(h.add_job(run, device(host=f"h{seed}"), f"mac-{seed}", "Darwin", None))
    for k in range(6):
        job = jobs[k % 3]
        evs = odd_events(k, 70)
        want = [o for ev in evs if (o := oracle(ev)) is not None]
        assert h.ingest_events(job, evs) == len(want)
        expected.setdefault(job, []).extend(want)
    assert h.ingest_events(jobs[0], [{"type": "session_start"}, "x"]) == 0  # no result rows
    for job in jobs:
        assert stored(h, job) == expected[job]
    h.close()


@pytest.mark.parametrize("kind", backends())
def test_one_write_for_many_jobs_stores_what_one_write_per_job_stores(kind, tmp_path):
    """`ingest_many` (the run loop's one write per wakeup for every device's batch) gives each
    job exactly the rows `ingest_events` would, children on the right results; an unknown job
    refuses the whole write, leaving nothing of it."""
    h = open_history(fresh_db(kind, tmp_path))
    run = h.start_run("s", "g13s", None)
    jobs = [h.add_job(run, device(host=f"h{k}"), f"mac-{k}", "Darwin", None) for k in range(3)]
    batches = [(jobs[k % 3], odd_events(100 + k, 40)) for k in range(7)]
    expected: dict[int, list] = {}
    for job, evs in batches:
        expected.setdefault(job, []).extend(o for ev in evs if (o := oracle(ev)) is not None)
    assert h.ingest_many(batches) == sum(map(len, expected.values()))
    for job in jobs:
        assert stored(h, job) == expected[job]
    with pytest.raises(FarmError, match="unknown job"):
        h.ingest_many([(jobs[0], odd_events(7, 20)), (10_000, odd_events(8, 5))])
    for job in jobs:
        assert stored(h, job) == expected[job]
    assert h.ingest_many([]) == 0
    h.close()


def test_an_uppercase_surrogate_escape_in_a_file_is_stored_escaped(tmp_path):
    """`load_jsonl` skips `scrub` for lines without a \\uD escape: both cases must count. The
    run's suite comes from the session_start as read (no per-field cleaning after it)."""
    start = json.dumps(session_start(suite="s\udcfex")).replace("\\udcfe", "\\uDCFE")
    upper = json.dumps(result("suites/t.py::upper", message="c\udcfed"))
    raw = [start, json.dumps(result("suites/t.py::lower", message="a\udcffb")),
           upper.replace("\\udcfe", "\\uDCFE")]
    assert "\\uDCFE" in raw[0] and "\\uDCFE" in raw[2] and "\\ud" not in raw[0] + raw[2]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(raw) + "\n")
    h = open_history(tmp_path / "h.db")
    ingest_jsonl(h, path)
    with h.engine.connect() as c:
        got = dict(c.execute(text("SELECT nodeid, message FROM results")).all())
        suite = c.execute(text("SELECT suite FROM runs")).scalar()
    assert got == {"suites/t.py::lower": "a\\udcffb", "suites/t.py::upper": "c\\udcfed"}
    assert suite == "s\\udcfex"
    h.close()


# -- migration 0005 ---------------------------------------------------------------------------

OLD_INDEXES = {"ix_results_job_id", "ix_results_nodeid", "ix_results_category",
               "ix_results_test_id_job_id", "ix_measurements_name_result_id",
               "ix_selections_shape", "ix_fingerprints_key"}
NEW_INDEXES = {"ix_results_job_id_nodeid"}  # at head: 0006 dropped (job_id, test_id) too
BIG = ("results", "measurements", "selections", "fingerprints")


def _indexes(engine) -> set[str]:
    """Indexes of the large tables (at head, three of them are views: no indexes)."""
    insp = inspect(engine)
    return {ix["name"] for t in set(BIG) & set(insp.get_table_names())
            for ix in insp.get_indexes(t)}


def _counts(engine) -> dict[str, int]:
    with engine.connect() as c:
        return {t: c.execute(text(f"SELECT count(*) FROM {t}")).scalar() for t in BIG}


@pytest.mark.parametrize("kind", backends())
def test_0005_swaps_the_indexes_down_and_up_keeping_every_row(kind, tmp_path):
    target = fresh_db(kind, tmp_path)
    h = open_history(target)
    record(h, [(device(), "mac-1", odd_events(1, 40)),
               (device(arch="cpu"), "ci", odd_events(2, 40))])
    before = _counts(h.engine)
    assert before["results"] > 50 and min(before.values()) > 0
    assert NEW_INDEXES <= _indexes(h.engine) and not OLD_INDEXES & _indexes(h.engine)
    h.close()
    eng = make_engine(resolve(target), "write")
    with eng.connect() as conn:
        command.downgrade(alembic_config(conn), "0004")
        conn.commit()
    assert OLD_INDEXES <= _indexes(eng) and not NEW_INDEXES & _indexes(eng)
    assert _counts(eng) == before
    eng.dispose()
    h = open_history(target)  # up again, as any command does
    assert NEW_INDEXES <= _indexes(h.engine) and not OLD_INDEXES & _indexes(h.engine)
    assert _counts(h.engine) == before
    with h.engine.connect() as c:
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
    record(h, [(device(), "mac-1", odd_events(3, 10))])  # and it still takes results
    assert _counts(h.engine)["results"] > before["results"]
    h.close()


# -- farm history -----------------------------------------------------------------------------

T = "suites/t.py::test_a"


def _history_with_ties(tmp_path, monkeypatch) -> tuple[object, Path]:
    """Runs whose start times tie (a chunk boundary falls inside a tie) and whose ids sort
    opposite to the order they were written in, plus older runs ingested last, on two devices;
    the test appears under its test id (parametrized) and as a bare node id."""
    ids = iter(f"r-{n:03d}" for n in range(999, 0, -1))
    monkeypatch.setattr(db.history, "new_run_id", lambda now: next(ids))
    path = tmp_path / "h.db"
    h = open_history(path)

    def evs(k):
        return [result(f"{T}[p{k}]"), result(f"{T}[q{k}]", outcome="failed"),
                result("suites/t.py::other"), result(T)]

    for k in range(30):  # 30 runs at one start time: ids r-999.. in write order
        record(h, [(device(), "mac-1", evs(k)), (device(arch="cpu"), "ci", evs(k))],
               started=2000.0)
    for k in range(5):  # older runs written after them
        record(h, [(device(), "mac-1", evs(100 + k))], started=1000.0 + k)
    return h, path


def _brute_force(h, test: str, limit: int, arch: str | None = None) -> list[tuple]:
    with h.engine.connect() as c:
        rows = c.execute(text(
            "SELECT r.id, ru.id, r.nodeid, ru.started FROM results r "
            "JOIN jobs j ON j.id = r.job_id JOIN runs ru ON ru.id = j.run_id "
            "JOIN devices d ON d.id = j.device_id "
            "WHERE (r.test_id = :t OR r.nodeid = :t) AND (:a IS NULL OR d.arch = :a)"),
            {"t": test, "a": arch}).all()
    rows.sort(key=lambda r: (r[3], r[0]), reverse=True)
    return [(r[1], r[2]) for r in reversed(rows[:limit])]


def test_history_answers_what_sorting_every_result_would(tmp_path, monkeypatch):
    h, _ = _history_with_ties(tmp_path, monkeypatch)
    for test in (T, f"{T}[p3]", "suites/t.py::other"):
        for limit in (1, 2, 7, 50, 500):
            got = [(r["run_id"], r["nodeid"]) for r in queries.test_history(h, test, limit=limit)]
            assert got == _brute_force(h, test, limit), (test, limit)
    cpu = queries.test_history(h, T, limit=9, device=lambda d: d["arch"] == "cpu")
    assert [(r["run_id"], r["nodeid"]) for r in cpu] == _brute_force(h, T, 9, "cpu")
    assert {r["device"] for r in cpu} == {"cpu @ci"}
    h.close()


def test_history_looks_results_up_by_job_never_by_scanning(tmp_path, monkeypatch):
    h, path = _history_with_ties(tmp_path, monkeypatch)
    stmts: list[tuple[str, tuple]] = []
    event.listen(h.engine, "before_cursor_execute",
                 lambda conn, cur, sql, params, ctx, many: stmts.append((sql, params)))
    queries.test_history(h, T, limit=50)
    h.close()
    con = sqlite3.connect(path)
    plans = [[row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql, params)]
             for sql, params in stmts if " results" in sql]
    con.close()
    assert plans
    lines = [line for plan in plans for line in plan]
    assert not [x for x in lines if x.startswith("SCAN results")], lines
    # the test's parametrized node ids: a range of the same index (migration 0006)
    assert any("INDEX ix_results_job_id_nodeid (job_id=? AND nodeid>? AND nodeid<?)" in x
               for x in lines)
    assert any("INDEX ix_results_job_id_nodeid (job_id=? AND nodeid=?)" in x for x in lines)


def test_farm_history_cli_gives_the_same_series_without_loading_the_orm(tmp_path, monkeypatch):
    h, path = _history_with_ties(tmp_path, monkeypatch)
    want = _brute_force(h, T, 12)
    h.close()
    _register()
    res = CliRunner().invoke(app, ["history", T, "--limit", "12", "--db", str(path), "--json"])
    assert res.exit_code == 0, res.output
    assert [(r["run_id"], r["nodeid"]) for r in json.loads(res.output)] == want
    # The installed command's import path: the ORM would cost more than the query.
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: print('ORM' if 'sqlalchemy.orm' in sys.modules else "
             "'no ORM', file=sys.stderr))\n"
             "from farm.cli.app import main\n"
             f"sys.argv = ['farm', 'history', {T!r}, '--db', {str(path)!r}]\n"
             "main()\n")
    p = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True,
                       text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == "no ORM"
    assert "q29" in p.stdout and "FAIL" not in p.stderr
