"""The farm's parts that need no cluster: placement, discovery parsing, shipping, the
embedded plan, and the device job's fault handling (a real pytest subprocess, no Ray)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from farm_procs import device_job_events as _events

from devices.identity import current_device, emulated_identity, parse_selectors
from farm.errors import FarmError
from farm.fleet import embedded, placement, shipping
from farm.fleet.devices import (
    RESOURCE,
    Device,
    device_from_node,
    device_labels,
    matching,
    unmatched,
)

REPO = Path(__file__).resolve().parent.parent
FIX = "tests/farm_fixtures"


def _dev(arch: str, node: str, busy: bool = False, emulated: bool = True) -> Device:
    ident = emulated_identity(arch)
    return Device(node, "h", "127.0.0.1", ident.arch, ident.generation, ident.size, "cpu",
                  emulated, ident.chip, ident.mlx_version, busy)


def test_a_node_advertises_its_device_through_labels_and_one_resource_unit():
    labels = device_labels(emulated_identity("applegpu_g13s"))
    node = {"NodeID": "n1", "Alive": True, "Labels": labels, "NodeManagerHostname": "mac-1",
            "NodeManagerAddress": "10.0.0.1", "Resources": {RESOURCE: 1.0, "CPU": 4.0}}
    d = device_from_node(node, {RESOURCE: 0.0})
    assert (d.arch, d.generation, d.size, d.emulated, d.busy) == ("applegpu_g13s", 13, "s",
                                                                  True, True)
    assert d.chip.startswith("emulated on")
    assert device_from_node({**node, "Alive": False}) is None
    assert device_from_node({**node, "Resources": {"CPU": 4.0}}) is None  # a head


def test_selectors_pick_devices_by_arch_and_generation():
    fleet = [_dev("applegpu_g13s", "a"), _dev("applegpu_g14g", "b"), _dev("applegpu_g14s", "c")]
    sels = parse_selectors("g13s,g14")
    assert [d.node_id for d in matching(fleet, sels)] == ["a", "b", "c"]
    assert [s.text for s in unmatched(fleet, parse_selectors("g13s,g15"))] == ["g15"]


def test_one_device_per_kind_by_default_preferring_idle_and_all_with_every():
    fleet = [_dev("applegpu_g13s", "a", busy=True), _dev("applegpu_g13s", "b"),
             _dev("applegpu_g14g", "c")]
    assert [d.node_id for d in placement.choose_devices(fleet, every=False)] == ["b", "c"]
    assert [d.node_id for d in placement.choose_devices(fleet, every=True)] == ["a", "b", "c"]
    assert placement.replacement(("applegpu_g13s", True), fleet, {"b"}).node_id == "a"
    assert placement.replacement(("applegpu_g14g", True), fleet, {"c"}) is None
    real = _dev("applegpu_g13s", "r", emulated=False)
    assert placement.replacement(("applegpu_g13s", False), [*fleet, real], set()) is real


def test_the_embedded_fleet_emulates_what_nothing_real_matches():
    native = current_device("")
    planned = embedded.plan(parse_selectors("g13s,g14"), native)
    assert [d.arch for d in planned if d.emulated] == ["applegpu_g13s", "applegpu_g14g"]
    assert embedded.plan(parse_selectors("all"), native) == [native]
    if native.backend == "cpu":
        with pytest.raises(FarmError, match="cannot be emulated"):
            embedded.plan(parse_selectors("sm90"), native)


def test_the_embedded_fleet_starts_n_twins_for_selector_star_n():
    from farm.fleet.devices import parse_selectors as fleet_selectors

    native = current_device("")
    planned = embedded.plan(fleet_selectors("g14*2,g13s,g14g"), native)
    assert [d.arch for d in planned if d.emulated] == ["applegpu_g14g"] * 2 + ["applegpu_g13s"]
    assert len(embedded.plan(fleet_selectors("g13s*3,g13s"), native)) == 3
    with pytest.raises(FarmError, match="asks for 2 twins of this host's own device"):
        embedded.plan(fleet_selectors("all*2"), native)


def test_shipping_leaves_out_vcs_virtualenvs_and_databases(tmp_path):
    for rel in ("pkg/a.py", ".git/config", ".venv/bin/python", "venv/x", "h.db",
                "bench/results/r.json", "pkg/__pycache__/a.pyc", "bench/run.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert shipping.shipped_files(tmp_path) == ["bench/run.py", "pkg/a.py"]
    rev = shipping.revision(tmp_path)
    (tmp_path / "pkg/a.py").write_text("changed")
    assert shipping.revision(tmp_path)["tree_hash"] != rev["tree_hash"]
    assert shipping.revision(REPO)["git_sha"]




def test_device_job_records_a_crash_and_runs_the_remaining_tests():
    evs = _events(f"{FIX}/suite_abort.py")
    res = {e["nodeid"].rpartition("::")[2]: e["outcome"] for e in evs if e["type"] == "result"}
    assert res == {"test_before": "passed", "test_aborts": "crashed", "test_after": "passed"}
    assert [e["type"] for e in evs].count("session_start") == 1
    assert evs[-1] == {**evs[-1], "type": "farm_job_end", "status": "completed", "restarts": 1}


def test_device_job_deselects_what_an_earlier_attempt_reported_and_times_out_hangs():
    done = f"{FIX}/suite_hang.py::test_before"
    evs = _events(f"{FIX}/suite_hang.py", test_timeout=1, deselect=[done])
    res = {e["nodeid"].rpartition("::")[2]: e for e in evs if e["type"] == "result"}
    assert sorted(res) == ["test_after", "test_hangs"]
    assert res["test_hangs"]["outcome"] == "timeout"
    assert res["test_hangs"]["expectation"]["category"] == "unexpected_fail"


def test_device_job_timeout_ends_the_job_with_the_running_test_timed_out():
    evs = _events(f"{FIX}/suite_hang.py", test_timeout=60, job_timeout=3)
    res = {e["nodeid"].rpartition("::")[2]: e for e in evs if e["type"] == "result"}
    assert res["test_hangs"]["outcome"] == "timeout" and "job timeout" in res["test_hangs"][
        "message"]
    assert "test_after" not in res
    assert evs[-1]["status"] == "timeout"


_READS_PARENT = ("import os, sys; from farm.runner.device_job import _parent_gone; "
                 "print(_parent_gone(os.getppid(), float(sys.argv[1])), flush=True)")


@pytest.mark.parametrize("killed", [False, True])
def test_a_pytest_sigkill_waits_a_moment_to_see_whether_the_raylet_is_gone(tmp_path, killed):
    """A real process tree: a parent (the raylet's part) starts a child that reads it. Left
    alive, the child answers False once its window ends; SIGKILLed a moment after the child
    started reading (as a node's teardown kills its raylet), the child answers True within its
    window: what keeps a SIGKILL of the teardown from being filed as the test's crash."""
    out = tmp_path / "answer"
    window = "3.0" if killed else "0.3"
    middle = (f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
              f"{_READS_PARENT!r}, {window!r}], stdout=open({str(out)!r}, 'w'))")
    parent = subprocess.Popen(  # the middle process: starts the reader, then waits on it
        [sys.executable, "-c", middle], cwd=Path(__file__).resolve().parents[1],
        start_new_session=True)
    try:
        if killed:
            time.sleep(1.0)  # the reader is inside its window by now
            os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=20)
        deadline = time.monotonic() + 20
        while not out.read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.read_text().strip() == str(killed)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)


def test_run_refuses_a_nonpositive_test_timeout_before_touching_any_cluster():
    out = subprocess.run([sys.executable, "-c", "from farm.cli.app import script; script()", "run",
                          "--suite", f"{FIX}/suite_basic.py", "--test-timeout", "0"],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith("error:")
    assert "test-timeout" in out.stderr


def test_each_run_ships_its_own_ray_package_of_one_tree(tmp_path):
    """Two runs of one unchanged tree stage copies that differ only by the run mark, so Ray
    (which names a working_dir package by content) gives each its own package: one run's end
    cannot delete the files another run is using. The recorded tree hash is the tree's."""
    from ray._private.runtime_env.packaging import get_uri_for_directory

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    uris, files = [], []
    for _ in range(2):
        with shipping.staged_tree(tmp_path) as staged:
            uris.append(get_uri_for_directory(str(staged), include_gitignore=True,
                                              excludes=shipping.EXCLUDES))
            files.append(sorted(str(p.relative_to(staged)) for p in staged.rglob("*")
                                if p.is_file()))
    assert uris[0] != uris[1]
    assert files[0] == files[1] == sorted(["pkg/a.py", shipping.RUN_MARK])
    assert shipping.revision(tmp_path)["tree_hash"] == shipping.revision(tmp_path)["tree_hash"]


def test_each_node_gets_its_own_runtime_env_dir_and_a_users_start_hook_still_runs(
        tmp_path, monkeypatch):
    from ray._private.parameter import RayParams

    from farm.fleet import node_dirs

    (tmp_path / "user_hook.py").write_text(
        "def hook(params, head):\n    params.labels = {'user-hook': str(head)}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    env = node_dirs.start_env({"RAY_START_HOOK": "user_hook.hook", "X": "1"})
    assert env["RAY_START_HOOK"] == node_dirs.HOOK and env["X"] == "1"
    assert env[node_dirs.ENV_NEXT] == "user_hook.hook"
    assert node_dirs.ENV_NEXT not in node_dirs.start_env({})
    monkeypatch.setenv(node_dirs.ENV_NEXT, env[node_dirs.ENV_NEXT])
    a, b = RayParams(node_manager_port=20001), RayParams(node_manager_port=20301)
    node_dirs.own_runtime_env_dir(a, True)
    node_dirs.own_runtime_env_dir(b, False)
    assert a.runtime_env_dir_name == "runtime_resources/node20001"
    assert b.runtime_env_dir_name == "runtime_resources/node20301"
    assert a.labels == {"user-hook": "True"} and b.labels == {"user-hook": "False"}
