"""The vocab parity suite with a tuned vocab kernel selected (sm_90's table measures one 2x
faster than stock and holds it until this suite checks it): the suite's own test, run as a
user runs it on an emulated Apple GPU whose table is given a vocab entry, must hold the tuned
kernel to its bound, not state the fallback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VOCAB_G14G = {"devices": ["g14g"], "dtypes": ["bfloat16"], "M": 8, "bits": 4,
              "group_sizes": [64], "shapes": ["vocab"], "variant": "scalar_kmajor",
              "params": {"n_tile": 8}, "profiled": "test: the g14g gate_up tile on vocab"}


def _run_vocab_suite(tmp_path: Path, table: dict) -> tuple[subprocess.CompletedProcess, list]:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    out = tmp_path / "out.jsonl"
    env = {**os.environ, "DFLASH2_SELECTION_TABLE": str(path)}
    env.pop("DFLASH2_DEVICE_ARCH", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p",
                        "no:cacheprovider", "-o", "addopts=", "-q",
                        "suites/test_parity.py::test_vocab_projection[verify-8]",
                        "--device-arch", "applegpu_g14g", "--results-jsonl", str(out)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    events = [json.loads(ln) for ln in out.read_text().splitlines()] if out.exists() else []
    return r, [e for e in events if e["type"] == "result"]


def test_a_tuned_vocab_kernel_is_held_to_its_bound(tmp_path):
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    table["entries"].append(VOCAB_G14G)
    r, results = _run_vocab_suite(tmp_path, table)
    assert r.returncode == 0, r.stdout[-3000:]
    (res,) = results
    sel = res["selections"][0]
    assert (sel["op"], sel["variant"], sel["reason"]) == ("vocab", "scalar_kmajor", "tuned")
    (m,) = [m for m in res["measurements"] if m["name"] == "ulps_vs_stock_at_scale"]
    assert m["value"] <= 2.0 and m["bound"] == 2.0
