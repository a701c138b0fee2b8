"""A real multi-node Ray farm on loopback for the farm's tests, started through the farm CLI.

`farm head` plus three `farm agent` nodes emulating applegpu_g13s, applegpu_g14g and
applegpu_g15s, token auth on, small object stores, ports from a block of their own (per xdist
worker, so two workers never collide and nothing uses Ray's default 6379). Every process is
started in a new session, so teardown kills exactly those process groups by id, never
`ray stop` (which would stop every Ray node on the host).

A test module (tests/ is on sys.path under pytest) imports it with ``from ray_cluster import
running_cluster`` and makes it a fixture: ``yield from running_cluster()`` in a session-scoped one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCHES = ("applegpu_g13s", "applegpu_g14g", "applegpu_g15s")
FARM = [sys.executable, "-c", "from farm.cli.app import script; script()"]
LOOPBACK = "127.0.0.1"  # every node and the driver: nothing of the test cluster leaves the host
NODE_SPAN = 300  # ports a node uses above its base (see farm/fleet/head.py)


_BLOCKS = (20000, 22000, 24000, 26000, 10000, 12000, 14000, 16000, 18000)  # 28000+: the battery
_held: dict[int, object] = {}  # base -> its open lock file, held for this process's life


def _port_block() -> int:
    """A base port below Linux's ephemeral range, owned by this process while it lives.

    An xdist worker prefers 20000 + 2000 * its number (CI's layout); a block another pytest on
    this host holds (an flock on a file in /tmp) is passed over, so two sessions side by side
    never start nodes on the same ports.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = 20000 + 2000 * (int(worker) if worker.isdigit() else 0)
    if first in _held:
        return first
    base = claim_block((first, *[b for b in _BLOCKS if b != first]))
    if base is None:
        raise RuntimeError("every test port block is held by another pytest on this host")
    return base


def claim_block(candidates) -> int | None:
    """The first of ``candidates`` no process on this host holds, now held by this one for its
    life (an flock on /tmp/farm-test-ports-BASE.lock); None when all are taken."""
    for base in candidates:
        if base in _held:
            continue
        lock = open(f"/tmp/farm-test-ports-{base}.lock", "w")  # noqa: SIM115 -- held for life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        _held[base] = lock
        return base
    return None


@dataclass
class FarmCluster:
    """A running loopback farm and what tests need to drive it."""

    address: str
    token: str
    base: int
    temp_dir: Path
    groups: dict[str, int] = field(default_factory=dict)  # name -> process group id
    next_slot: int = 1

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, PYTHONUNBUFFERED="1")
        env.update(extra)
        return env

    def farm(self, *args: str, cwd: Path = REPO, timeout: float = 240,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run the farm CLI against this cluster (``--address`` is the caller's to pass)."""
        return subprocess.run([*FARM, *args], cwd=cwd, env=env or self.env(), text=True,
                              capture_output=True, timeout=timeout, check=False)

    def run_json(self, *args: str, cwd: Path = REPO, timeout: float = 240,
                 env: dict[str, str] | None = None) -> tuple[int, dict]:
        """`farm run --json` here; (exit code, the run's JSON)."""
        out = self.farm("run", "--address", self.address, "--json", *args, cwd=cwd,
                        timeout=timeout, env=env)
        assert out.stdout.strip(), f"no JSON (exit {out.returncode}): {out.stderr[-3000:]}"
        run = json.loads(out.stdout.strip().splitlines()[-1])
        run["_stderr"] = out.stderr[-3000:]  # for assertion messages (see ``said``)
        return out.returncode, run

    def add_agent(self, name: str, emulate: str, **env: str) -> None:
        """Start one more `farm agent` device node (its own process group and port block)."""
        slot, self.next_slot = self.next_slot, self.next_slot + 1
        proc = _start(self, [*FARM, "agent", "--address", self.address, "--emulate", emulate,
                             "--node-ip", LOOPBACK,
                             "--port-base", str(self.base + NODE_SPAN * slot), "--num-cpus",
                             "1", "--object-store-mb", "100"], env)
        self.groups[name] = proc.pid
        _wait(proc, f"farm agent {name}")

    def add_raw_node(self, name: str, labels: dict[str, str]) -> None:
        """A device node started with plain `ray start` and labels the host cannot honour
        (a broken or misconfigured machine): what the health check is there to catch."""
        from farm.fleet.devices import RESOURCE
        from farm.fleet.head import node_ports
        from farm.fleet.loopback import ray_start

        slot, self.next_slot = self.next_slot, self.next_slot + 1
        cmd = [*ray_start(LOOPBACK), f"--address={self.address}", f"--node-ip-address={LOOPBACK}",
               *node_ports(self.base + NODE_SPAN * slot), "--num-cpus=1",
               f"--object-store-memory={100 * 1024 * 1024}", "--disable-usage-stats",
               "--labels=" + ",".join(f"{k}={v}" for k, v in labels.items()),
               "--resources=" + json.dumps({RESOURCE: 1})]
        proc = _start(self, cmd, {})
        self.groups[name] = proc.pid
        _wait(proc, f"ray start {name}")

    def kill(self, name: str) -> None:
        """Kill one node's whole process group (raylet, workers, agents) by its id."""
        pgid = self.groups.pop(name, None)
        if pgid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)

    def live_node_ids(self) -> set[str]:
        """The node ids of every device node the head still counts alive."""
        out = self.farm("devices", "--address", self.address, "--json", "--no-check")
        assert out.returncode == 0, out.stderr
        return {d["node_id"] for d in json.loads(out.stdout)}

    def node_ids(self) -> dict[str, str]:
        """arch -> node id of the live device nodes, read with `farm devices --json`."""
        out = self.farm("devices", "--address", self.address, "--json", "--no-check")
        assert out.returncode == 0, out.stderr
        return {d["arch"]: d["node_id"] for d in json.loads(out.stdout)}


def _start(c: FarmCluster, cmd: list[str], extra: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, env=c.env(**extra), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _wait(proc: subprocess.Popen, what: str) -> str:
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 0, f"{what} failed: {out[-6000:]}"
    return out


def start_cluster(arches: tuple[str, ...] = ARCHES) -> FarmCluster:
    base = _port_block()
    temp = Path(tempfile.mkdtemp(prefix="farmray-", dir="/tmp"))
    c = FarmCluster(address=f"127.0.0.1:{base}", token=secrets.token_hex(32), base=base,
                    temp_dir=temp)
    head = _start(c, [*FARM, "head", "--node-ip", LOOPBACK, "--port", str(base), "--num-cpus",
                      "1", "--object-store-mb", "100", "--temp-dir",
                      str(temp)], {})
    c.groups["head"] = head.pid
    try:
        _wait(head, "farm head")
        for arch in arches:  # one at a time: concurrent `ray start` joins fail here
            c.add_agent(arch, arch)
    except BaseException:
        stop_cluster(c)
        raise
    return c


def stop_cluster(c: FarmCluster) -> None:
    for name in [n for n in c.groups if n != "head"] + ["head"]:
        c.kill(name)
    time.sleep(0.5)
    if os.environ.get("FARM_TEST_KEEP_RAY_LOGS") != "1":  # keep them to debug a failure
        shutil.rmtree(c.temp_dir, ignore_errors=True)


def running_cluster() -> Iterator[FarmCluster]:
    """Body of a session fixture: ``yield from running_cluster()``."""
    c = start_cluster()
    try:
        yield c
    finally:
        stop_cluster(c)


def said(run: dict) -> str:
    """What a run's jobs ended as and what the driver printed: an exit code's explanation."""
    jobs = [(j.get("key"), j.get("status"), (j.get("error") or "")[:500])
            for j in run.get("jobs", [])]
    return f"jobs {jobs}; driver stderr tail: {run.get('_stderr', '')[-1500:]}"
