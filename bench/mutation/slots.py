"""The driver's side of a run: copies of the tree (slots), and a mutant's compile check and
suite runs in one of them, a few slots at a time."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from mutation.child import _fails
from mutation.generate import GENERATOR_VERSION

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "mutation_score.py"  # started in a copy as the runner
SUITE = "m8-parity"
DEVICES = ("applegpu_g13s", "applegpu_g14s")
JOB_TIMEOUT_S = 900.0  # one device's suite run (the farm's default is an hour)
HARD_GRACE_S = 120.0  # past the job timeout, the driver kills the runner itself
DIGEST_DIRS = ("kernels", "suites", "devices", "dflash2", "farm", "pyproject.toml")

def _snapshot(dest: Path, rev: str = "HEAD") -> str:
    """The committed tree ``rev`` into ``dest``; returns the commit."""
    commit = subprocess.run(["git", "rev-parse", rev], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def tree_digest(tree: Path) -> str:
    h = hashlib.sha256(f"generator {GENERATOR_VERSION}\0".encode())
    for top in DIGEST_DIRS:
        p = tree / top
        files = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
        for q in files:
            if "__pycache__" in q.parts:
                continue
            h.update(str(q.relative_to(tree)).encode() + b"\0" + q.read_bytes())
    return h.hexdigest()[:16]


class Slot:
    """One copy of the tree and its own emulator build cache; one mutant at a time."""

    def __init__(self, work: Path, i: int, snapshot: Path, warm_mlx_metal: Path):
        self.tree = work / f"slot{i}" / "tree"
        self.cache = work / f"slot{i}" / "cache"
        shutil.copytree(snapshot, self.tree)
        (self.cache / "metal-emu").mkdir(parents=True)
        (self.cache / "mlx-metal").symlink_to(warm_mlx_metal)
        self.keep: set[str] = set()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.tree)
        env["DFLASH2_EMU_CACHE"] = str(self.cache)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("DFLASH2_DEVICE_ARCH", None)
        return env

    def remember_builds(self) -> None:
        """The builds of the unmutated tree stay; a mutant's are deleted after it."""
        self.keep = {p.name for p in (self.cache / "metal-emu").iterdir()}

    def forget_mutant_builds(self) -> None:
        for p in (self.cache / "metal-emu").iterdir():
            if p.name not in self.keep:
                with contextlib.suppress(OSError):
                    p.unlink()

    def runner(self, mode: str, job: dict, timeout: float) -> tuple[int | None, list[str], str]:
        """Run this script's runner ``mode`` in the copy: (rc or None on timeout, stdout
        lines, stderr tail)."""
        cmd = [sys.executable, str(SCRIPT), "--runner", mode, json.dumps(job)]
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, cwd=self.tree, env=self.env(), stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                rc = None
            out.seek(0)
            err.seek(0)
            return (rc, out.read().decode(errors="replace").splitlines(),
                    err.read().decode(errors="replace")[-3000:])


def _suite_spec(tree: Path, arch: str) -> dict:
    sys.path.insert(0, str(tree))
    from suites.manifest import load_manifest

    suite = load_manifest(tree / "suites" / "manifest.toml")[SUITE]
    return {"suite": SUITE, "pytest_args": suite.pytest_args(),
            "test_timeout": float(suite.timeout), "job_timeout": JOB_TIMEOUT_S,
            "device": {"arch": arch, "emulated": True}, "deselect": [], "attempt": 1, "env": {}}


def run_device(slot: Slot, spec: dict) -> dict:
    """One device's suite run: killed?, why, and the first failures."""
    t0 = time.monotonic()
    rc, lines, err = slot.runner("suite", {"spec": spec}, JOB_TIMEOUT_S + HARD_GRACE_S)
    out: dict = {"device": spec["device"]["arch"], "tests": 0, "failures": [],
                 "selected": [], "status": None}
    for line in lines:
        try:
            ev = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = ev.get("type")
        if kind == "mutation_runner":
            out["kernels"] = ev["kernels"]
        elif kind == "result":
            out["tests"] += 1
            for s in ev.get("selections") or []:
                if s.get("impl") == "metal-emulated" and s["variant"] not in out["selected"]:
                    out["selected"].append(s["variant"])
            if _fails(ev):
                msg = (ev.get("message") or "").strip().splitlines()
                out["failures"].append({"nodeid": ev["nodeid"], "outcome": ev["outcome"],
                                        "message": (msg[-1] if msg else "")[:400]})
        elif kind == "farm_job_end":
            out["status"] = ev["status"]
            out["error"] = (ev.get("error") or "")[:400] or None
    if rc is None:
        out["status"] = "driver-timeout"
    elif rc != 0 and out["status"] is None:
        out["status"] = f"runner exit {rc}: {err.strip()[-300:]}"
    out["stopped_early"] = any('"mutation_runner_stopped"' in line for line in lines)
    out["killed"] = bool(out["failures"]) or out["status"] not in ("completed",)
    out["wall_s"] = round(time.monotonic() - t0, 2)
    return out


def _first_error(message: str, tree: Path) -> str:
    """The compiler's first ``error:`` line, paths relative to the tree copy."""
    message = message.replace(str(tree) + "/", "")
    line = next((ln for ln in message.splitlines() if "error:" in ln), message.splitlines()[0])
    return " ".join(line.split())[:400]


def run_mutant(slot: Slot, m: dict, specs: dict[str, dict], tree_root: Path) -> dict:
    """Compile-check ``m`` in ``slot``'s copy, then the suite per device until one kills it."""
    t0 = time.monotonic()
    target = slot.tree / m["path"]
    original = target.read_text(encoding="utf-8")
    target.write_text(m["_file"], encoding="utf-8")
    res: dict = {"id": m["id"], "devices": []}
    try:
        rc, lines, err = slot.runner("compile", {"variants": m["variants"], "sha": m["sha"]},
                                     600)
        report = json.loads(lines[-1]) if lines else {}
        res["kernels"] = report.get("kernels")
        if rc == 3:
            res["compiles"] = False
            res["compile_error"] = "; ".join(
                f"{k}: {_first_error(v, slot.tree)}" for k, v in report["errors"].items())
        elif rc != 0:
            raise RuntimeError(f"compile check of {m['id']} failed (rc {rc}): "
                               f"{lines[-1:] or err[-500:]}")
        else:
            res["compiles"] = True
            if not Path(report["kernels"]).is_relative_to(slot.tree):
                raise RuntimeError(f"the copy's kernels were not imported: {report['kernels']}")
            for arch in DEVICES:
                dev = run_device(slot, specs[arch])
                res["devices"].append(dev)
                if not str(dev.get("kernels", "")).startswith(str(slot.tree)):
                    raise RuntimeError(f"suite run imported {dev.get('kernels')}, not the copy")
                if dev["killed"]:
                    break
            res["killed"] = any(d["killed"] for d in res["devices"])
            compile_fail = [f for d in res["devices"] for f in d["failures"]
                            if "does not compile" in f["message"] or "CompileError" in
                            f["message"]]
            if compile_fail and all(
                    f in compile_fail for d in res["devices"] for f in d["failures"]):
                res["compiles"] = False  # compiled at the check's shape, not the suite's
                res["compile_error"] = compile_fail[0]["message"]
    finally:
        target.write_text(original, encoding="utf-8")
        slot.forget_mutant_builds()
    res["wall_s"] = round(time.monotonic() - t0, 2)
    return res



def also_run(slot: Slot, label: str, spec: dict | None, pytest_args: list[str] | None) -> dict:
    """One extra check of the copy in ``slot``: a farm suite on both emulated devices, or plain
    pytest in the copy. Killed when anything fails."""
    if spec is not None:
        for arch in DEVICES:
            dev = run_device(slot, {**spec, "device": {"arch": arch, "emulated": True}})
            if dev["killed"]:
                f = dev["failures"][0] if dev["failures"] else {"nodeid": dev["status"],
                                                                "message": dev.get("error")}
                return {"killed": True, "why": f"{arch}: {f['nodeid']}: {f['message']}"[:400]}
        return {"killed": False, "why": ""}
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
           "-o", "addopts=", *pytest_args]
    env = slot.env()
    try:
        r = subprocess.run(cmd, cwd=slot.tree, env=env, capture_output=True, text=True,
                           timeout=JOB_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return {"killed": True, "why": f"timeout after {JOB_TIMEOUT_S:g} s"}
    if r.returncode not in (0, 1):
        raise RuntimeError(f"{label}: pytest exit {r.returncode}: {r.stdout[-800:]}")
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    return {"killed": r.returncode == 1, "why": (failed[0] if failed else "")[:400]}



def _slots(work: Path, snapshot: Path, jobs: int) -> list[Slot]:
    from kernels.metal_emu import mlx_metal

    warm = mlx_metal.extracted()  # MLX's Metal sources: fetched once, shared by the slots
    return [Slot(work, i, snapshot, warm) for i in range(max(1, jobs))]


def _in_slots(slots: list[Slot], fn) -> list:
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(slots)) as pool:
        return list(pool.map(fn, slots))


def _pool(slots: list[Slot], items: list[dict], fn):
    """(item, fn(slot, item)) as each finishes, one item per free slot at a time."""
    free, lock = list(slots), threading.Lock()

    def one(item: dict):
        with lock:
            slot = free.pop()
        try:
            return fn(slot, item)
        finally:
            with lock:
                free.append(slot)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(slots)) as pool:
        futures = {pool.submit(one, item): item for item in items}
        for fut in concurrent.futures.as_completed(futures):
            yield futures[fut], fut.result()
