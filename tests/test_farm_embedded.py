"""`farm run` with no cluster: the embedded local fleet, end to end through the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_farm_run_without_a_cluster_starts_and_tears_down_an_embedded_fleet(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    db, junit = tmp_path / "h.db", tmp_path / "junit.xml"
    out = subprocess.run([sys.executable, "-c", "from farm.cli.app import script; script()", "run",
                          "--suite", "tests/farm_fixtures/suite_basic.py", "--devices",
                          "g13s,g14", "--db", str(db), "--json", "--junit", str(junit)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.splitlines()[0].startswith("embedded fleet")
    run = json.loads(out.stdout)
    assert sorted(j["device"]["arch"] for j in run["jobs"]) == ["applegpu_g13s",
                                                                "applegpu_g14g"]
    assert all(j["device"]["emulated"] and j["status"] == "passed" for j in run["jobs"])
    with sqlite3.connect(db) as c:
        assert c.execute("select status from runs").fetchone()[0] == "passed"
        assert c.execute("select count(*) from results").fetchone()[0] == 6
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert sorted(s.get("tests") for s in suites) == ["3", "3"]


def test_an_embedded_fleet_runs_selector_star_n_as_twins_sharing_one_job(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    out = subprocess.run([sys.executable, "-c", "from farm.cli.app import script; script()", "run",
                          "--suite", "tests/farm_fixtures/suite_twins.py", "--devices", "g14*2",
                          "--db", str(tmp_path / "h.db"), "--json"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
                         check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    (job,) = json.loads(out.stdout)["jobs"]  # one job for the one variant
    assert job["device"]["arch"] == "applegpu_g14g" and len(set(job["nodes"])) == 2
    assert len(job["results"]) == 16 and len({r["nodeid"] for r in job["results"]}) == 16
    assert len({r["farm_node"] for r in job["results"]}) == 2  # both twins ran tests
