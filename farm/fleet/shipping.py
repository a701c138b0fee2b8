"""What travels with a job: the driver's checkout as a Ray ``working_dir``, and its revision.

Every device runs exactly the driver's tree (sources, suites, expectations), not whatever is
installed on it. The revision recorded with the run names that tree: the git commit, whether the
checkout differed from it, and a sha256 over the files that were actually shipped, so two dirty
checkouts of one commit are told apart.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from farm.errors import EXIT_USAGE, FarmError

# gitignore-style patterns (Ray's `excludes`): VCS data, virtualenvs, databases, bench output.
EXCLUDES = [".git", ".venv", "venv", "*.db", "*.db-wal", "*.db-shm", "*.sqlite",
            "__pycache__", "*.pyc", "bench/results", ".pytest_cache", ".ruff_cache",
            "*.egg-info", ".wheels", "wheels"]
PROJECT_MARKER = 'name = "dflash2-farm"'


def _is_checkout(d: Path) -> bool:
    try:
        return PROJECT_MARKER in (d / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return False


def find_root(start: Path | None = None) -> Path:
    """The checkout to ship: the one around ``start`` (the cwd), else this package's own."""
    start = (start or Path.cwd()).resolve()
    for d in (start, *start.parents):
        if _is_checkout(d):
            return d
    here = Path(__file__).resolve().parent.parent
    if _is_checkout(here):
        return here
    raise FarmError(f"no dflash2-farm checkout at or above {start}: run farm from the "
                    f"repository so its tree can be shipped", EXIT_USAGE)


def runtime_env(staged: Path) -> dict:
    """The job-level runtime_env for ``ray.init``: working dir = a ``staged`` copy."""
    return {"working_dir": str(staged), "excludes": list(EXCLUDES)}


@contextlib.contextmanager
def staged_tree(root: Path) -> Iterator[Path]:
    """A temporary copy of exactly the files ``shipped_files`` names, for Ray to upload.

    Ray's own working-dir filter honours .gitignore but not .git/info/exclude or untracked
    files' status, so pointing it at the checkout could ship what the revision does not
    describe (a 170 MB wheel directory, say); a copy of the listed files cannot.
    """
    tmp = Path(tempfile.mkdtemp(prefix="farm-ship-"))
    try:
        for rel in shipped_files(root):
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dst)
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


def shipped_files(root: Path) -> list[str]:
    """Relative paths of the files that travel: git's view (tracked + untracked not ignored,
    as Ray honours .gitignore) when ``root`` is a git checkout, else a walk; minus EXCLUDES."""
    listed = _git(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    if listed is not None:
        names = [n for n in listed.split("\0") if n]
    else:
        names = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted(n for n in set(names) if not _excluded(n) and (root / n).is_file())


def revision(root: Path) -> dict:
    """{git_sha, dirty, tree_hash, files} of the tree shipped from ``root``."""
    h = hashlib.sha256()
    files = shipped_files(root)
    for rel in files:
        h.update(rel.encode() + b"\0")
        h.update(hashlib.sha256((root / rel).read_bytes()).digest())
    sha = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain") if sha else None
    return {
        "git_sha": sha.strip() if sha else None,
        "dirty": None if status is None else bool(status.strip()),
        "tree_hash": h.hexdigest(),
        "files": len(files),
        "root": str(root),
    }
