"""Where a device job's pytest runs: its process ancestry and the farm package it imports,
written to $FARM_TEST_ANCESTRY/<pid>.json (set in the fleet's environment by the test)."""

import json
import os
from pathlib import Path

import farm


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rpartition(")")[2].split()[1])


def test_where_it_runs():
    out = os.environ.get("FARM_TEST_ANCESTRY")
    chain, pid = [], os.getppid()
    while pid > 1 and len(chain) < 12:
        chain.append(_cmdline(pid))
        pid = _parent(pid)
    if out:
        Path(out, f"{os.getpid()}.json").write_text(json.dumps(
            {"ancestors": chain, "farm": farm.__file__}))
