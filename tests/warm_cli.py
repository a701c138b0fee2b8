"""The warm fleet's CLI for tests: a state directory of the test's own, and whatever of its
fleets is left killed at the end (`tests/test_fleet_up.py`, `tests/test_warm_executors.py`)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

from farm_procs import psutil

REPO = Path(__file__).resolve().parent.parent
FARM = [sys.executable, "-c", "from farm.cli.app import script; script()"]


class Cli:
    """The CLI with this test's own state directory and no cluster in the environment; it
    remembers the fleets it brought up, so the test's end kills whatever is left of them."""

    def __init__(self, state: Path):
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "FARM_STATE_DIR")}
        self.env.update(FARM_STATE_DIR=str(state), PYTHONUNBUFFERED="1")
        self.state = state / "fleet.json"
        self.fleets: list[str] = []

    def __call__(self, *args: str, timeout: float = 240, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([*FARM, *args], cwd=REPO, env={**self.env, **env},
                              capture_output=True, text=True, timeout=timeout, check=False)

    def up(self, *args: str, **env: str) -> dict:
        out = self("fleet", "up", "--json", *args, **env)
        assert out.returncode == 0, out.stderr[-3000:]
        info = json.loads(out.stdout)
        self.fleets.append(info["fleet_id"])
        return info

    def status(self) -> tuple[subprocess.CompletedProcess, dict]:
        out = self("fleet", "status", "--json")
        assert out.returncode == 0, out.stderr
        return out, json.loads(out.stdout)


def fleet_cli(tmp_path):
    """A test's `cli` fixture (``yield from``): the CLI with a state directory of the test's
    own; whatever of its fleets is left is gone at the end."""
    c = Cli(tmp_path / "state")
    yield c
    with contextlib.suppress(Exception):
        c("fleet", "down", timeout=60)
    for fid in c.fleets:
        _kill_marked(fid)


def _fleet_env(p) -> str | None:
    try:
        return p.environ().get("FARM_FLEET_ID")
    except Exception:  # noqa: BLE001 -- gone, or not ours to read
        return None


def _kill_marked(fleet_id: str) -> None:
    ps = psutil()
    for p in ps.process_iter():
        if _fleet_env(p) == fleet_id:
            with contextlib.suppress(ps.Error):
                p.kill()


