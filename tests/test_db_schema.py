"""The history's schema: created from empty by the shipped migrations, matching the models,
refusing a newer schema without writing, and every bad location reported as one line."""

from __future__ import annotations

import os
import time

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from db_fixtures import backends, fresh_db, record, result, seed_old_job
from sqlalchemy import create_engine, event, inspect, text

from db import open_history
from db.engine import make_engine
from db.errors import FarmError
from db.location import default_path, resolve
from db.migrate import HEAD, known_revisions, upgrade
from db.models import Base

TABLES = {"runs", "devices", "jobs", "results", "baselines", "alembic_version"}
VIEWS = {"measurements", "selections", "fingerprints"}  # of the results' JSON (0006)


@pytest.mark.parametrize("kind", backends())
def test_migrations_from_empty_create_every_table_at_head(kind, tmp_path):
    target = fresh_db(kind, tmp_path)
    h = open_history(target)
    insp = inspect(h.engine)
    assert TABLES <= set(insp.get_table_names())
    assert VIEWS <= set(insp.get_view_names()) and not VIEWS & set(insp.get_table_names())
    assert {ix["name"] for ix in insp.get_indexes("results")} == {"ix_results_job_id_nodeid"}
    with h.engine.connect() as c:
        assert MigrationContext.configure(c).get_current_revision() == known_revisions()[0]
        # The shipped migrations build exactly what the models describe.
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
    h.close()
    open_history(target).close()  # a second open at head is a no-op


@pytest.mark.parametrize("kind", backends())
def test_a_first_open_runs_every_script_in_one_transaction(kind, tmp_path):
    """Concurrent first opens migrate once only if the heads are read in the same transaction,
    under the writer lock, as every script runs: Alembic alone gives SQLite one transaction per
    script, and a second opener then re-ran 0004 ("duplicate column name: node", CI at stop 22)."""
    loc = resolve(fresh_db(kind, tmp_path))
    if loc.is_sqlite:
        loc.path.touch()
    read, write = make_engine(loc, "read"), make_engine(loc, "write")
    seen: list[str] = []
    for name in ("begin", "commit", "rollback"):
        event.listen(write, name, lambda _c, name=name: seen.append(name))
    upgrade(read, write, loc.describe())
    assert seen == ["begin", "commit"]
    with read.connect() as c:
        assert MigrationContext.configure(c).get_current_revision() == HEAD
    read.dispose()
    write.dispose()


@pytest.mark.parametrize("kind", backends())
def test_newer_schema_is_refused_and_not_written(kind, tmp_path):
    target = fresh_db(kind, tmp_path)
    h = open_history(target)
    record(h, [({"arch": "cpu"}, "h", [result()])])
    with h.engine.begin() as c:
        c.execute(text("UPDATE alembic_version SET version_num = 'f00d_from_the_future'"))
        c.execute(text("UPDATE runs SET status = 'running', heartbeat = 0"))
    h.close()
    before = os.path.getmtime(target) if kind == "sqlite" else None
    for write in (True, False):
        with pytest.raises(FarmError) as e:
            open_history(target, write=write)
        msg = str(e.value)
        assert "f00d_from_the_future" in msg and "newer" in msg and "\n" not in msg
        assert e.value.exit_code == 2
    # Not written: the stale run was not aborted, the file not touched.
    eng = create_engine(resolve(target).url)
    with eng.connect() as c:
        assert c.execute(text("SELECT status FROM runs")).scalar() == "running"
    eng.dispose()
    if kind == "sqlite":
        assert os.path.getmtime(target) == before


def test_fast_path_head_is_the_scripts_head():
    assert known_revisions()[0] == HEAD


def _history_at_0001(target: str) -> None:
    """A history as the first release left it: schema 0001, one run with a selection."""
    from alembic import command

    from db.engine import make_engine
    from db.migrate import alembic_config

    eng = make_engine(resolve(target), "write")
    with eng.connect() as conn:
        command.upgrade(alembic_config(conn), "0001")
        conn.commit()
    with eng.begin() as c:
        seed_old_job(c)
        c.execute(text("INSERT INTO results (job_id, nodeid, test_id, params, outcome, "
                       "category) SELECT id, 't.py::a', 't.py::a', '', 'passed', "
                       "'expected_pass' FROM jobs"))
        c.execute(text('INSERT INTO selections (result_id, op, dtype, "M", "K", "N", variant, '
                       "reason) SELECT id, 'gate_up', 'bfloat16', 8, 5120, 17408, "
                       "'scalar_kmajor', 'tuned' FROM results"))
        c.execute(text("INSERT INTO baselines (variant_key, run_id, set_at) "
                       "VALUES ('v', 'r-old', 1001)"))
    eng.dispose()


@pytest.mark.parametrize("kind", backends())
def test_a_0001_history_upgrades_to_head_and_keeps_its_rows(kind, tmp_path):
    target = fresh_db(kind, tmp_path)
    _history_at_0001(target)
    h = open_history(target)  # migrates
    with h.engine.connect() as c:
        assert MigrationContext.configure(c).get_current_revision() == HEAD
        assert compare_metadata(MigrationContext.configure(c), Base.metadata) == []
        old = c.execute(text("SELECT s.op, s.variant, s.reason, s.impl, r.nodeid FROM "
                             "selections s JOIN results r ON r.id = s.result_id")).all()
        assert c.execute(text("SELECT status FROM runs WHERE id = 'r-old'")).scalar() == "passed"
        # 0003: the baseline became per (suite, variant), taking its run's suite.
        assert [tuple(r) for r in c.execute(text(
            "SELECT suite, variant_key, run_id FROM baselines"))] == [("m8-parity", "v", "r-old")]
        assert c.execute(text("SELECT role FROM selections")).scalar() is None
    assert [tuple(r) for r in old] == [("gate_up", "scalar_kmajor", "tuned", None, "t.py::a")]
    assert "selections" in inspect(h.engine).get_view_names()  # 0006: a view of the JSON
    # The upgraded history takes new rows with their implementation, beside the old ones.
    record(h, [({"arch": "cpu"}, "h", [result(selections=[
        {"op": "gate_up", "dtype": "bfloat16", "M": 8, "K": 5120, "N": 17408,
         "variant": "scalar_kmajor", "reason": "tuned", "impl": "metal"}])])])
    with h.engine.connect() as c:
        assert list(c.execute(text("SELECT impl FROM selections ORDER BY result_id, pos")).scalars()) == [
            None, "metal"]
    h.close()


def test_0002_downgrades_to_0001_without_losing_selections(tmp_path):
    from alembic import command

    from db.engine import make_engine
    from db.migrate import alembic_config

    target = str(tmp_path / "h.db")
    _history_at_0001(target)
    open_history(target).close()
    eng = make_engine(resolve(target), "write")
    with eng.connect() as conn:
        command.downgrade(alembic_config(conn), "0001")
        conn.commit()
    with eng.connect() as c:
        cols = {col["name"] for col in inspect(c).get_columns("selections")}
        assert "impl" not in cols
        assert c.execute(text("SELECT count(*) FROM selections")).scalar() == 1
    eng.dispose()
    open_history(target).close()  # and up again
    with eng.connect() as c:
        assert c.execute(text("SELECT suite, run_id FROM baselines")).all() == [
            ("m8-parity", "r-old")]
        conn = c
        command.downgrade(alembic_config(conn), "0002")
        conn.commit()
    with eng.connect() as c:
        assert "suite" not in {col["name"] for col in inspect(c).get_columns("baselines")}
        assert c.execute(text("SELECT variant_key, run_id FROM baselines")).all() == [
            ("v", "r-old")]
    eng.dispose()
    open_history(target).close()


def test_sqlite_is_in_wal_mode_with_a_busy_timeout(tmp_path):
    h = open_history(tmp_path / "h.db")
    with h.engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 10_000
    h.close()


def test_a_first_open_waits_for_a_writer_to_switch_the_file_to_wal(tmp_path):
    """While another connection holds a new file's write lock, SQLite refuses the switch to
    WAL at once ("database is locked", no busy wait: it could deadlock), which failed one of
    ~150 six-process first opens of a new history. The switch is retried: the open waits for
    the writer, then finds WAL."""
    import sqlite3
    import threading

    path = tmp_path / "h.db"
    sqlite3.connect(path).close()
    held, waited = threading.Event(), []

    def writer() -> None:
        con = sqlite3.connect(path, isolation_level=None)
        con.execute("BEGIN IMMEDIATE")
        held.set()
        time.sleep(0.4)
        con.execute("COMMIT")
        con.close()

    t = threading.Thread(target=writer)
    t.start()
    held.wait()
    start = time.monotonic()
    engine = make_engine(resolve(path), "write")
    with engine.connect() as c:
        waited.append(time.monotonic() - start)
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    engine.dispose()
    t.join()
    assert waited[0] > 0.1  # it waited for the writer instead of failing at once


@pytest.mark.parametrize("kind", backends())
def test_stale_running_run_is_aborted_on_open_for_writing_only(kind, tmp_path):
    target = fresh_db(kind, tmp_path)
    h = open_history(target)
    stale = h.start_run("s", "g13s", {}, started=time.time() - 7200)
    job = h.add_job(stale, {"arch": "cpu"}, "h", "Linux", None)  # a local run: no lease
    live = h.start_run("s", "g13s", {})
    with h.engine.begin() as c:
        c.execute(text("UPDATE runs SET heartbeat = :t WHERE id = :r"),
                  {"t": time.time() - 3600, "r": stale})
    h.close()
    ro = open_history(target, write=False)
    with ro.engine.connect() as c:
        assert c.execute(text("SELECT status FROM runs WHERE id = :r"),
                         {"r": stale}).scalar() == "running"
    ro.close()
    h = open_history(target, stale_after=600)
    with h.engine.connect() as c:
        status = dict(c.execute(text("SELECT id, status FROM runs")).all())
        job_status = c.execute(text("SELECT status FROM jobs WHERE id = :j"),
                               {"j": job}).scalar()
    assert status == {stale: "aborted", live: "running"}
    assert job_status == "lost"
    h.close()


def test_random_bytes_file_is_one_clear_line(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(os.urandom(4096))
    for write in (True, False):
        with pytest.raises(FarmError) as e:
            open_history(junk, write=write)
        assert "not a SQLite database" in str(e.value) and "\n" not in str(e.value)
        assert e.value.exit_code == 2
    assert junk.stat().st_size == 4096


def test_unwritable_and_missing_paths_are_one_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(FarmError) as e:
        open_history(blocker / "sub" / "h.db")
    assert "cannot create the history" in str(e.value) and e.value.exit_code == 2
    with pytest.raises(FarmError) as e:
        open_history(tmp_path / "absent.db", write=False)
    assert "no history at" in str(e.value)
    assert not (tmp_path / "absent.db").exists()
    with pytest.raises(FarmError) as e:
        open_history(tmp_path)
    assert "is a directory" in str(e.value)


def test_unreachable_server_is_an_infrastructure_error():
    with pytest.raises(FarmError) as e:
        open_history("postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert e.value.exit_code == 3 and "\n" not in str(e.value)


def test_location_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("FARM_DB", raising=False)
    if os.uname().sysname != "Darwin":
        assert default_path() == tmp_path / "xdg" / "dflash2-farm" / "history.db"
    assert resolve(None).path == default_path()
    monkeypatch.setenv("FARM_DB", str(tmp_path / "env.db"))
    assert resolve(None).path == tmp_path / "env.db"
    assert resolve(tmp_path / "arg.db").path == tmp_path / "arg.db"
    assert resolve(f"sqlite:///{tmp_path}/u.db").path == tmp_path / "u.db"
    assert resolve("postgresql+psycopg://u@h/d").path is None
    with pytest.raises(FarmError):
        resolve("sqlite://")
