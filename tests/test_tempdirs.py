"""A job killed with SIGKILL leaves its temp copy of the tree; the next one made removes it,
while a live process's directory stays (farm-job-* on devices, farm-ship-* on the driver)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from farm.tempdirs import owned_tmpdir

KILLED = """
import os, signal, sys
from pathlib import Path
from farm.tempdirs import owned_tmpdir
d = owned_tmpdir(sys.argv[1], Path(sys.argv[2]))
(d / "tree.py").write_text("x = 1")
print(d, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("prefix", ["farm-job-", "farm-ship-"])
def test_a_killed_owners_directory_is_removed_by_the_next(prefix, tmp_path):
    p = subprocess.run([sys.executable, "-c", KILLED, prefix, str(tmp_path)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == -9
    left = Path(p.stdout.strip())
    assert left.is_dir() and left.parent == tmp_path  # SIGKILL: no cleanup ran
    mine = owned_tmpdir(prefix, tmp_path)
    other = owned_tmpdir(prefix, tmp_path)  # a live owner's directory (this process) stays
    assert not left.exists()
    assert mine.is_dir() and other.is_dir()
    assert {d.name.split("-")[2] for d in tmp_path.iterdir()} == {str(os.getpid())}
