"""Temporary directories that never outlive their owner for long.

A job killed with SIGKILL (a force-cancelled Ray task, a timeout, the OOM killer) runs no
cleanup, so its ``farm-job-*`` or ``farm-ship-*`` copy of the tree stays in /tmp. Each directory
therefore carries its creator's pid, and whoever makes the next one removes those whose creator
is gone: every path ends with the directory removed, at the latest at the next run.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to judge
        return True
    return True


def sweep(prefix: str, base: Path | None = None) -> list[Path]:
    """Remove ``prefix<pid>-*`` directories under ``base`` (the temp dir) whose pid is gone."""
    base = Path(base or tempfile.gettempdir())
    pattern = re.compile(re.escape(prefix) + r"(\d+)-")
    removed = []
    for d in base.glob(f"{prefix}*"):
        m = pattern.match(d.name)
        if m and d.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def owned_tmpdir(prefix: str, base: Path | None = None) -> Path:
    """A new ``prefix<pid>-XXXX`` directory, after sweeping the ones left by dead processes."""
    sweep(prefix, base)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=base))
