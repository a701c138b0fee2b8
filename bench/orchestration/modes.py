"""The commands the orchestration bench times, one function a mode, each returning its wall
clock and what its output says (tests, session time, exit status): the raw figures the report
derives its comparisons from."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from orchestration.common import (
    _XDIST_ENV,
    ARCHES,
    FARM,
    PY,
    REPO,
    SCRIPT,
    SELECTORS,
    clean_env,
    timed,
)

_SUMMARY = re.compile(r"(\d+) passed.* in ([\d.]+)s")


def plain_cmd(suite, arch: str) -> list[str]:
    return [PY, "-m", "pytest", *suite.pytest_args(), "--device-arch", arch, "-q"]


def parse_summary(text: str, what: str) -> tuple[int, float]:
    m = None
    for m in _SUMMARY.finditer(text):
        pass
    if m is None:
        raise RuntimeError(f"{what}: no pytest summary line in output:\n{text[-3000:]}")
    return int(m.group(1)), float(m.group(2))


# -- modes ------------------------------------------------------------------------------------

def mode_plain(suite, arch: str) -> dict:
    wall, out = timed(plain_cmd(suite, arch), clean_env())
    if out.returncode not in (0, 1):
        raise RuntimeError(f"plain pytest {arch} exit {out.returncode}: {out.stdout[-3000:]}")
    n, span = parse_summary(out.stdout, f"pytest {arch}")
    return {"wall": wall, "tests": n, "span": span, "rc": out.returncode}


def mode_sequential(suite) -> dict:
    t0 = time.perf_counter()
    per = {arch: mode_plain(suite, arch) for arch in ARCHES}
    return {"wall": time.perf_counter() - t0, "per_device": per,
            "tests": sum(p["tests"] for p in per.values())}


def mode_concurrent(suite) -> dict:
    t0 = time.perf_counter()
    procs = {a: subprocess.Popen(plain_cmd(suite, a), cwd=REPO, env=clean_env(), text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
             for a in ARCHES}
    per = {}
    for a, p in procs.items():
        text, _ = p.communicate(timeout=600)
        per[a] = {"end": time.perf_counter() - t0, "rc": p.returncode}
        per[a]["tests"], per[a]["span"] = parse_summary(text, f"concurrent pytest {a}")
    return {"wall": time.perf_counter() - t0, "per_device": per,
            "tests": sum(p["tests"] for p in per.values()),
            "span_max": max(p["span"] for p in per.values())}


def mode_xdist(suite) -> dict:
    log = Path(tempfile.mkdtemp(prefix="bench-xdist-"))
    env = clean_env(**{_XDIST_ENV: ",".join(ARCHES), "BENCH_XDIST_LOG": str(log),
                       "PYTHONPATH": os.pathsep.join(
                           p for p in (str(REPO / "bench"), os.environ.get("PYTHONPATH")) if p)})
    cmd = [PY, "-m", "pytest", *suite.pytest_args(), "-n", str(len(ARCHES)), "--dist", "each",
           "-p", "bench_orchestration", "-q"]
    try:
        wall, out = timed(cmd, env)
        workers = {f.name: f.read_text() for f in sorted(log.iterdir())}
    finally:
        shutil.rmtree(log, ignore_errors=True)
    if out.returncode not in (0, 1):
        raise RuntimeError(f"xdist exit {out.returncode}: {out.stdout[-3000:]}")
    n, span = parse_summary(out.stdout, "xdist")
    if sorted(workers.values()) != sorted(ARCHES):
        raise RuntimeError(f"xdist workers did not emulate one device each: {workers}")
    return {"wall": wall, "tests": n, "span": span, "workers": workers, "rc": out.returncode}


def farm_cmd(suite_name: str, db: Path, address: str | None, devices: str = SELECTORS,
             ) -> list[str]:
    cmd = [*FARM, "run", "--suite", suite_name, "--devices", devices, "--db", str(db), "--json"]
    return cmd + (["--address", address] if address else [])


def check_farm(out: subprocess.CompletedProcess, what: str) -> dict:
    try:
        run = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise RuntimeError(f"{what}: no JSON (exit {out.returncode}): {out.stderr[-3000:]}") from None
    bad = [(j["device"]["arch"], j["status"], j["error"]) for j in run["jobs"]
           if j["status"] not in ("passed", "failed")]
    if bad or out.returncode not in (0, 1):
        raise RuntimeError(f"{what}: exit {out.returncode}, jobs {bad}: {out.stderr[-2000:]}")
    return run


def mode_farm(suite_name: str, env: dict[str, str], address: str | None,
              probe: Path | None = None, db: Path | None = None, what: str = "",
              devices: str = SELECTORS) -> dict:
    """One `farm run`; ``db``: a history kept across runs (a user's second run has one), else a
    new one for this run."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-farm-"))
    try:
        cmd = farm_cmd(suite_name, db or tmp / "h.db", address, devices)
        if probe is not None:  # the `farm` command (farm.cli.app.script), its phases timed
            cmd = [PY, str(SCRIPT), "--_probe", str(probe), "--", *cmd[3:]]
            env = {**env, "BENCH_T0": repr(time.time())}
        wall, out = timed(cmd, env)
        run = check_farm(out, f"farm run ({what or ('cluster' if address else 'embedded')})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"wall": wall, "driver_seconds": run["seconds"], "rc": out.returncode,
            "tests": sum(sum(j["counts"].values()) for j in run["jobs"]),
            "jobs": {j["device"]["arch"]: j["status"] for j in run["jobs"]}}


def mode_device_job(suite, arch: str, extra_env: dict[str, str]) -> dict:
    """farm.runner.device_job.run_job in this process (no Ray): the farm's device side alone, with the
    plain pytest run of the same device just before it (a pair, so load drift hits both)."""
    from farm.fleet import shipping
    from farm.runner import device_job

    plain = mode_plain(suite, arch)
    spec = {"suite": suite.name, "pytest_args": suite.pytest_args(),
            "test_timeout": suite.timeout, "job_timeout": 3600.0,
            "device": {"arch": arch, "emulated": True}, "deselect": [], "attempt": 1, "env": {}}
    saved = {k: os.environ.get(k) for k in extra_env}
    os.environ.update(extra_env)
    try:
        with shipping.as_run_worker(REPO):  # a device job runs a copy of its run's tree
            t0 = time.perf_counter()
            evs = [e for batch in device_job.run_job(spec) for e in batch]
            wall = time.perf_counter() - t0
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    end = next(e for e in evs if e["type"] == "farm_job_end")
    if end["status"] != "completed":
        raise RuntimeError(f"device job: {end}")
    t = {e["type"]: e["time"] for e in evs if e["type"] in ("session_start", "session_finish",
                                                             "farm_job_start")}
    n = sum(1 for e in evs if e["type"] == "result")
    span = t["session_finish"] - t["session_start"]
    return {"wall": wall, "tests": n, "span": span, "plain_wall": plain["wall"],
            "plain_span": plain["span"], "job_start_to_session": t["session_start"]
            - t["farm_job_start"],
            "per_test_ms_in_session": (span - plain["span"]) / n * 1000}
