"""A device job's pytest ends without the interpreter's teardown (``FARM_QUICK_EXIT``), and
keeps its exit status and every line of its results stream: the device job waits for that
process to exit before it reports the job's end. A real pytest subprocess with the farm's
plugins, as a device job starts it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''
import atexit, os

def _mark():
    with open(os.environ["ATEXIT_MARK"], "w") as f:
        f.write("teardown ran")

atexit.register(_mark)

def test_ok():
    pass

def test_fails():
    assert 1 == 2
'''


@pytest.mark.parametrize("quick", ["1", None])
def test_quick_exit_skips_teardown_and_keeps_status_and_results(tmp_path, quick):
    (tmp_path / "test_suite.py").write_text(SUITE)
    mark, results = tmp_path / "atexit.txt", tmp_path / "results.jsonl"
    env = {k: v for k, v in os.environ.items() if k != "FARM_QUICK_EXIT"}
    # as a device job runs it (farm.fleet.device_env): plugins named, none autoloaded
    env.update(ATEXIT_MARK=str(mark), PYTHONPATH=str(ROOT), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    if quick:
        env["FARM_QUICK_EXIT"] = quick
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "suites.plugin", "-p",
         "farm.runner.pytest_progress", "-p", "no:cacheprovider", "-o", "addopts=", "-q",
         "--results-jsonl", str(results), str(tmp_path / "test_suite.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # one test failed
    assert "1 failed, 1 passed" in proc.stdout
    events = [json.loads(line) for line in results.read_text().splitlines()]
    assert [e["outcome"] for e in events if e.get("type") == "result"] == ["passed", "failed"]
    assert events[-1]["type"] == "session_finish"
    assert mark.exists() is (quick is None)  # the interpreter's teardown ran only without it
