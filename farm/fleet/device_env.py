"""The environment a device's subprocesses (its suite's pytest, its health check) run in.

It lives below both the run loop's device side and the fleet's health check, which start the
same kind of subprocess on the same node and must give it the same view of the run.
"""

from __future__ import annotations

import os
from pathlib import Path

from dflash2.runtime_context import without_dispatch_env

ENV_ARCH = "DFLASH2_DEVICE_ARCH"  # devices.identity.ENV_ARCH, without importing MLX here


def job_env(device: dict, workdir: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The subprocess environment: the shipped tree first on the path, the device's emulation.

    Plugin autoloading is off so every device loads the same plugins (the farm's), whatever else
    its environment has installed.
    """
    # Exactly the run's DFLASH2_* variables (``extra``, as recorded with the run), not leftovers
    # of the node's own environment; node-local ones (its arch, toolchain) stay.
    env = without_dispatch_env(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(workdir), env.get("PYTHONPATH")) if p)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if device.get("emulated"):
        env[ENV_ARCH] = device["arch"]
    else:
        env.pop(ENV_ARCH, None)
    env.update(extra or {})
    return env
