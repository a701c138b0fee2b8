"""scripts/h200.sh's wheel path to the lent machine, which reaches no registry and takes 64 MiB a
call: ``split`` cuts the CUDA wheel into parts with a manifest, ``stage`` copies whatever a call
carried, ``install`` joins them only when every part is there at its size and the join has the
manifest's sha256. Run here on a made-up wheel; pip is stood in by a script (the device's is
real): what is checked is which parts the shell demands, and that the join is the wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "h200.sh"
WHEEL = "mlx_cuda_13-0.32.4-py3-none-manylinux_2_35_x86_64.whl"
CARRY_LIMIT = 64 * 2**20  # what one device call carries: the tracked tree and the carried paths


def _sh(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False, env={**os.environ, **env})


def test_install_joins_the_wheel_only_when_every_part_is_staged(tmp_path):
    wheel = tmp_path / WHEEL
    wheel.write_bytes(os.urandom(5 * 2**20 + 12345))
    r = _sh(tmp_path, "split", str(wheel), PART_MIB="2")
    assert r.returncode == 0, r.stderr
    parts = sorted(tmp_path.glob(".whl/p*"))
    assert [p.name for p in parts] == ["p1", "p2", "p3"]
    assert all((p / f"{WHEEL}.parts").is_file() for p in parts)
    # pip and the import check stood in: exit 0, so only the shell's own checks decide
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    env = {"WHEELS": str(tmp_path / "wheels"), "PATH": f"{stub.parent}:{os.environ['PATH']}"}
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "mlx-0.32.4-cp312-cp312-manylinux_2_35_x86_64.whl").write_bytes(b"x")
    aside = tmp_path / "aside"
    aside.mkdir()
    for p in parts[1:]:  # the first call carries p1 alone
        shutil.move(p, aside / p.name)
    assert _sh(tmp_path, "stage", **env).returncode == 0
    r = _sh(tmp_path, "install", **env)
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "install: part(s) ab ac of the CUDA wheel not staged; stage every .whl/p* first"]
    assert not (tmp_path / "wheels" / WHEEL).exists()
    for p in parts[1:]:  # the next calls carry p2, then p3
        shutil.move(aside / p.name, p)
    assert _sh(tmp_path, "stage", **env).returncode == 0
    r = _sh(tmp_path, "install", **env)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "wheels" / WHEEL).read_bytes() == wheel.read_bytes()
    # a stale join (another wheel, or a partial one) is rejoined, not taken as done
    (tmp_path / "wheels" / WHEEL).write_bytes(b"stale")
    assert _sh(tmp_path, "install", **env).returncode == 0
    assert (tmp_path / "wheels" / WHEEL).read_bytes() == wheel.read_bytes()
    # a part changed after the split: the join is refused with one line
    part = tmp_path / "wheels" / f"{WHEEL}.part-ab"
    part.write_bytes(os.urandom(part.stat().st_size))
    (tmp_path / "wheels" / WHEEL).unlink()
    r = _sh(tmp_path, "install", **env)
    assert r.returncode == 2 and "sha256" in r.stderr and len(r.stderr.splitlines()) == 1


def test_nothing_staged_is_one_line():
    r = _sh(ROOT, "install", WHEELS="/nonexistent-dir-of-wheels")
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1


def test_a_part_and_the_tracked_tree_fit_one_call():
    """A call carries the repository's tracked files beside one part (the last also the 0.8 MB
    mlx wheel): at the default 30 MiB parts the tree may grow to ~33 MiB before a call is
    refused (2026-12-05: at 45 MiB parts and a 19.3 MiB tree it was, 'larger than 64 MiB')."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.split(b"\0")
    tree = sum((ROOT / f.decode()).stat().st_size for f in files
               if f and (ROOT / f.decode()).is_file())
    part = int(next(ln for ln in SCRIPT.read_text().splitlines()
                    if "PART_MIB:-" in ln).split("PART_MIB:-")[1].split("}")[0]) * 2**20
    assert tree + part + 2**20 < CARRY_LIMIT - 4 * 2**20, (tree, part)
