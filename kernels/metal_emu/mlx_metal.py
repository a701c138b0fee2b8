"""MLX's own Metal sources, from the macOS ``mlx-metal`` wheel of the installed MLX version.

The Linux wheels carry no Metal code, but the macOS wheel (fetched with ``pip download
--platform macosx_15_0_arm64``, any host) ships MLX's Metal headers (``quantized.h`` among them)
and, inside ``libmlx.dylib``, the utils preamble that ``metal_kernel`` prepends to every custom
kernel. Both are extracted once into a cache keyed by MLX version.

``DFLASH2_MLX_METAL_WHEEL`` points at a wheel already on disk (no download); the cache lives in
``DFLASH2_EMU_CACHE`` or ``~/.cache/dflash2-farm``.
"""

from __future__ import annotations

import fcntl
import functools
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import mlx.core as mx

ENV_WHEEL = "DFLASH2_MLX_METAL_WHEEL"
ENV_CACHE = "DFLASH2_EMU_CACHE"
PLATFORM = "macosx_15_0_arm64"
_PREAMBLE_MARK = b"// Auto generated source for mlx/backend/metal/kernels/utils.h"


class MetalSourcesUnavailable(RuntimeError):
    """The mlx-metal wheel could not be found or fetched: one line, with the fix."""


def cache_root() -> Path:
    root = os.environ.get(ENV_CACHE) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dflash2-farm")
    return Path(root)


def version() -> str:
    return mx.__version__.split(".dev")[0]


def _wheel(dest: Path) -> Path:
    given = os.environ.get(ENV_WHEEL)
    if given:
        if not Path(given).is_file():
            raise MetalSourcesUnavailable(f"{ENV_WHEEL}={given}: no such file")
        return Path(given)
    found = sorted(dest.glob(f"mlx_metal-{version()}-*.whl"))
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
           f"mlx-metal=={version()}", "--platform", PLATFORM, "--only-binary=:all:",
           "-d", str(dest)]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    found = sorted(dest.glob(f"mlx_metal-{version()}-*.whl"))
    if r.returncode != 0 or not found:
        last = (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise MetalSourcesUnavailable(
            f"cannot fetch mlx-metal=={version()} for {PLATFORM} ({last}); download it where "
            f"PyPI is reachable and set {ENV_WHEEL} to the wheel's path")
    return found[0]


@functools.cache
def extracted() -> Path:
    """The folder holding ``utils_preamble.metal`` and ``include/`` for this MLX version."""
    root = cache_root() / "mlx-metal" / version()
    done = root / "complete"
    if done.exists():
        return root
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return root
        wheel = _wheel(root)
        with zipfile.ZipFile(wheel) as z:
            lib = z.read("mlx/lib/libmlx.dylib")
            for name in z.namelist():
                if name.startswith("mlx/include/mlx/backend/metal/kernels/"):
                    target = root / "include" / name.removeprefix("mlx/include/")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(z.read(name))
        at = lib.find(_PREAMBLE_MARK)
        if at < 0:
            raise MetalSourcesUnavailable(f"{wheel.name}: libmlx.dylib holds no utils preamble")
        start = lib.rfind(b"\x00", 0, at) + 1
        end = lib.index(b"\x00", at)
        (root / "utils_preamble.metal").write_bytes(lib[start:end])
        done.write_text(wheel.name + "\n")
    return root


@functools.cache
def utils_preamble() -> str:
    return (extracted() / "utils_preamble.metal").read_text(encoding="utf-8")


def include_dir() -> Path:
    """Root for ``#include "mlx/backend/metal/kernels/..."``."""
    return extracted() / "include"
