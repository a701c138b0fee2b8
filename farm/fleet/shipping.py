"""What travels with a job: the driver's checkout as a Ray ``working_dir``, and its revision.

Every device runs exactly the driver's tree (sources, suites, expectations), not whatever is
installed on it. The revision recorded with the run names that tree: the git commit, whether the
checkout differed from it, and a sha256 over the files that were actually shipped, so two dirty
checkouts of one commit are told apart.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from db.revision import EXCLUDES, current_revision, hash_file, is_checkout, tree_files, tree_hash
from farm.errors import EXIT_USAGE, FarmError
from farm.tempdirs import owned_tmpdir

# In the staged copy only: {"run", "files", "tree_hash"}. It makes each run's package unique
# and lets a device check that the tree it is about to run is this run's, whole.
RUN_MARK = ".farm-run-id"
ENV_TREE = "FARM_RUN_TREE"  # the run's mark id, set on every worker of the run (runtime_env)
COPY_WAIT_S = 60.0  # how long a device waits for Ray to finish unpacking the run's tree


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
    so they reach devices that do not share the driver's environment; and the run's tree mark
    (``ENV_TREE``), by which a device finds and checks its copy of the tree (`job_tree`)."""
    return {"working_dir": str(staged), "excludes": list(EXCLUDES),
            "env_vars": {**(env or {}), ENV_TREE: read_mark(staged)["run"]}}


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
        mark = {"run": uuid.uuid4().hex, "files": files, "tree_hash": tree_hash(tmp, files)}
        (tmp / RUN_MARK).write_text(json.dumps(mark) + "\n")
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def as_run_worker(root: Path) -> Iterator[Path]:
    """This process as a Ray worker of a run that ships ``root``: its cwd is the run's staged
    tree (Ray's working dir) and its environment carries the run's mark (Ray's env_vars). This
    is what runs a device job without Ray (benches, tests); both are restored on exit."""
    cwd, before = os.getcwd(), os.environ.get(ENV_TREE)
    with staged_tree(root) as staged:
        os.chdir(staged)
        os.environ[ENV_TREE] = read_mark(staged)["run"]
        try:
            yield staged
        finally:
            os.chdir(cwd)
            if before is None:
                os.environ.pop(ENV_TREE, None)
            else:
                os.environ[ENV_TREE] = before


def read_mark(tree: Path) -> dict | None:
    """The run mark of a staged tree (or of a device's copy of one), None when it has none."""
    try:
        mark = json.loads((tree / RUN_MARK).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) and isinstance(mark.get("files"), list) else None


def job_tree(dest: Path, run: str | None = None, wait_s: float | None = None) -> Path:
    """A private copy, at ``dest``, of run ``run``'s tree (default: ``ENV_TREE``), checked
    file by file against its mark; what a device job or health check runs in.

    Ray starts the run's workers in its unpacked working dir, but may unpack it again under them:
    its agent re-creates a runtime env whose references fell to zero with ``overwrite=True``
    (rmtree, then unzip: ``download_and_unpack_package`` in the Ray we pin). A worker then has no
    cwd, and for a while the directory holds part of the tree; a job run there runs whatever is
    there (a CI run lost a suite file so). A copy taken while the unpacking is under way fails
    its check and is taken again, until ``wait_s`` (default ``COPY_WAIT_S``) has passed: then
    one clear error.
    """
    run = run or os.environ.get(ENV_TREE)
    if not run:
        raise FarmError(f"this job does not know its run's tree ({ENV_TREE} is not set): "
                        f"device jobs are started by `farm run`", EXIT_USAGE)
    wait_s = COPY_WAIT_S if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    while True:
        problem = _copy_run_tree(dest, run)
        if problem is None:
            return dest
        if time.monotonic() >= deadline:
            raise FarmError(f"run {run[:12]}'s tree is not whole on this node after "
                            f"{wait_s:g}s: {problem}")
        time.sleep(0.25)


def _copy_run_tree(dest: Path, run: str) -> str | None:
    """Copy run ``run``'s tree into ``dest``; None when the copy is whole, else what is wrong."""
    sources = []
    with contextlib.suppress(OSError):  # the cwd is gone while Ray re-creates it
        sources.append(Path.cwd())
    sources.append(Path(__file__).resolve().parents[2])  # the tree this module came from
    marks = {src: read_mark(src) for src in sources}
    src = next((s for s, m in marks.items() if m and m.get("run") == run), None)
    if src is None:
        return ("no copy of it at " + " or ".join(
            f"{s} ({'mark of run ' + m['run'][:12] if m else 'no mark'})"
            for s, m in marks.items()))
    shutil.rmtree(dest, ignore_errors=True)
    h, made = hashlib.sha256(), set()
    try:  # one read of each file: copied, and hashed as copied (`tree_hash`)
        for rel in marks[src]["files"]:
            data = (src / rel).read_bytes()
            out = dest / rel
            if out.parent not in made:
                out.parent.mkdir(parents=True, exist_ok=True)
                made.add(out.parent)
            out.write_bytes(data)
            hash_file(h, rel, data)
        (dest / RUN_MARK).write_text(json.dumps(marks[src]) + "\n")
    except OSError as e:
        return f"{src}: {e.strerror or e}: {getattr(e, 'filename', '') or ''}".rstrip(": ")
    if h.hexdigest() != marks[src]["tree_hash"]:
        return f"{src}: its files differ from the ones the run shipped"
    return None


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
