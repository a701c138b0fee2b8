"""What travels with a job: the driver's checkout as a Ray ``working_dir``, and its revision.

Every device runs exactly the driver's tree (sources, suites, expectations), not whatever is
installed on it. The revision recorded with the run names that tree: the git commit, whether the
checkout differed from it, and a sha256 over the files that were actually shipped, so two dirty
checkouts of one commit are told apart.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from db.revision import EXCLUDES, current_revision, is_checkout, tree_files
from farm.errors import EXIT_USAGE, FarmError
from farm.tempdirs import owned_tmpdir

RUN_MARK = ".farm-run-id"  # in the staged copy only: makes each run's package unique


def find_root(start: Path | None = None) -> Path:
    """The checkout to ship: the one around ``start`` (the cwd), else this package's own."""
    start = (start or Path.cwd()).resolve()
    for d in (start, *start.parents):
        if is_checkout(d):
            return d
    here = Path(__file__).resolve().parent.parent
    if is_checkout(here):
        return here
    raise FarmError(f"no dflash2-farm checkout at or above {start}: run farm from the "
                    f"repository so its tree can be shipped", EXIT_USAGE)


def runtime_env(staged: Path, env: dict[str, str] | None = None) -> dict:
    """The job-level runtime_env for ``ray.init``: working dir = a ``staged`` copy, and the
    run's ``DFLASH2_*`` variables (`dflash2.runtime_context.dispatch_env`) set on every worker,
    so they reach devices that do not share the driver's environment."""
    out: dict = {"working_dir": str(staged), "excludes": list(EXCLUDES)}
    if env:
        out["env_vars"] = dict(env)
    return out


@contextlib.contextmanager
def staged_tree(root: Path) -> Iterator[Path]:
    """A temporary copy of exactly the files ``shipped_files`` names, for Ray to upload.

    Ray's own working-dir filter honours .gitignore but not .git/info/exclude or untracked
    files' status, so pointing it at the checkout could ship what the revision does not
    describe (a 170 MB wheel directory, say); a copy of the listed files cannot.
    """
    files = shipped_files(root)
    check_upload_size(root, files)
    tmp = owned_tmpdir("farm-ship-")
    try:
        for rel in files:
            dst = tmp / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dst)
        # A run's package is its own. Ray names a working_dir package by its content hash and
        # reuses one already in the cluster: two runs of one tree would share it, and when the
        # first run's driver exits, its nodes delete the unpacked copy (and, after
        # RAY_RUNTIME_ENV_TEMPORARY_REFERENCE_EXPIRATION_S, the GCS its zip) under the second
        # (ray-project/ray#36703, #46625): tests vanish mid-job, a warm fleet fails an hour on.
        # The tree hash recorded with the run is taken from ``root``, not from this copy.
        (tmp / RUN_MARK).write_text(uuid.uuid4().hex + "\n")
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def shipped_files(root: Path) -> list[str]:
    """The files that travel: the same list the tree hash covers (`db.revision.tree_files`)."""
    return tree_files(root)


def revision(root: Path) -> dict:
    """{git_sha, dirty, tree_hash, files, root} of the tree shipped from ``root``: the same
    algorithm a local `pytest --farm-db` records (`db.revision.current_revision`)."""
    return {**current_revision(root), "root": str(root)}


def upload_cap() -> int:
    """Ray's limit on a zipped working_dir: its gRPC message cap (``RAY_max_grpc_message_size``,
    512 MiB by default in the Ray we pin), read as Ray reads it."""
    return int(os.environ.get("RAY_max_grpc_message_size") or 512 * 1024 * 1024)


def check_upload_size(root: Path, files: list[str]) -> None:
    """Refuse, before any cluster work, a tree Ray could not upload, naming what to leave out;
    Ray itself would fail only after the fleet started, with the limit and no culprit. The
    zipped size is what counts: it is measured only when the raw size exceeds the cap."""
    cap = upload_cap()
    sizes = {rel: (root / rel).stat().st_size for rel in files}
    if sum(sizes.values()) < cap:
        return
    import tempfile
    import zipfile

    with tempfile.TemporaryFile() as f:
        with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as z:
            for rel in files:
                z.write(root / rel, rel)
        zipped = f.tell()
    if zipped < cap:
        return
    top = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    raise FarmError(f"the tree to ship from {root} zips to {_size(zipped)}, over Ray's upload "
                    f"cap of {_size(cap)}; largest: "
                    + ", ".join(f"{rel} ({_size(n)})" for rel, n in top)
                    + ": add them to .gitignore (untracked) or move them out of the checkout",
                    EXIT_USAGE)


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 2**10:.0f} KiB"
