"""The fleets the farm modes run against, kept up beside the runs and started and stopped
apart, so that their start and stop stay out of the runs' walls and are reported on their own."""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from orchestration.common import (
    ARCHES,
    CLUSTER_BASE_PORT,
    FARM,
    REPO,
    SELECTORS,
    clean_env,
    timed,
)


class Cluster:
    """head + three `farm agent --emulate` nodes, as tests/ray_cluster.py starts them, on a port
    block of this benchmark's own; every process in a new session, killed by its group id."""

    def __init__(self, extra_env: dict[str, str]):
        sys.path.insert(0, str(REPO / "tests"))
        import ray_cluster

        self.rc = ray_cluster
        base = CLUSTER_BASE_PORT
        self.c = ray_cluster.FarmCluster(address=f"127.0.0.1:{base}",
                                         token=secrets.token_hex(32), base=base,
                                         temp_dir=Path(tempfile.mkdtemp(prefix="benchray-",
                                                                        dir="/tmp")))
        self.extra = extra_env
        self.times: dict[str, float] = {}

    def start(self) -> None:
        rc, c = self.rc, self.c
        t0 = time.perf_counter()
        head = rc._start(c, [*FARM, "head", "--port", str(c.base), "--num-cpus", "1",
                             "--object-store-mb", "100", "--temp-dir", str(c.temp_dir)],
                         self.extra)
        c.groups["head"] = head.pid
        rc._wait(head, "farm head")
        self.times["head"] = time.perf_counter() - t0
        for arch in ARCHES:  # one at a time, as the tests do (concurrent joins fail here)
            t = time.perf_counter()
            c.add_agent(arch, arch, **self.extra)
            self.times["agent " + arch] = time.perf_counter() - t
        self.times["total"] = time.perf_counter() - t0

    def env(self) -> dict[str, str]:
        return {**clean_env(**self.extra), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.c.token}

    def stop(self) -> float:
        t0 = time.perf_counter()
        self.rc.stop_cluster(self.c)  # kills exactly our process groups; never `ray stop`
        return time.perf_counter() - t0


class Warm:
    """`farm fleet up` / `farm fleet down` with a state directory of the bench's own."""

    address = None  # `farm run` attaches through the state directory, not an address

    def __init__(self, extra_env: dict[str, str], devices: str = SELECTORS):
        self.state = Path(tempfile.mkdtemp(prefix="bench-warm-"))
        self.extra, self.devices = extra_env, devices
        self.up_s = self.down_s = None
        self.info: dict | None = None

    def env(self) -> dict[str, str]:
        return clean_env(**self.extra, FARM_STATE_DIR=str(self.state))

    def start(self) -> None:
        t0 = time.perf_counter()
        _wall, out = timed([*FARM, "fleet", "up", "--devices", self.devices, "--json"],
                           self.env())
        if out.returncode != 0:
            raise RuntimeError(f"farm fleet up: exit {out.returncode}: {out.stderr[-2000:]}")
        self.up_s = time.perf_counter() - t0
        self.info = json.loads(out.stdout)

    def stop(self) -> float | None:
        if self.info is None:
            return None
        t0 = time.perf_counter()
        out = subprocess.run([*FARM, "fleet", "down"], cwd=REPO, env=self.env(),
                             capture_output=True, text=True, timeout=120, check=False)
        self.down_s = time.perf_counter() - t0
        self.info = None
        if out.returncode != 0:
            print(f"  farm fleet down: exit {out.returncode}: {out.stderr[-500:]}", flush=True)
        shutil.rmtree(self.state, ignore_errors=True)
        return self.down_s
