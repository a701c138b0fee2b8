"""bench/sim_scale.py, the simulation behind docs/SCALE.md, run once and tiny: the run loop with
synthetic devices stores every result each device sent, and writes fewer times than it takes
batches (one write per wakeup). Its figures are for the bench; here only what must hold."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIM = REPO / "bench" / "sim_scale.py"


def test_every_result_of_every_synthetic_device_is_stored_with_one_write_per_wakeup(tmp_path):
    out = tmp_path / "scale.json"
    # a Ray address in the environment (another cluster on the host) is not the simulation's
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1"}
    p = subprocess.run([sys.executable, str(SIM), "--devices", "3,24", "--rate", "40",
                        "--out", str(out)], cwd=REPO, capture_output=True, text=True,
                       timeout=300, check=False, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["devices"] for r in rows] == [3, 24]
    for r in rows:
        assert r["results"] == r["expected_results"] > 0, r
        assert r["status"] in ("passed", "failed"), r  # every job ended; none lost or in error
        assert r["batches"] > r["writes"] > 0, r  # several devices' batches share a write
    assert out.with_suffix(".md").read_text().count("\n| ") == 3  # header and two rows


def test_bad_sizes_are_one_line_and_exit_2(tmp_path):
    p = subprocess.run([sys.executable, str(SIM), "--devices", "ten", "--out",
                        str(tmp_path / "s.json")], cwd=REPO, capture_output=True, text=True,
                       timeout=60, check=False)
    assert p.returncode == 2
    want = "error: --devices takes comma-separated counts (got 'ten')"
    assert p.stderr.strip().splitlines() == [want]
    assert not (tmp_path / "s.json").exists()
