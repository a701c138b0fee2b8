"""A bug in the farm itself exits with its own code (70), in one line, never 1 (which means
unexpected results) and never a bare traceback; -v shows the traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# A command whose library call fails in a way no user input explains.
BROKEN = """
import sys
import db.queries
def boom(*a, **k):
    raise RuntimeError("the unexpected")
db.queries.list_runs = boom
import farm.cli.history
farm.cli.history.list_runs = boom
from farm.cli.app import main
sys.argv = ["farm", *sys.argv[1:]]
main()
"""


def _farm(tmp_path, *argv):
    db = tmp_path / "h.db"
    make = f"from db import open_history; open_history({str(db)!r}).close()"
    subprocess.run([sys.executable, "-c", make], cwd=REPO, check=True, timeout=60)
    return subprocess.run([sys.executable, "-c", BROKEN, *argv, "--db", str(db)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=False)


def test_a_bug_is_one_line_and_exit_70(tmp_path):
    p = _farm(tmp_path, "runs")
    assert p.returncode == 70, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert line.startswith("error: internal error (RuntimeError: the unexpected)")


def test_verbose_shows_the_traceback(tmp_path):
    p = _farm(tmp_path, "-v", "runs")
    assert p.returncode == 70 and "Traceback" in p.stderr and "the unexpected" in p.stderr
