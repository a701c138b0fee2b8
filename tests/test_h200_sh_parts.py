"""scripts/h200.sh's ``denorm`` and ``diagnose`` run the parts a call names (DENORM_PARTS,
DIAGNOSE_PARTS), so a plan can split them over calls of at most 600 s. Run here with
``python3`` and ``ncu`` stood in by scripts that log their arguments (the device's are real):
what is checked is the shell's choice of steps, not a measurement. ``bench/diagnostic_tiles.py``
runs for real (the tiles ncu is given)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LOG_STUB = """#!/bin/sh
IFS="$(printf '\\t')"  # arguments logged tab-separated: one JSON stays one argument
echo "$(basename "$0")	$*" >> "$STUB_LOG"
case "$*" in *diagnostic_tiles.py*) exec "$REAL_PYTHON" "$@";; esac
exit 0
"""


def _run(tmp_path: Path, cmd: str, env: dict) -> list[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("python3", "ncu"):
        stub = bin_dir / name
        stub.write_text(LOG_STUB)
        stub.chmod(0o755)
    log = tmp_path / "log"
    log.write_text("")
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "STUB_LOG": str(log),
            "REAL_PYTHON": sys.executable, "OUT": str(out), **env}
    r = subprocess.run(["bash", "scripts/h200.sh", cmd], cwd=ROOT, env=full,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return [ln for ln in log.read_text().splitlines() if "diagnostic_tiles.py" not in ln]


def _flat(ln: str) -> str:
    return ln.replace("\t", " ")


def _steps(lines: list[str]) -> list[str]:
    """Each logged step as what it ran: a check sweep at its M, or ncu on its shapes."""
    steps = []
    for ln in map(_flat, lines):
        if "cuda_verify_cold_sweep.py" in ln and "--check-only" in ln:
            steps.append("check " + ("16" if "--point-m 16" in ln else "8"))
        elif ln.startswith("ncu ") and "--shapes" in ln:
            steps.append("ncu " + ln.split("--shapes ", 1)[1].split()[0])
    return steps


@pytest.mark.parametrize("parts,want", [
    (None, ["check 8", "check 16", "ncu gate_up", "ncu down"]),
    ("check gate_up", ["check 8", "check 16", "ncu gate_up"]),
    ("down", ["ncu down"])])
def test_denorm_runs_the_parts_it_is_given(tmp_path, parts, want):
    env = {} if parts is None else {"DENORM_PARTS": parts}
    lines = _run(tmp_path, "denorm", env)
    assert _steps(lines) == want
    ncu = [_flat(ln) for ln in lines if ln.startswith("ncu\t")]
    assert all("'denorm': 1" not in ln for ln in ncu)  # JSON tiles, not Python reprs
    assert all('"denorm": 1' in ln and '"denorm": 0' in ln for ln in ncu)  # beside its twin


@pytest.mark.parametrize("parts,want", [
    ("sections", 2), ("hot ablate", 2), (None, 5), ("sections16", 1)])
def test_diagnose_runs_the_parts_it_is_given(tmp_path, parts, want):
    env = {} if parts is None else {"DIAGNOSE_PARTS": parts}
    lines = _run(tmp_path, "diagnose", env)
    ncu = [ln for ln in lines if ln.startswith("ncu\t--clock-control")]  # profiling runs
    assert len(ncu) == want
    sections = [ln for ln in ncu if "--section\tComputeWorkloadAnalysis" in ln]
    sampled = [ln for ln in ncu if "--section\tSourceCounters" in ln]
    assert len(sections) == (1 if parts in (None, "sections") else 0)
    assert len(sampled) == (1 if parts in (None, "sections", "sections16") else 0)
    if parts == "sections16":  # the M=16 tiles, sampled at M=16
        assert "--ms\t16" in sampled[0] and "--ms\t16" not in "".join(sections)
    legs = [_flat(ln) for ln in lines if "ablate_legs.py" in ln]  # the legs of what ran
    assert len(legs) == (parts != "sections16") and all("--out" in ln for ln in legs)
    if parts == "sections16":
        return
    assert ("ablate/ncu_cold.csv" in legs[0]) == (parts != "sections")
    assert ("ablate_sections/ncu_cold.csv" in legs[0]) == (parts in (None, "sections"))
    for ln in sections + sampled:  # the tiles arrive as one JSON argument, the math alone in it
        words = ln.split("\t")
        tiles = json.loads(words[words.index("--tiles") + 1])
        assert {"ablate": 2}.items() <= tiles[1].items()


def test_diagnose_loads_times_the_loads_tiles_beside_a_bare_read_and_tabulates_their_legs(
        tmp_path):
    """``loads``: one ncu run of the LOADS tiles (each with its math taken out) on both shapes
    at M=8, then the bare reads (bench/read_sizes_ncu.py) in the same call, and the legs table
    reads the loads' CSV."""
    lines = _run(tmp_path, "diagnose", {"DIAGNOSE_PARTS": "loads"})
    ncu = [ln.split("\t") for ln in lines if ln.startswith("ncu\t--clock-control")]
    assert len(ncu) == 2
    timed, read = ncu
    tiles = json.loads(timed[timed.index("--tiles") + 1])
    assert len(tiles) == 9 and {t["ablate"] for t in tiles} == {1}
    assert timed[timed.index("--shapes") + 1] == "gate_up,down"
    assert "regex:dflash2_read" in read and any("read_sizes_ncu.py" in w for w in read)
    legs = [_flat(ln) for ln in lines if "ablate_legs.py" in ln]
    assert len(legs) == 1 and "loads/ncu_cold.csv" in legs[0]


def test_diagnose_bulk_checks_the_bulk_tiles_then_times_each_shapes_legs(tmp_path):
    """``bulk``: the check sweep of the bulk set at denorm 2 (the bulk pipeline not refused:
    no --no-bulk), then one ncu run a shape of its BULK_TILES' legs (whole, loads alone, math
    alone, and both without x's loads), and the legs table reads both shapes' CSVs beside the register tile's (ablate)."""
    lines = _run(tmp_path, "diagnose", {"DIAGNOSE_PARTS": "ablate bulk"})
    check = [_flat(ln) for ln in lines if "--check-only" in ln]
    assert len(check) == 1 and "--points bulk-denorm" in check[0]
    assert "--no-bulk" not in check[0] and "--no-ring" in check[0]
    ncu = [ln.split("\t") for ln in lines if ln.startswith("ncu\t--clock-control")]
    assert len(ncu) == 3  # ablate on both shapes, then bulk a shape each
    for run, shape in zip(ncu[1:], ("gate_up", "down"), strict=True):
        assert run[run.index("--shapes") + 1] == shape
        tiles = json.loads(run[run.index("--tiles") + 1])
        assert {t["bulk"] for t in tiles} == {3}
        assert {t.get("ablate", 0) for t in tiles} == {0, 1, 2, 3, 4}
    legs = [_flat(ln) for ln in lines if "ablate_legs.py" in ln]
    assert len(legs) == 1 and "bulk_gate_up/ncu_cold.csv" in legs[0]
    assert "bulk_down/ncu_cold.csv" in legs[0] and "ablate/ncu_cold.csv" in legs[0]


def test_diagnose_xcost_times_each_shapes_register_tiles_at_both_ms_and_tabulates_them(tmp_path):
    """``xcost``: one ncu run a shape, at M=8 and 16, of the table's tiles whose x loads ablate
    3/4 take out (register tiles, and bulk tiles without x_early: gate/up's M=8 since
    2026-12-07) whole and with ablate 1-4, and the legs table reads both shapes' CSVs."""
    lines = _run(tmp_path, "diagnose", {"DIAGNOSE_PARTS": "xcost"})
    ncu = [ln.split("\t") for ln in lines if ln.startswith("ncu\t--clock-control")]
    assert len(ncu) == 2
    for run, shape in zip(ncu, ("gate_up", "down"), strict=True):
        assert run[run.index("--shapes") + 1] == shape and run[run.index("--ms") + 1] == "8,16"
        tiles = json.loads(run[run.index("--tiles") + 1])
        assert tiles and {t["ablate"] for t in tiles} == {0, 1, 2, 3, 4}
        assert not any(t.get("stages") and not t.get("bulk") for t in tiles)  # no ring tile
        assert not any(t.get("bulk") and t.get("x_early") for t in tiles)
    legs = [_flat(ln) for ln in lines if "ablate_legs.py" in ln]
    assert len(legs) == 1 and "xcost_gate_up/ncu_cold.csv" in legs[0]
    assert "xcost_down/ncu_cold.csv" in legs[0]
