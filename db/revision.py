"""The revision a locally recorded run tested: git sha, dirty flag, hash of the shipped tree.

The tree hash covers the shipped sources themselves, so two dirty checkouts of one sha that
differ are told apart, and a run from an installed (non-git) copy still has an identity.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

SHIPPED = ("dflash2", "kernels", "suites", "farm", "db")
SUFFIXES = {".py", ".metal", ".cu", ".toml", ".txt", ".json", ".mako", ".ini"}


def tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for top in SHIPPED:
        base = root / top
        if not base.is_dir():
            continue
        for f in sorted(p for p in base.rglob("*") if p.suffix in SUFFIXES and p.is_file()
                        and "__pycache__" not in p.parts):
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout


def current_revision(root: Path | None = None) -> dict:
    """{git_sha, dirty, tree_hash} of the source tree ``root`` (default: this package's)."""
    root = root or Path(__file__).resolve().parent.parent
    sha = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain", "--untracked-files=no") if sha else None
    return {
        "git_sha": sha.strip() if sha else None,
        "dirty": None if status is None else bool(status.strip()),
        "tree_hash": tree_hash(root),
    }
