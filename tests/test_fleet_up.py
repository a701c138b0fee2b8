"""`farm fleet up / status / down` and `farm run` attaching to the warm fleet, through the CLI.

Real Ray on loopback, no mocks. Every test keeps its fleet's state in its own directory
(``FARM_STATE_DIR``), so no other `farm run` on this host attaches to it, and kills whatever
of its fleet is left at the end. What a fleet is made of is read from `farm fleet status --json`
(pids) and from the processes themselves (process groups, the fleet id in their environment).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from farm_procs import psutil
from warm_cli import _fleet_env, fleet_cli

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
SUITE = "tests/farm_fixtures/suite_basic.py"


@pytest.fixture
def cli(tmp_path):
    yield from fleet_cli(tmp_path)


def _alive(pids) -> list[str]:
    ps, out = psutil(), []
    for pid in pids:
        with contextlib.suppress(ps.Error):
            p = ps.Process(pid)
            if p.status() != ps.STATUS_ZOMBIE:
                out.append(f"{pid} {' '.join(p.cmdline())[:80]}")
    return out


def _groups_alive(pgids) -> list[int]:
    ps, out = psutil(), []
    for p in ps.process_iter():
        with contextlib.suppress(ps.Error, OSError):
            if os.getpgid(p.pid) in pgids and p.status() != ps.STATUS_ZOMBIE:
                out.append(p.pid)
    return out


def _marked(fleet_id: str) -> list[int]:
    ps = psutil()
    return [p.pid for p in ps.process_iter() if _fleet_env(p) == fleet_id
            and p.status() != ps.STATUS_ZOMBIE]


def _off_loopback(pids) -> list[str]:
    """Sockets of these processes on any address but loopback (listening on 0.0.0.0 too)."""
    ps, out = psutil(), []
    for pid in pids:
        with contextlib.suppress(ps.Error):
            p = ps.Process(pid)
            for c in p.net_connections(kind="inet"):
                ends = [c.laddr.ip] + ([c.raddr.ip] if c.raddr else [])
                if any(ip not in LOOPBACK for ip in ends):
                    out.append(f"{p.name()} {c.status} {c.laddr} {c.raddr or ''}")
    return out


def _listening(pids) -> int:
    ps, n = psutil(), 0
    for pid in pids:
        with contextlib.suppress(ps.Error):
            n += sum(c.status == ps.CONN_LISTEN for c in
                     ps.Process(pid).net_connections(kind="inet"))
    return n


def test_up_then_run_attaches_and_down_leaves_no_process_of_the_fleet(cli, tmp_path):
    info = cli.up("--devices", "g13s,g14")
    assert [d["arch"] for d in info["devices"]] == ["applegpu_g13s", "applegpu_g14g"]
    state = cli.state
    assert state.stat().st_mode & 0o777 == 0o600  # it holds the token
    _, st = cli.status()
    assert st["state"] == "up" and st["address"] == info["address"]
    assert st["address"].startswith("127.0.0.1:")
    pids = st["pids"]
    assert info["keeper_pid"] in pids and len(pids) >= 7, st  # GCS, raylets, agents
    pgids = {os.getpgid(p) for p in pids}
    assert _listening(pids) >= 6  # the GCS, each raylet's servers, the agents
    assert _off_loopback(pids) == []  # the fleet listens and talks on 127.0.0.1 only

    # A second `up` with the same devices is that fleet; another set is refused in one line.
    again = cli("fleet", "up", "--devices", "g13s,g14")
    assert again.returncode == 0 and "already up" in again.stdout, again.stderr
    other = cli("fleet", "up", "--devices", "g15s")
    assert other.returncode == 2, other.stderr
    assert other.stderr.strip().splitlines()[-1].startswith("error: a warm fleet is already up")
    assert "Traceback" not in other.stderr

    db = tmp_path / "h.db"
    out = cli("run", "--suite", SUITE, "--devices", "g13s,g14", "--db", str(db),
               "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    first = out.stderr.splitlines()[0]
    assert first.startswith(f"attached to the warm fleet at {info['address']}"), out.stderr
    assert "embedded fleet" not in out.stderr
    run = json.loads(out.stdout)
    assert sorted(j["device"]["arch"] for j in run["jobs"]) == ["applegpu_g13s", "applegpu_g14g"]
    assert all(j["status"] == "passed" and j["node_id"] in info["nodes"] for j in run["jobs"])
    with sqlite3.connect(db) as c:
        assert c.execute("select status from runs").fetchone()[0] == "passed"
        assert c.execute("select count(*) from results").fetchone()[0] == 6
    _, st = cli.status()
    assert st["state"] == "up" and st["keeper_pid"] == info["keeper_pid"]  # still warm
    pids = sorted(set(pids) | set(st["pids"]))
    pgids |= {os.getpgid(p) for p in st["pids"] if _alive([p])}

    down = cli("fleet", "down")
    assert down.returncode == 0, down.stderr
    assert down.stdout.startswith(f"warm fleet at {info['address']} down: "), down.stdout
    assert _alive(pids) == []
    assert _groups_alive(pgids) == []
    assert _marked(info["fleet_id"]) == []
    assert not state.exists()
    assert not Path(info["temp_dir"]).exists()
    _, st = cli.status()
    assert st["state"] == "down"
    again = cli("fleet", "down")
    assert again.returncode == 0 and again.stdout.startswith("no warm fleet is up")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_stale_state_file_is_detected_and_cleaned_in_one_line(cli):
    # A keeper killed outright: its fleet dies with it (Ray's kernel fate sharing), what is
    # still going down is killed, the state goes, one line says so.
    info = cli.up("--devices", "g13s")
    _, st = cli.status()
    pids = st["pids"]
    os.kill(info["keeper_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _alive([info["keeper_pid"]]) and time.monotonic() < deadline:
        time.sleep(0.05)
    out, st = cli.status()
    assert st["state"] == "down"
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(f"stale warm fleet (its keeper (pid {info['keeper_pid']}) is "
                               f"gone): "), lines
    assert lines[0].endswith(f"state {cli.state} removed"), lines
    assert _alive(pids) == []
    assert _marked(info["fleet_id"]) == []
    assert not cli.state.exists()
    out, st = cli.status()  # cleaned once: nothing more to say
    assert st["state"] == "down" and out.stderr == ""

    # A record whose keeper pid names no live keeper while its fleet still runs (a pid reused,
    # a keeper lost some other way): every process of that fleet is killed, the keeper too.
    info = cli.up("--devices", "g13s")
    _, st = cli.status()
    pids = st["pids"]
    rec = json.loads(cli.state.read_text())
    rec["keeper_pid"] = dead = _dead_pid()
    cli.state.write_text(json.dumps(rec))
    out = cli("run", "--suite", SUITE, "--devices", "g13s", "--db", str(cli.state.parent / "h.db"),
              "--json")
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith(f"stale warm fleet (its keeper (pid {dead}) is gone): "), lines
    n = int(lines[0].split(": ")[1].split()[0])
    assert n >= len(pids) and "leftover process(es) killed" in lines[0], lines
    assert lines[1].startswith("embedded fleet"), lines  # the run went on without it
    assert out.returncode == 0, out.stderr[-3000:]
    assert _alive(pids) == []
    assert _marked(info["fleet_id"]) == []
    assert not cli.state.exists()


def test_bad_input_is_one_line_and_a_non_zero_exit(cli, tmp_path, monkeypatch):
    for args, want in ((("--devices", "g99"), "no Apple GPU generation 99"),
                       (("--devices", "sm90"), "cannot be emulated")):
        out = cli("fleet", "up", *args, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert lines[-1].startswith("error: ") and want in lines[-1], out.stderr
        assert "Traceback" not in out.stderr and out.stdout == ""
        assert not cli.state.exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = cli("fleet", "status", timeout=60, FARM_STATE_DIR=str(blocker / "state"))
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    want = (f"error: cannot use the fleet state directory {blocker / 'state'}: Not a directory "
            f"(set FARM_STATE_DIR to a writable directory)")
    assert out.stderr.strip().splitlines() == [want]
    # `farm run` only looks: no state directory, or an unusable one, is no warm fleet (nothing
    # made, nothing said), never an error of the run.
    from devices.identity import parse_selectors
    from farm.fleet import warm

    said: list[str] = []
    for where in (blocker / "state", tmp_path / "never"):
        monkeypatch.setenv("FARM_STATE_DIR", str(where))
        assert warm.attach(parse_selectors("g13s"), said.append) is None
    assert said == [] and not (tmp_path / "never").exists()
    # A damaged state file is stale state: cleaned in one line, never a traceback.
    state = cli.state
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text("{not json")
    out = cli("fleet", "status", timeout=60)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert out.stderr.startswith("stale warm fleet (state file ") and not state.exists()
    out = cli("fleet", "down", timeout=60)
    assert out.returncode == 0 and out.stdout.startswith("no warm fleet is up"), out.stderr


def test_a_driver_killed_outright_takes_its_embedded_fleet_with_it(tmp_path):
    """SIGKILL runs no teardown: the embedded fleet's nodes are bound to die with the threads
    that started them in the driver (Ray's kernel fate sharing), and what they started follows
    (agents and workers watch their raylet; a job's pytest dies with its worker)."""
    from farm_procs import Seen, launch, until_first_result

    db = tmp_path / "h.db"
    proc, mark = launch("--suite", "tests/farm_fixtures/suite_stream.py", "--devices", "g13s",
                        "--test-timeout", "900", "--db", str(db))
    seen = Seen(proc, mark)
    try:
        until_first_result(proc, seen, db)
        fleet = len(seen.add())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        left = seen.left_behind(grace=30)
    finally:
        proc.kill()
        seen.kill()
    assert fleet >= 6, fleet  # GCS, raylet, agents, worker, the job's pytest were there
    assert left == [], left
