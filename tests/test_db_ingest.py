"""Ingestion: batched and tolerant, concurrent writers lose nothing, files and local pytest
runs are recorded as runs."""

from __future__ import annotations

import json
import multiprocessing
import os

import pytest
from db_fixtures import (
    backends,
    device,
    fresh_db,
    meas,
    result,
    sel,
    session_finish,
    session_start,
    write_jsonl,
)
from sqlalchemy import text

from db import open_history
from db.errors import FarmError
from db.ingest import ingest_jsonl


def count(h, table: str) -> int:
    with h.engine.connect() as c:
        return c.execute(text(f"SELECT count(*) FROM {table}")).scalar()


@pytest.mark.parametrize("kind", backends())
def test_batch_is_written_with_children_and_unknowns_ignored(kind, tmp_path):
    h = open_history(fresh_db(kind, tmp_path))
    run = h.start_run("m8-parity", "g13s", {"git_sha": "abc", "dirty": True, "tree_hash": "t"})
    job = h.add_job(run, device(), "mac-1", "Darwin", "node-1")
    events = [
        session_start(),
        {"type": "a_type_from_the_future", "payload": [1, 2]},
        result(measurements=[meas("deviation", None, 0.001), meas("ulps", 1.0),
                             {"name": "weird", "value": "not a number", "bound": [1]},
                             {"value": 3.0}],
               selections=[sel("scalar_kmajor"), {"op": "x", "M": "eight"}],
               fingerprints=[{"key": "k", "digest": "d"}, {"key": "no digest"}]),
        {"type": "result", "nodeid": "suites/t.py::bare"},  # nearly everything missing
        {"type": "result"},  # no node id: dropped
        "not even an object",
        session_finish(),
    ]
    assert h.ingest_events(job, events) == 2
    assert (count(h, "results"), count(h, "measurements"), count(h, "selections"),
            count(h, "fingerprints")) == (2, 3, 1, 1)
    with h.engine.connect() as c:
        vals = dict(c.execute(text("SELECT name, value FROM measurements")).all())
        bare = c.execute(text("SELECT outcome, category, test_id FROM results "
                              "WHERE nodeid = 'suites/t.py::bare'")).one()
    assert vals == {"deviation": None, "ulps": 1.0, "weird": None}
    assert tuple(bare) == ("error", "unexpected_fail", "suites/t.py::bare")
    assert h.job_verdict(job) == "failed"
    h.finish_job(job, "failed", error="one failure", attempts=2)
    h.finish_run(run, h.run_verdict(run))
    with h.engine.connect() as c:
        assert c.execute(text("SELECT status FROM runs")).scalar() == "failed"
        assert tuple(c.execute(text("SELECT status, attempts, error FROM jobs")).one()) == (
            "failed", 2, "one failure")
    h.close()


def test_same_device_is_one_row_and_emulation_is_another(tmp_path):
    h = open_history(tmp_path / "h.db")
    run = h.start_run("s", "g13s", {})
    a = h.add_job(run, device(), "mac-1", "Darwin", "n1")
    b = h.add_job(run, device(), "mac-1", "Darwin", "n2")
    h.add_job(run, device(emulated=True, chip="emulated on EPYC", backend="cpu"), "mac-1",
              "Darwin", "n3")
    h.add_job(run, device(mlx_version="0.33.0"), "mac-1", "Darwin", "n4")
    with h.engine.connect() as c:
        rows = c.execute(text("SELECT variant_key, lineage_key, emulated FROM devices")).all()
        same = c.execute(text("SELECT count(DISTINCT device_id) FROM jobs WHERE id IN (:a, :b)"),
                         {"a": a, "b": b}).scalar()
    assert same == 1 and len(rows) == 3
    assert len({r[0] for r in rows}) == 3
    real_lineages = {r[1] for r in rows if not r[2]}
    assert len(real_lineages) == 1  # the MLX upgrade keeps the device's lineage
    h.close()


def test_bad_library_calls_are_farm_errors(tmp_path):
    h = open_history(tmp_path / "h.db")
    with pytest.raises(FarmError, match="unknown run"):
        h.add_job("nope", device(), "h", "o", "n")
    with pytest.raises(FarmError, match="unknown job"):
        h.ingest_events(12345, [result()])
    run = h.start_run("s", "g13s", {})
    with pytest.raises(FarmError, match="bad run status"):
        h.finish_run(run, "great")
    with pytest.raises(FarmError, match="unknown job"):
        h.finish_job(999, "passed")
    h.close()
    ro = open_history(tmp_path / "h.db", write=False)
    with pytest.raises(FarmError, match="read-only"):
        ro.start_run("s", "g13s", {})
    ro.close()


def test_ingest_jsonl_keeps_everything_readable(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [
        session_start(suite="numeric-bounds"),
        result("suites/t.py::a"),
        result("suites/t.py::b", outcome="failed", category="expected_fail", expected="fail"),
    ])
    with open(path, "a") as f:
        f.write(json.dumps(session_finish()) + "\n")
        f.write('{"type": "result", "nodeid": "trunc')  # the writer died mid-line
    h = open_history(tmp_path / "h.db")
    run = ingest_jsonl(h, path)
    with h.engine.connect() as c:
        r = c.execute(text("SELECT suite, status, selector FROM runs WHERE id = :r"),
                      {"r": run}).one()
        job = c.execute(text("SELECT status FROM jobs")).scalar()
    assert tuple(r) == ("numeric-bounds", "passed", "applegpu_g13s")
    assert job == "passed" and count(h, "results") == 2
    h.close()


def test_ingest_jsonl_without_finish_records_a_lost_job(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [session_start(), result()])
    h = open_history(tmp_path / "h.db")
    run = ingest_jsonl(h, path, suite="given")
    with h.engine.connect() as c:
        assert tuple(c.execute(text("SELECT suite, status FROM runs")).one()) == (
            "given", "incomplete")
        assert c.execute(text("SELECT status FROM jobs")).scalar() == "lost"
    assert run
    with pytest.raises(FarmError, match="no session_start"):
        ingest_jsonl(h, write_jsonl(tmp_path / "e.jsonl", [result()]))
    with pytest.raises(FarmError, match="cannot read"):
        ingest_jsonl(h, tmp_path / "missing.jsonl")
    h.close()


def _impls(h) -> list[tuple]:
    with h.engine.connect() as c:
        return [tuple(r) for r in c.execute(text(
            "SELECT s.op, s.variant, s.impl FROM selections s JOIN results r "
            "ON r.id = s.result_id ORDER BY s.result_id, s.pos"))]


def test_ingest_jsonl_records_impl_and_reads_older_files_as_unknown(tmp_path):
    old = sel("stock", op="down")  # as a file from before the field: no "impl" key at all
    assert "impl" not in old
    path = write_jsonl(tmp_path / "r.jsonl", [
        session_start(device(emulated=True, chip="emulated on EPYC", backend="cpu")),
        result("suites/t.py::a", selections=[
            {**sel("scalar_kmajor"), "impl": "metal-emulated"},
            {**sel("verify_m4", M=4), "impl": "portable"},
            {**sel("narrow_output", op="out"), "impl": None},
            {**sel("fp16_matrix", op="vocab"), "impl": ""},
            old]),
        session_finish(),
    ])
    h = open_history(tmp_path / "h.db")
    ingest_jsonl(h, path)
    assert _impls(h) == [("gate_up", "scalar_kmajor", "metal-emulated"),
                         ("gate_up", "verify_m4", "portable"), ("out", "narrow_output", None),
                         ("vocab", "fp16_matrix", None), ("down", "stock", None)]
    h.close()


def test_ingest_jsonl_refuses_an_unknown_impl_and_writes_nothing(tmp_path):
    path = write_jsonl(tmp_path / "r.jsonl", [
        session_start(),
        result("suites/t.py::a", selections=[{**sel("scalar_kmajor"), "impl": "metal"}]),
        result("suites/t.py::b", selections=[{**sel("scalar_kmajor"), "impl": "rocm"}]),
        session_finish(),
    ])
    h = open_history(tmp_path / "h.db")
    for events in (None, [json.loads(x) for x in path.read_text().splitlines()]):
        with pytest.raises(FarmError) as e:
            ingest_jsonl(h, path, events=events)
        msg = str(e.value)
        assert "\n" not in msg and e.value.exit_code == 2
        assert "suites/t.py::b" in msg and "'rocm'" in msg and "metal-emulated" in msg
    assert count(h, "runs") == count(h, "results") == 0
    # A value of the wrong type is named too, not silently stored as unknown.
    write_jsonl(path, [session_start(), result(selections=[{**sel("stock"), "impl": 3}])])
    with pytest.raises(FarmError, match="impl '3'"):
        ingest_jsonl(h, path)
    h.close()


def test_live_stream_stores_an_unknown_impl_as_null_rather_than_lose_the_result(tmp_path):
    """The farm's own stream is tolerant (the module's rule): the result is kept."""
    h = open_history(tmp_path / "h.db")
    run = h.start_run("s", "g13s", {})
    job = h.add_job(run, device(), "mac-1", "Darwin", "n1")
    assert h.ingest_events(job, [result(selections=[{**sel("scalar_kmajor"), "impl": "rocm"},
                                                    {**sel("stock", op="down"),
                                                     "impl": "stock-native"}])]) == 1
    assert _impls(h) == [("gate_up", "scalar_kmajor", None), ("down", "stock", "stock-native")]
    h.close()


WRITERS, BATCHES, PER_BATCH = 4, 15, 20


def _writer(target: str, n: int) -> None:
    h = open_history(target)
    run = h.start_run("concurrency", "all", {})
    job = h.add_job(run, device(), f"host-{n % 2}", "Darwin", f"node-{n}")
    for b in range(BATCHES):
        h.ingest_events(job, [result(f"suites/t.py::w{n}_{b}_{i}",
                                     measurements=[meas("deviation", 0.001)])
                              for i in range(PER_BATCH)])
        h.heartbeat(run)
    h.finish_job(job, "passed")
    h.finish_run(run, "passed")
    h.close()


@pytest.mark.parametrize("kind", backends())
def test_concurrent_writer_processes_lose_no_row(kind, tmp_path):
    # The writers also race on creating the schema: nobody opened the file before them.
    target = fresh_db(kind, tmp_path)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(target, n)) for n in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    h = open_history(target, write=False)
    assert count(h, "results") == WRITERS * BATCHES * PER_BATCH
    assert count(h, "measurements") == WRITERS * BATCHES * PER_BATCH
    assert count(h, "runs") == WRITERS
    assert count(h, "devices") == 2  # two hosts, each registered once despite the race
    h.close()


# pytest sessions for the plugin run in process (pytester): the same entry points load as in a
# subprocess, without paying for a fresh interpreter and its imports each time.
pytest_plugins = ["pytester"]

STAND_IN_SUITES_PLUGIN = """
import time
import pytest

class Spec:
    @pytest.hookspec
    def pytest_farm_event(self, config, event): ...

def pytest_addhooks(pluginmanager):
    pluginmanager.add_hookspecs(Spec)

DEV = {"arch": "applegpu_g14g", "generation": 14, "size": "g", "chip": "emulated on X",
       "backend": "cpu", "mlx_version": "0.32.4", "emulated": True}
CONFIG = []

def emit(config, ev):
    config.hook.pytest_farm_event(config=config, event=ev)

def pytest_configure(config):
    CONFIG.append(config)

def pytest_sessionstart(session):
    emit(session.config, {"type": "session_start", "time": time.time(), "device": DEV,
                          "host": "local", "os": "Linux", "suite": "local-suite"})

def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome == "skipped":
        emit(CONFIG[-1], {"type": "result", "nodeid": report.nodeid, "outcome": report.outcome,
                          "duration": report.duration,
                          "measurements": [{"name": "deviation", "value": 0.5}]})

def pytest_sessionfinish(session, exitstatus):
    emit(session.config, {"type": "session_finish", "time": time.time(),
                          "exitstatus": int(exitstatus)})
"""


def test_local_pytest_run_is_recorded_with_farm_db(pytester):
    """`pytest --farm-db` through the real plugin entry point; events come from a stand-in
    for the suites plugin, so this test depends on the hook contract only. 121 results with a
    flush every 50: three batches."""
    pytester.makeconftest(STAND_IN_SUITES_PLUGIN)
    pytester.makepyfile(test_local="""
        import pytest
        @pytest.mark.parametrize("i", range(120))
        def test_ok(i):
            assert i >= 0
        def test_bad():
            assert False
    """)
    db_path = pytester.path / "h.db"
    res = pytester.runpytest_inprocess("-p", "no:dflash2_farm", "-p", "no:cacheprovider",
                                       f"--farm-db={db_path}")
    assert res.ret == 1, res.outlines
    h = open_history(db_path, write=False)
    with h.engine.connect() as c:
        run = c.execute(text("SELECT suite, status, git_sha, tree_hash FROM runs")).one()
        cats = dict(c.execute(text("SELECT category, count(*) FROM results "
                                   "GROUP BY category")).all())
        dev = c.execute(text("SELECT arch, emulated, host FROM devices")).one()
        job = c.execute(text("SELECT status FROM jobs")).scalar()
    assert run.suite == "local-suite" and run.status == "failed" and run.tree_hash
    assert cats == {"expected_pass": 120, "unexpected_fail": 1} and job == "failed"
    assert tuple(dev) == ("applegpu_g14g", True, "local")
    h.close()


def test_farm_db_that_cannot_open_is_a_usage_error(pytester):
    junk = pytester.path / "junk.db"
    junk.write_bytes(os.urandom(100))
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--farm-db={junk}")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = "\n".join(res.errlines)
    assert "not a SQLite database" in err and "Traceback" not in err


def test_plugin_module_loads_without_the_hookspec(pytester):
    """The hookimpl is optional: a session without the suites plugin still starts."""
    pytester.makepyfile(test_y="def test_y():\n    pass\n")
    res = pytester.runpytest_inprocess("-p", "no:dflash2_farm", "-p", "no:cacheprovider",
                                       f"--farm-db={pytester.path / 'h.db'}")
    assert res.ret == 0, res.outlines
    assert (pytester.path / "h.db").exists()


def test_farm_db_records_what_the_suites_plugin_streams(pytester, monkeypatch):
    """With the real suites plugin: its `measure` fixture's data lands in the history."""
    monkeypatch.setenv("DFLASH2_DEVICE_ARCH", "applegpu_g13s")
    pytester.makepyfile(test_measured="""
        from kernels.recorder import IMPL_METAL_EMULATED, Selection, report

        def test_measured(measure):
            measure.record("deviation", 0.25, "abs", 1.0)
            measure.record("rows_per_s", 1234.5, "rows/s")
            report(Selection("gate_up", "bfloat16", 8, 5120, 17408, "scalar_kmajor", "tuned",
                             impl=IMPL_METAL_EMULATED))

        def test_broken():
            assert False, "nope"
    """)
    db_path = pytester.path / "h.db"
    res = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--farm-db={db_path}")
    assert res.ret == 1, res.outlines
    h = open_history(db_path, write=False)
    with h.engine.connect() as c:
        dev = c.execute(text("SELECT arch, emulated FROM devices")).one()
        meas_rows = dict(c.execute(text("SELECT name, value FROM measurements")).all())
        outcomes = dict(c.execute(text("SELECT test_id, category FROM results")).all())
        run = c.execute(text("SELECT status FROM runs")).scalar()
    assert tuple(dev) == ("applegpu_g13s", True)
    assert meas_rows == {"deviation": 0.25, "rows_per_s": 1234.5}
    assert outcomes == {"test_measured.py::test_measured": "expected_pass",
                        "test_measured.py::test_broken": "unexpected_fail"}
    assert run == "failed"
    assert _impls(h) == [("gate_up", "scalar_kmajor", "metal-emulated")]
    h.close()


@pytest.mark.parametrize("kind", backends())
def test_per_job_calls_refuse_an_unknown_run_and_leave_nothing(kind, tmp_path):
    """add_job finds an unknown run by its foreign key (one INSERT, no look-up first) and
    finish_run by the rows it updated: both one clear error, nothing written, and a device
    cached by an earlier job changes neither."""
    h = open_history(fresh_db(kind, tmp_path))
    for _ in range(2):  # the device new, then cached by the History
        with pytest.raises(FarmError, match="unknown run 'nope'"):
            h.add_job("nope", device(host="x"), "h", "o", "n")
    with h.engine.connect() as c:
        assert c.execute(text("SELECT count(*) FROM devices")).scalar() == 0
        assert c.execute(text("SELECT count(*) FROM jobs")).scalar() == 0
    run = h.start_run("s", "g13s", {})
    a = h.add_job(run, device(), "h", "o", "n")
    with pytest.raises(FarmError, match="unknown run 'nope'"):
        h.add_job("nope", device(), "h", "o", "n")
    b = h.add_job(run, device(), "h", "o", "n")  # from the cache: the same device
    with pytest.raises(FarmError, match="unknown run 'nope'"):
        h.finish_run("nope", "passed")
    h.finish_run(run, "passed")
    with h.engine.connect() as c:
        assert c.execute(text("SELECT count(DISTINCT device_id), count(*) FROM jobs WHERE id "
                              "IN (:a, :b)"), {"a": a, "b": b}).one() == (1, 2)
        assert c.execute(text("SELECT status FROM runs")).scalar() == "passed"
    h.close()
