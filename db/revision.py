"""The revision a run tested: git sha, dirty flag, and one hash of the tree that ran.

One algorithm everywhere: `farm run` (which ships this tree to its devices, `farm.fleet.
shipping`) and a local `pytest --farm-db` record the same ``tree_hash`` for the same checkout,
so their runs can be told to be of the same source. The hash covers the files themselves, so two
dirty checkouts of one sha that differ are told apart, and a run from a copy without git still
has an identity.
"""

from __future__ import annotations

import fnmatch
import hashlib
import subprocess
from pathlib import Path

# gitignore-style patterns (also Ray's `excludes`): VCS data, virtualenvs, databases, output.
EXCLUDES = [".git", ".venv", "venv", "*.db", "*.db-wal", "*.db-shm", "*.sqlite",
            "__pycache__", "*.pyc", "bench/results", ".pytest_cache", ".ruff_cache",
            "*.egg-info", ".wheels", "wheels"]
# Outside a checkout (an installed copy), only the project's own packages are the tree.
PACKAGES = ("devices", "dflash2", "kernels", "suites", "farm", "db")
PROJECT_MARKER = 'name = "dflash2-farm"'


def is_checkout(d: Path) -> bool:
    try:
        return PROJECT_MARKER in (d / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False


def _git(root: Path, *args: str) -> str | None:
    try:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _excluded(rel: str) -> bool:
    parts = rel.split("/")
    for pat in EXCLUDES:
        if "/" in pat:
            if rel == pat or rel.startswith(pat + "/"):
                return True
        elif any(fnmatch.fnmatch(p, pat) for p in parts):
            return True
    return False


def tree_files(root: Path) -> list[str]:
    """Relative paths of the tree's files: git's view (tracked + untracked not ignored) in a git
    checkout; else every file of a checkout, or the project's packages of an installed copy;
    minus EXCLUDES."""
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if listed is not None:
        names = [n for n in listed.split("\0") if n]
    else:
        tops = [root] if is_checkout(root) or not any((root / p).is_dir() for p in PACKAGES) \
            else [root / p for p in PACKAGES if (root / p).is_dir()]
        names = [p.relative_to(root).as_posix() for top in tops for p in top.rglob("*")
                 if p.is_file()]
    return sorted(n for n in set(names) if not _excluded(n) and (root / n).is_file())


def tree_hash(root: Path, files: list[str] | None = None) -> str:
    """sha256 (64 hex digits) over each file's path and content digest, in path order."""
    h = hashlib.sha256()
    for rel in tree_files(root) if files is None else files:
        hash_file(h, rel, (root / rel).read_bytes())
    return h.hexdigest()


def hash_file(h, rel: str, data: bytes) -> None:
    """One file's part of `tree_hash` (for a caller that has the bytes in hand already)."""
    h.update(rel.encode() + b"\0")
    h.update(hashlib.sha256(data).digest())


def current_revision(root: Path | None = None) -> dict:
    """{git_sha, dirty, tree_hash, files} of the source tree ``root`` (default: this package's).
    Untracked files count as dirty: they are part of the tree that ran."""
    root = root or Path(__file__).resolve().parent.parent
    files = tree_files(root)
    sha = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain") if sha else None
    return {
        "git_sha": sha.strip() if sha else None,
        "dirty": None if status is None else bool(status.strip()),
        "tree_hash": tree_hash(root, files),
        "files": len(files),
    }
