"""Sharding across twins, the parts that need no cluster: the work-stealing policy, the
``SELECTOR*N`` syntax, which nodes are twins, a twin's device job pulling from a queue (a real
pytest subprocess, the queue in this process), and each result's node in the history."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from db_fixtures import result, session_finish, session_start, write_jsonl
from test_history_cli import farm

from devices.errors import Dflash2Error
from devices.identity import emulated_identity
from farm.fleet import placement, shipping
from farm.fleet.devices import Device, check_twins, parse_selectors, twin_cap
from farm.runner.sharding import WorkSteal

REPO = Path(__file__).resolve().parent.parent
FIX = "tests/farm_fixtures"


# -- the policy ----------------------------------------------------------------------------------

def _drain(ws: WorkSteal, shard: str, n: int) -> list[str]:
    return [ws.next(shard) for _ in range(n)]


def test_each_twin_starts_with_a_contiguous_share():
    ws = WorkSteal(["a", "b", "c"])
    ws.register("b", [f"t{i}" for i in range(7)])
    ws.register("a", [f"t{i}" for i in range(7)])  # a second registration schedules nothing
    assert {s: list(q) for s, q in ws.pending.items()} == {
        "a": ["t0", "t1"], "b": ["t2", "t3"], "c": ["t4", "t5", "t6"]}


def test_an_idle_twin_steals_the_unstarted_half_of_the_busiest_share():
    ws = WorkSteal(["a", "b", "c"])
    ws.register("a", [f"t{i}" for i in range(12)])  # a: t0-t3, b: t4-t7, c: t8-t11
    assert _drain(ws, "c", 4) == ["t8", "t9", "t10", "t11"]
    assert ws.next("a") == "t0"  # a now holds t1-t3, b t4-t7: b is the busiest
    assert ws.next("c") == "t6"  # the tail half of b's (t6, t7), in order
    assert list(ws.pending["b"]) == ["t4", "t5"] and list(ws.pending["c"]) == ["t7"]
    assert ws.steals == 1
    ws2 = WorkSteal(["a", "b"])
    ws2.register("a", ["x", "y"])
    assert ws2.next("a") == "x" and ws2.next("a") == "y"  # its own share is used up ...
    assert ws2.next("b") is None  # ... and a twin with nothing left to steal gets None


def test_a_twin_that_leaves_gives_back_what_it_did_not_report():
    ws = WorkSteal(["a", "b"])
    ws.register("a", [f"t{i}" for i in range(6)])  # a: t0-t2, b: t3-t5
    assert _drain(ws, "a", 2) == ["t0", "t1"]  # t0 reported, t1 running when a's node died
    assert ws.remove_node("a", done=["t0"]) == 2  # t1 and t2 have no owner now
    assert ws.next("a") is None  # a twin that left gets nothing more
    assert _drain(ws, "b", 6) == ["t3", "t4", "t5", "t1", "t2", None]
    assert ws.remove_node("b", done=[f"t{i}" for i in range(6)]) == 0
    late = WorkSteal(["a"])  # a twin that joins once the others left takes what they held
    late.register("a", ["p", "q"])
    late.remove_node("a", done=[])
    assert _drain(late, "z", 3) == ["p", "q", None]


# -- selectors and twins -------------------------------------------------------------------------

def test_a_selector_may_cap_the_twins_of_each_variant_it_matches():
    sels = parse_selectors("g14*2, g13s")
    assert [(s.text, getattr(s, "twins", None)) for s in sels] == [("g14*2", 2), ("g13s", None)]
    g14 = _dev("applegpu_g14g", "n")
    assert twin_cap(g14, sels) == 2 and twin_cap(_dev("applegpu_g13s", "m"), sels) is None
    assert twin_cap(g14, parse_selectors("g14*2,g14g*3")) == 3
    for bad in ("g14*0", "g14*", "*2", "g14*two"):
        with pytest.raises(Dflash2Error, match="SELECTOR\\*N"):
            parse_selectors(bad)
    check_twins(parse_selectors("g14,g13s"), every=True)
    with pytest.raises(Dflash2Error, match="--every"):
        check_twins(sels, every=True)


def _dev(arch: str, node: str, busy: bool = False, mlx: str | None = None) -> Device:
    ident = emulated_identity(arch)
    return Device(node, "h", "127.0.0.1", ident.arch, ident.generation, ident.size, "cpu", True,
                  ident.chip, mlx or ident.mlx_version, busy)


def test_twins_are_the_idle_nodes_of_exactly_one_variant():
    fleet = [_dev("applegpu_g14g", "a"), _dev("applegpu_g14g", "b"),
             _dev("applegpu_g14g", "c", busy=True), _dev("applegpu_g14g", "d", mlx="0.1.0"),
             _dev("applegpu_g13s", "e")]
    groups = placement.choose_twins(fleet, every=False)
    assert [[d.node_id for d in g] for g in groups] == [["a", "b"], ["e"]]
    assert [[d.node_id for d in g] for g in placement.choose_twins(
        fleet, every=False, cap=lambda d: 1)] == [["a"], ["e"]]  # *1: one node, as before
    assert [[d.node_id for d in g] for g in placement.choose_twins(fleet, every=True)] == [
        ["a"], ["b"], ["c"], ["d"], ["e"]]


# -- a twin's device job -------------------------------------------------------------------------

class LocalQueue:
    """The queue actor's client, over a policy in this process (the device job's side only)."""

    def __init__(self, ws: WorkSteal, shard: str):
        self.ws, self.shard = ws, shard

    def register(self, collected: list[str]) -> None:
        self.ws.register(self.shard, collected)

    def next(self) -> str | None:
        return self.ws.next(self.shard)


def _twin_events(suite: str, queue: LocalQueue, **over) -> list[dict]:
    from farm.runner.device_job import run_job

    spec = {"suite": suite, "pytest_args": [suite], "test_timeout": 30, "job_timeout": 120,
            "device": {"arch": "applegpu_g14g", "emulated": True}, "deselect": [],
            "shard": {"queue": "-", "job": "0", "name": queue.shard}, **over}
    with shipping.as_run_worker(REPO):
        return [ev for batch in run_job(spec, queue=queue) for ev in batch]


def _outcomes(evs: list[dict]) -> dict[str, str]:
    return {e["nodeid"].rpartition("::")[2]: e["outcome"] for e in evs if e["type"] == "result"}


def test_a_twin_runs_what_it_pulls_and_steals_a_share_whose_twin_never_came():
    ws = WorkSteal(["me", "absent"])
    evs = _twin_events(f"{FIX}/suite_basic.py", LocalQueue(ws, "me"))
    assert _outcomes(evs) == {"test_one": "passed", "test_two": "passed",
                              "test_three_reports_arch": "passed"}
    assert [e["type"] for e in evs].count("result") == 3
    (collected,) = [e for e in evs if e["type"] == "farm_collected"]
    assert collected["total"] == 3
    assert ws.state()["handed"] == {"me": 3, "absent": 0} and ws.steals >= 1
    assert evs[-1]["status"] == "completed"


def test_a_twin_whose_interpreter_dies_runs_the_test_it_held_next():
    """The pytest plugin holds one test beyond the running one (as xdist does): when the
    running one kills the interpreter, the held one is run by the next pytest, not lost."""
    ws = WorkSteal(["me"])
    evs = _twin_events(f"{FIX}/suite_abort.py", LocalQueue(ws, "me"))
    assert _outcomes(evs) == {"test_before": "passed", "test_aborts": "crashed",
                              "test_after": "passed"}
    assert ws.state()["handed"] == {"me": 3}  # test_after was pulled once, before the crash
    assert evs[-1]["status"] == "completed" and evs[-1]["restarts"] == 1


def test_a_twin_keeps_module_fixtures_up_between_the_tests_it_pulls(tmp_path):
    """Each pulled test's teardown knows the next one (the test held ahead), so a module's
    fixture is set up once for the tests of that module a twin runs in a row."""
    setups = tmp_path / "setups"
    ws = WorkSteal(["me"])
    evs = _twin_events(f"{FIX}/suite_module_fixture.py", LocalQueue(ws, "me"),
                       env={"FARM_FIXTURE_SETUPS": str(setups)})
    assert list(_outcomes(evs).values()) == ["passed"] * 4
    assert setups.read_text().splitlines() == ["setup"]


def test_a_pulled_test_the_twin_did_not_collect_is_reported_not_lost():
    ws = WorkSteal(["other", "me"])
    ws.register("other", [f"{FIX}/suite_basic.py::test_one", f"{FIX}/suite_basic.py::gone"])
    evs = _twin_events(f"{FIX}/suite_basic.py", LocalQueue(ws, "me"))
    out = {e["nodeid"]: e for e in evs if e["type"] == "result"}
    assert set(out) == {f"{FIX}/suite_basic.py::test_one", f"{FIX}/suite_basic.py::gone"}
    assert out[f"{FIX}/suite_basic.py::gone"]["outcome"] == "error"
    assert "not collected on this node" in out[f"{FIX}/suite_basic.py::gone"]["message"]


# -- each result's node in the history -----------------------------------------------------------

def test_each_result_records_the_node_and_host_that_ran_it(tmp_path):
    from db import open_history

    db = str(tmp_path / "h.db")
    h = open_history(db)
    run = h.start_run("s", "g14", {"git_sha": None, "dirty": None, "tree_hash": "t"})
    job = h.add_job(run, {"arch": "applegpu_g14g"}, "h1", "Linux", "node-a")
    h.ingest_events(job, [
        {**result("t.py::a"), "farm_node": "node-a", "farm_host": "h1", "farm_attempt": 1},
        {**result("t.py::b"), "farm_node": "node-b", "farm_host": "h2", "farm_attempt": 1},
        result("t.py::c")])
    h.close()
    with sqlite3.connect(db) as c:
        rows = c.execute("select nodeid, node, host from results order by nodeid").fetchall()
    assert rows == [("t.py::a", "node-a", "h1"), ("t.py::b", "node-b", "h2"),
                    ("t.py::c", None, None)]
    bad = write_jsonl(tmp_path / "r.jsonl", [session_start(), {**result(), "farm_node": 7},
                                             session_finish()])
    out = farm("ingest", str(bad), db=db)
    assert out.exit_code == 2 and "farm_node must be a string" in out.error


def test_0004_downgrades_without_losing_results(tmp_path):
    from alembic import command
    from sqlalchemy import inspect, text

    from db import open_history
    from db.engine import make_engine
    from db.location import resolve
    from db.migrate import alembic_config

    target = str(tmp_path / "h.db")
    h = open_history(target)
    run = h.start_run("s", "g14", {"git_sha": None, "dirty": None, "tree_hash": "t"})
    job = h.add_job(run, {"arch": "applegpu_g14g"}, "h1", "Linux", "node-a")
    h.ingest_events(job, [{**result(), "farm_node": "node-a", "farm_host": "h1"}])
    h.close()
    eng = make_engine(resolve(target), "write")
    with eng.connect() as conn:
        command.downgrade(alembic_config(conn), "0003")
        conn.commit()
    with eng.connect() as c:
        assert not {"node", "host"} & {col["name"] for col in inspect(c).get_columns("results")}
        assert c.execute(text("select count(*) from results")).scalar() == 1
    eng.dispose()
    open_history(target).close()  # and up again: the columns are back, empty
    with sqlite3.connect(target) as c:
        assert c.execute("select node, host from results").fetchall() == [(None, None)]
