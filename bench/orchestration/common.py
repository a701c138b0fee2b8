"""What every part of the orchestration bench must agree on: the devices, the modes and their
targets, and the environment a timed process starts in (none of the caller's Ray, xdist or fleet
settings), so that every mode is measured from the same start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "bench" / "results"
PY = sys.executable
ARCHES = ("applegpu_g13s", "applegpu_g14g", "applegpu_g15s")
SELECTORS = "g13s,g14g,g15s"
FARM = [PY, "-c", "from farm.cli.app import script; script()"]
CLUSTER_BASE_PORT = 16000  # head 16000.., agents +300 each; below the ephemeral range, clear
#                            of tests/ray_cluster.py's blocks (20000 + 2000 per xdist worker)
TARGET_RATIO, TARGET_FIXED_S, TARGET_PER_TEST_MS = 1.2, 6.0, 2.0
TARGET_FIRST_TEST_S, TARGET_WARM_FIXED_S = 6.0, 2.0  # embedded: first test; warm: fixed cost
MODES = ("plain", "sequential", "concurrent", "xdist", "device-job", "farm-embedded",
         "farm-cluster", "farm-warm", "farm-embedded-1", "farm-warm-1")
ONE = "g13s"  # the single-device farm modes' device: the same one ``plain`` runs
# farm mode -> (its devices, the plain mode that does the same work with the same concurrency)
FARM_MODES = {"farm-embedded": (SELECTORS, "concurrent"), "farm-cluster": (SELECTORS, "concurrent"),
              "farm-warm": (SELECTORS, "concurrent"), "farm-embedded-1": (ONE, "plain"),
              "farm-warm-1": (ONE, "plain")}
# the entry point: the instrumented farm run is this script again (``--_probe``)
SCRIPT = REPO / "bench" / "bench_orchestration.py"
# The variable bench_orchestration.py's plugin part reads in xdist workers; named there too,
# since that part runs at import and stays stdlib-only.
_XDIST_ENV = "BENCH_XDIST_ARCHES"


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", _XDIST_ENV,
                        "DFLASH2_DEVICE_ARCH", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS",
                        "FARM_STATE_DIR")}
    env.update(extra)
    return env


def addopts_workaround() -> dict[str, str]:
    """pyproject's pytest addopts name an xdist option (``--dist``); the farm's device jobs run
    pytest with plugin autoload off, where that option does not exist and every job ends in a
    usage error. The farm modes then run with ``PYTEST_ADDOPTS=-o addopts=`` (ini addopts off,
    nothing else changed) in the environment their device processes inherit; reported."""
    import tomllib

    opts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"].get("addopts", "")
    return {"PYTEST_ADDOPTS": "-o addopts="} if "--dist" in opts or "-n" in opts.split() else {}


def timed(cmd: list[str], env: dict[str, str], timeout: float = 600) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)
    return time.perf_counter() - t0, out
