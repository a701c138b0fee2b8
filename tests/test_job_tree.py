"""A device runs a checked private copy of its run's tree (`shipping.job_tree`), never Ray's
unpacked working dir as it happens to be: Ray may delete and unpack that again under a live
worker (a CI run had a job's pytest miss its suite file that way)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from farm_procs import device_job_events

from farm.errors import FarmError
from farm.fleet import shipping

REPO = Path(__file__).resolve().parent.parent


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for rel, text in {"pkg/a.py": "x = 1\n", "pkg/sub/b.txt": "b\n", "top.txt": "t\n"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _files(d: Path) -> dict[str, str]:
    return {p.relative_to(d).as_posix(): p.read_text() for p in d.rglob("*") if p.is_file()}


def test_the_copy_is_the_runs_tree_file_for_file(tmp_path, monkeypatch):
    with shipping.staged_tree(_tree(tmp_path)) as staged:
        monkeypatch.chdir(staged)
        run = shipping.read_mark(staged)["run"]
        copy = shipping.job_tree(tmp_path / "copy", run, wait_s=0)
        assert _files(copy) == _files(staged)
        assert shipping.read_mark(copy)["files"] == ["pkg/a.py", "pkg/sub/b.txt", "top.txt"]


def test_another_runs_tree_is_refused_naming_both(tmp_path, monkeypatch):
    with shipping.staged_tree(_tree(tmp_path)) as staged:
        monkeypatch.chdir(staged)
        with pytest.raises(FarmError) as e:
            shipping.job_tree(tmp_path / "copy", "0" * 32, wait_s=0.3)
    msg = str(e.value)
    assert "000000000000's tree is not whole on this node after 0.3s" in msg
    assert "mark of run" in msg and str(staged) in msg


def test_a_tree_being_unpacked_is_waited_for(tmp_path, monkeypatch):
    """Ray unpacks file by file: a copy taken before the last file is there is taken again."""
    with shipping.staged_tree(_tree(tmp_path)) as staged:
        monkeypatch.chdir(staged)
        run = shipping.read_mark(staged)["run"]
        late = staged / "pkg/sub/b.txt"
        text = late.read_text()
        late.unlink()
        with pytest.raises(FarmError, match=r"pkg/sub/b\.txt"):
            shipping.job_tree(tmp_path / "copy", run, wait_s=0.3)
        threading.Timer(0.6, late.write_text, (text,)).start()
        t0 = time.monotonic()
        copy = shipping.job_tree(tmp_path / "copy", run, wait_s=20)
        assert time.monotonic() - t0 >= 0.5  # it waited for the file, then copied it
        assert (copy / "pkg/sub/b.txt").read_text() == text


def test_a_file_that_differs_from_the_shipped_one_is_refused(tmp_path, monkeypatch):
    with shipping.staged_tree(_tree(tmp_path)) as staged:
        monkeypatch.chdir(staged)
        (staged / "top.txt").write_text("half-written\n")
        with pytest.raises(FarmError, match="its files differ from the ones the run shipped"):
            shipping.job_tree(tmp_path / "copy", shipping.read_mark(staged)["run"], wait_s=0)


def test_a_worker_whose_cwd_was_deleted_copies_the_tree_its_code_came_from(tmp_path):
    """Ray's re-unpack leaves its worker without a cwd; the worker imported the farm from the
    unpacked tree, which is where the run's files are again."""
    with shipping.staged_tree(REPO) as staged:
        gone = tmp_path / "gone"
        gone.mkdir()
        code = ("import os, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]);"
                "from pathlib import Path; from farm.fleet.shipping import job_tree;"
                "print(job_tree(Path(sys.argv[2]), wait_s=0))")
        env = {**os.environ, "PYTHONPATH": str(staged),
               shipping.ENV_TREE: shipping.read_mark(staged)["run"]}
        out = subprocess.run([sys.executable, "-c", code, str(gone), str(tmp_path / "copy")],
                             env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             check=False)
        assert out.returncode == 0, out.stderr[-2000:]
        assert (tmp_path / "copy/tests/farm_fixtures/suite_shipped.py").is_file()
        assert _files(tmp_path / "copy") == _files(staged)


def test_a_job_without_its_runs_tree_ends_in_error_and_runs_nothing(monkeypatch):
    with shipping.as_run_worker(REPO):
        monkeypatch.setenv(shipping.ENV_TREE, "f" * 32)
        monkeypatch.setattr(shipping, "COPY_WAIT_S", 0.2)
        from farm.runner import device_job

        evs = [ev for batch in device_job.run_job(
            {"suite": "x", "pytest_args": ["tests/farm_fixtures/suite_shipped.py"],
             "test_timeout": 30, "job_timeout": 60, "device": {"arch": "applegpu_g13s",
                                                               "emulated": True},
             "deselect": []}) for ev in batch]
    assert [e["type"] for e in evs] == ["farm_job_start", "farm_job_end"]
    assert evs[-1]["status"] == "error"
    assert "ffffffffffff's tree is not whole on this node" in evs[-1]["error"]


def test_a_job_runs_its_copy_not_the_working_dir():
    evs = device_job_events("tests/farm_fixtures/suite_shipped.py")
    start = evs[0]
    assert start["type"] == "farm_job_start"
    assert Path(start["workdir"]).name == "tree" and "farm-job-" in start["workdir"]
    assert [e["outcome"] for e in evs if e.get("type") == "result"] == ["passed"]
