#!/usr/bin/env python
"""Orchestration benchmark: what `farm run` costs against plain pytest, in one run.

Modes, each timed as wall clock from process start to process end (median of --reps):

1. ``plain``       plain ``pytest SUITE --device-arch applegpu_g13s`` on one emulated device.
2. ``sequential``  the same for g13s, g14g and g15s one after another (each run alone is also
                   the "single device" time; the slowest of the three is the reference).
3. ``concurrent``  the three device runs as three pytest processes started together: what a
                   user gets from "run them in parallel" without the farm.
   ``xdist``       ``pytest -n 3 --dist each`` with this file loaded as a plugin (``-p``) that
                   gives worker gwN its own emulated device before the suites plugin reads it:
                   xdist's own way to run a whole suite once per worker. (Plain ``-n 3``
                   would split one device's tests over the workers, not run three devices.)
                   The controller classifies expectations for its own (plain CPU) device, so
                   only its timing is comparable, not its summary.
4. ``farm-embedded`` ``farm run --suite S --devices g13s,g14g,g15s --db TMP`` (embedded fleet:
                   Ray started and torn down inside the run).
5. ``farm-cluster``  the same with ``--address`` against a loopback cluster (``farm head`` plus
                   three ``farm agent --emulate`` nodes, token auth, own port block, started as
                   tests/ray_cluster.py does); the cluster's start and stop are timed apart.
6. ``farm-warm``   the same with no address while a warm fleet is up (``farm fleet up
                   --devices ...`` once, in a state directory of the bench's own, so no other
                   `farm run` on the host attaches to it): every run attaches; the fleet's up
                   and down are timed apart. ``farm-embedded`` runs with an empty state
                   directory of its own: it never attaches to a warm fleet.
7. ``farm-embedded-1``, ``farm-warm-1``  the same two with one device (g13s): set beside
                   ``plain`` on that device, the farm's own fixed cost with nothing else
                   competing for the two cores.

Derived figures (see the report): ratio of farm wall to the slowest single device; fixed cost
(farm wall minus the slowest single device); per-test overhead (the farm's pytest sessions
against plain pytest sessions under the same concurrency, per test); and, from one instrumented
`farm run` per farm mode (farm.cli.app.script in a subprocess with its phases wrapped in timers), where
the time goes.

Start-up figures (the "Start-up" section): for each farm mode, fixed cost = its wall minus plain
pytest doing the same work at the same concurrency (``plain`` for one device, ``concurrent`` for
three), paired per round; beside it the wall minus plain pytest on the slowest single device (from
``sequential``); and the time from the process start to the first test's result (the device's
own clock), all from the same run of this script. ``--modes`` runs a subset (e.g. ``plain,sequential,
farm-embedded,farm-warm`` for the start-up figures alone).

Never run as a unit test: ``python bench/bench_orchestration.py [--suite m8-parity] [--reps 3]``.
Writes bench/results/orchestration.json and bench/results/orchestration.md.
"""

from __future__ import annotations

import os

# -- xdist plugin part: loaded with ``-p bench_orchestration`` inside pytest workers ----------
# (kept at the top and stdlib-only: it runs at import, before the suites plugin reads the arch)
_XDIST_ENV = "BENCH_XDIST_ARCHES"
if os.environ.get(_XDIST_ENV) and os.environ.get("PYTEST_XDIST_WORKER", "").startswith("gw"):
    _arches = os.environ[_XDIST_ENV].split(",")
    os.environ["DFLASH2_DEVICE_ARCH"] = _arches[int(os.environ["PYTEST_XDIST_WORKER"][2:])
                                                % len(_arches)]


def pytest_sessionstart(session):
    log = os.environ.get("BENCH_XDIST_LOG")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if log and worker:
        from devices.identity import current_device

        with open(os.path.join(log, worker), "w", encoding="utf-8") as f:
            f.write(current_device().arch)


# -- the benchmark ----------------------------------------------------------------------------
import argparse
import atexit
import contextlib
import datetime
import json
import platform
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "bench" / "results"
PY = sys.executable
ARCHES = ("applegpu_g13s", "applegpu_g14g", "applegpu_g15s")
SELECTORS = "g13s,g14g,g15s"
FARM = [PY, "-c", "from farm.cli.app import script; script()"]
CLUSTER_BASE_PORT = 16000  # head 16000.., agents +300 each; below the ephemeral range, clear
#                            of tests/ray_cluster.py's blocks (20000 + 2000 per xdist worker)
TARGET_RATIO, TARGET_FIXED_S, TARGET_PER_TEST_MS = 1.2, 6.0, 2.0
TARGET_FIRST_TEST_S, TARGET_WARM_FIXED_S = 6.0, 2.0  # embedded: first test; warm: fixed cost
MODES = ("plain", "sequential", "concurrent", "xdist", "device-job", "farm-embedded",
         "farm-cluster", "farm-warm", "farm-embedded-1", "farm-warm-1")
ONE = "g13s"  # the single-device farm modes' device: the same one ``plain`` runs
# farm mode -> (its devices, the plain mode that does the same work with the same concurrency)
FARM_MODES = {"farm-embedded": (SELECTORS, "concurrent"), "farm-cluster": (SELECTORS, "concurrent"),
              "farm-warm": (SELECTORS, "concurrent"), "farm-embedded-1": (ONE, "plain"),
              "farm-warm-1": (ONE, "plain")}
_SUMMARY = re.compile(r"(\d+) passed.* in ([\d.]+)s")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", _XDIST_ENV,
                        "DFLASH2_DEVICE_ARCH", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS",
                        "FARM_STATE_DIR")}
    env.update(extra)
    return env


def addopts_workaround() -> dict[str, str]:
    """pyproject's pytest addopts name an xdist option (``--dist``); the farm's device jobs run
    pytest with plugin autoload off, where that option does not exist and every job ends in a
    usage error. The farm modes then run with ``PYTEST_ADDOPTS=-o addopts=`` (ini addopts off,
    nothing else changed) in the environment their device processes inherit; reported."""
    import tomllib

    opts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"].get("addopts", "")
    return {"PYTEST_ADDOPTS": "-o addopts="} if "--dist" in opts or "-n" in opts.split() else {}


def timed(cmd: list[str], env: dict[str, str], timeout: float = 600) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=timeout, check=False)
    return time.perf_counter() - t0, out


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
            cmd = [PY, str(Path(__file__).resolve()), "--_probe", str(probe), "--", *cmd[3:]]
            env = {**env, "BENCH_T0": repr(time.time())}
        wall, out = timed(cmd, env)
        run = check_farm(out, f"farm run ({what or ('cluster' if address else 'embedded')})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {"wall": wall, "driver_seconds": run["seconds"], "rc": out.returncode,
            "tests": sum(sum(j["counts"].values()) for j in run["jobs"]),
            "jobs": {j["device"]["arch"]: j["status"] for j in run["jobs"]}}


# -- the instrumented farm run (a subprocess: python bench_orchestration.py --_probe FILE -- ..)

def _probe_main(out_path: str, argv: list[str]) -> None:
    t0 = float(os.environ.pop("BENCH_T0", time.time()))
    marks: list[tuple[str, float]] = [("spawn", t0), ("main_module", time.time())]
    events: list[dict] = []
    extra: dict = {}

    def mark(name: str) -> None:
        marks.append((name, time.time()))

    def dump() -> None:
        mark("atexit")
        Path(out_path).write_text(json.dumps({"marks": marks, "events": events, **extra}))

    atexit.register(dump)
    import db
    import farm.cli.app
    from farm import quick_exit

    real_end = quick_exit.end

    def end(code: int) -> None:  # the CLI's os._exit skips atexit: the marks are written first
        if quick_exit.ACTIVE:
            dump()
        real_end(code)
    quick_exit.end = end
    from farm.fleet import cluster, embedded, health, shipping, warm
    from farm.runner import driver as frun
    mark("imports")

    def wrap(mod, name: str) -> None:
        fn = getattr(mod, name)

        def inner(*a, **k):
            mark(name + ":start")
            try:
                res = fn(*a, **k)
            finally:
                mark(name + ":end")
            if name == "check_devices":
                extra["health"] = [{"seconds": r.get("seconds"), "ok": r.get("ok"),
                                    "task_started": r.get("time")}
                                   for r in res.values()]
            return res
        setattr(mod, name, inner)

    def wrap_cm(mod, name: str) -> None:
        fn = getattr(mod, name)

        @contextlib.contextmanager
        def inner(*a, **k):
            mark(name + ":enter")
            with fn(*a, **k) as v:
                mark(name + ":entered")
                try:
                    yield v
                finally:
                    mark(name + ":exit")
            mark(name + ":exited")
        setattr(mod, name, inner)

    for mod, name in ((db, "open_history"), (shipping, "revision"), (cluster, "connect"),
                      (cluster, "disconnect"), (health, "check_devices"), (warm, "attach")):
        wrap(mod, name)
    wrap_cm(shipping, "staged_tree")
    wrap_cm(embedded, "embedded_fleet")
    d = frun.Driver
    orig_take, orig_dispatch, orig_loop, orig_reg, orig_run = (
        d.take, d.dispatch, d.loop, d.regressions, d.run)

    def take(self, i, batch):
        now = time.time()
        for ev in batch:
            if ev.get("type") in ("farm_job_start", "session_start", "session_finish",
                                  "farm_job_end", "result"):
                events.append({"job": i, "type": ev["type"], "time": ev.get("time"),
                               "received": now})
        t = time.perf_counter()
        orig_take(self, i, batch)
        extra["ingest_s"] = extra.get("ingest_s", 0.0) + time.perf_counter() - t

    def dispatch(self, i, device):
        events.append({"job": i, "type": "dispatch", "time": time.time(), "received": None})
        return orig_dispatch(self, i, device)

    def timed_method(orig, name):
        def inner(self, *a, **k):
            mark(name + ":start")
            try:
                return orig(self, *a, **k)
            finally:
                mark(name + ":end")
        return inner

    d.take, d.dispatch = take, dispatch
    d.loop, d.regressions, d.run = (timed_method(orig_loop, "loop"),
                                    timed_method(orig_reg, "regressions"),
                                    timed_method(orig_run, "driver_run"))
    sys.argv = ["farm", *argv]
    farm.cli.app.script()


def profile_phases(probe: dict, wall: float) -> dict:
    """Phases of one instrumented farm run, in seconds, along its critical path."""
    m: dict[str, float] = {}
    for name, t in probe["marks"]:
        m.setdefault(name, t)
    t0 = m["spawn"]
    ev = probe["events"]
    jobs = sorted({e["job"] for e in ev})

    def first(job: int, kind: str, key: str = "time") -> float | None:
        vals = [e[key] for e in ev if e["job"] == job and e["type"] == kind and e[key]]
        return min(vals) if vals else None

    def last(job: int, kind: str, key: str = "time") -> float | None:
        vals = [e[key] for e in ev if e["job"] == job and e["type"] == kind and e[key]]
        return max(vals) if vals else None

    per_job = {}
    for j in jobs:
        per_job[j] = {
            "dispatch_to_job_start": first(j, "farm_job_start") - first(j, "dispatch"),
            "job_start_to_session_start": first(j, "session_start") - first(j, "farm_job_start"),
            "session_start_to_first_result": first(j, "result") - first(j, "session_start"),
            "session_span": first(j, "session_finish") - first(j, "session_start"),
            "session_finish_to_received_end": last(j, "farm_job_end", "received")
            - first(j, "session_finish"),
            "result_delivery_lag_max": max(e["received"] - e["time"] for e in ev
                                           if e["job"] == j and e["type"] == "result"),
        }
    crit = max(jobs, key=lambda j: last(j, "farm_job_end", "received"))
    fleet_start = (m.get("embedded_fleet:entered", m["connect:start"])
                   - m.get("embedded_fleet:enter", m["connect:start"]))
    # The embedded fleet connects the driver as soon as its head is up (inside the fleet's
    # start): that part of the start is counted as ray.init, once.
    connect_s = m["connect:end"] - m["connect:start"]
    inside = m.get("embedded_fleet:enter", m["connect:end"]) <= m["connect:start"] <= m.get(
        "embedded_fleet:entered", m["connect:start"])
    fleet_start -= connect_s if inside else 0.0
    ready = max(m["connect:end"], m.get("embedded_fleet:entered", m["connect:end"]))
    # An embedded fleet's checks ran beside its start (started before check_devices was called):
    # what is left of them is the wait inside check_devices.
    h_start = max(max((h["task_started"] for h in probe.get("health") or []
                       if h.get("task_started")), default=m["check_devices:start"]),
                  m["check_devices:start"])
    staged_in = m["staged_tree:entered"] - m["staged_tree:enter"]
    teardown_end = m.get("staged_tree:exited", m["atexit"])
    phases = {
        "interpreter + farm.cli.app imports": m["imports"] - t0,
        "open history (SQLite, migrations)": m["open_history:end"] - m["open_history:start"],
        "revision (hash of shipped files, git)": m["revision:end"] - m["revision:start"],
        "stage tree copy": staged_in,
        "warm fleet: read state, check keeper and GCS": m.get("attach:end", 0)
        - m.get("attach:start", 0),
        "embedded Ray fleet start (a node per device, the first the head; ray.init aside)": fleet_start,
        "ray.init + working_dir package/upload": connect_s,
        "list devices, start run": m["check_devices:start"] - ready,
        "health: task scheduled -> running on node (Ray worker start, working_dir; 0 where the check ran here beforehand)":
            h_start - m["check_devices:start"],
        "health: check subprocess (MLX import + golden QMM) and return":
            m["check_devices:end"] - h_start,
        "dispatch -> job start on node (worker, working_dir)":
            per_job[crit]["dispatch_to_job_start"],
        "job start -> pytest session start (pytest + MLX import)":
            per_job[crit]["job_start_to_session_start"],
        "pytest session (collection + tests), slowest job": per_job[crit]["session_span"],
        "session finish -> driver has job end": per_job[crit]["session_finish_to_received_end"],
        "loop end -> regression check": m["regressions:end"] - m["loop:end"],
        "teardown (ray shutdown, cluster stop, staged tree)": teardown_end - m["regressions:end"],
        "process exit": t0 + wall - m["atexit"],
    }
    accounted = sum(phases.values())
    # what lies between the named phases (loop start after dispatch, printing the summary, ..)
    phases["other (between phases)"] = wall - accounted
    results = [e["time"] for e in ev if e["type"] == "result" and e["time"]]
    sessions = [e["time"] for e in ev if e["type"] == "session_start" and e["time"]]
    return {"phases": {k: round(v, 3) for k, v in phases.items()},
            "first_test_s": round(min(results) - t0, 3) if results else None,
            "first_session_s": round(min(sessions) - t0, 3) if sessions else None,
            "per_job": {str(j): {k: round(v, 3) for k, v in pj.items()}
                        for j, pj in per_job.items()},
            "health_seconds": probe.get("health"), "ingest_s": round(probe.get("ingest_s", 0), 3),
            "session_span_max": round(max(p["session_span"] for p in per_job.values()), 3)}


# -- the loopback cluster ---------------------------------------------------------------------

class Cluster:
    """head + three `farm agent --emulate` nodes, as tests/ray_cluster.py starts them, on a port
    block of this benchmark's own; every process in a new session, killed by its group id."""

    def __init__(self, extra_env: dict[str, str]):
        sys.path.insert(0, str(REPO / "tests"))
        import ray_cluster

        self.rc = ray_cluster
        base = CLUSTER_BASE_PORT
        self.c = ray_cluster.FarmCluster(address=f"127.0.0.1:{base}",
                                         token=secrets.token_hex(32), base=base,
                                         temp_dir=Path(tempfile.mkdtemp(prefix="benchray-",
                                                                        dir="/tmp")))
        self.extra = extra_env
        self.times: dict[str, float] = {}

    def start(self) -> None:
        rc, c = self.rc, self.c
        t0 = time.perf_counter()
        head = rc._start(c, [*FARM, "head", "--port", str(c.base), "--num-cpus", "1",
                             "--object-store-mb", "100", "--temp-dir", str(c.temp_dir)],
                         self.extra)
        c.groups["head"] = head.pid
        rc._wait(head, "farm head")
        self.times["head"] = time.perf_counter() - t0
        for arch in ARCHES:  # one at a time, as the tests do (concurrent joins fail here)
            t = time.perf_counter()
            c.add_agent(arch, arch, **self.extra)
            self.times["agent " + arch] = time.perf_counter() - t
        self.times["total"] = time.perf_counter() - t0

    def env(self) -> dict[str, str]:
        return {**clean_env(**self.extra), "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.c.token}

    def stop(self) -> float:
        t0 = time.perf_counter()
        self.rc.stop_cluster(self.c)  # kills exactly our process groups; never `ray stop`
        return time.perf_counter() - t0


class Warm:
    """`farm fleet up` / `farm fleet down` with a state directory of the bench's own."""

    address = None  # `farm run` attaches through the state directory, not an address

    def __init__(self, extra_env: dict[str, str], devices: str = SELECTORS):
        self.state = Path(tempfile.mkdtemp(prefix="bench-warm-"))
        self.extra, self.devices = extra_env, devices
        self.up_s = self.down_s = None
        self.info: dict | None = None

    def env(self) -> dict[str, str]:
        return clean_env(**self.extra, FARM_STATE_DIR=str(self.state))

    def start(self) -> None:
        t0 = time.perf_counter()
        _wall, out = timed([*FARM, "fleet", "up", "--devices", self.devices, "--json"],
                           self.env())
        if out.returncode != 0:
            raise RuntimeError(f"farm fleet up: exit {out.returncode}: {out.stderr[-2000:]}")
        self.up_s = time.perf_counter() - t0
        self.info = json.loads(out.stdout)

    def stop(self) -> float | None:
        if self.info is None:
            return None
        t0 = time.perf_counter()
        out = subprocess.run([*FARM, "fleet", "down"], cwd=REPO, env=self.env(),
                             capture_output=True, text=True, timeout=120, check=False)
        self.down_s = time.perf_counter() - t0
        self.info = None
        if out.returncode != 0:
            print(f"  farm fleet down: exit {out.returncode}: {out.stderr[-500:]}", flush=True)
        shutil.rmtree(self.state, ignore_errors=True)
        return self.down_s


# -- the report -------------------------------------------------------------------------------

def med(xs: list[float]) -> float:
    return statistics.median(xs)


def fmt_walls(xs: list[float]) -> str:
    s = f"{med(xs):.2f}"
    return s + (f" ({min(xs):.2f}-{max(xs):.2f})" if len(xs) > 1 else "")


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="m8-parity", help="manifest suite (m8-parity, selection)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-cluster", action="store_true", help="skip the loopback-cluster mode")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated subset of {','.join(MODES)} (plain and sequential "
                         f"always run: they give the single-device references)")
    ap.add_argument("--out", default=str(OUT_DIR / "orchestration"),
                    help="output path without extension (.json and .md are written)")
    args = ap.parse_args()
    modes = set(args.modes.split(",")) | {"plain", "sequential"}
    if bad := modes - set(MODES):
        ap.error(f"unknown mode(s) {sorted(bad)}: pick from {','.join(MODES)}")
    if args.no_cluster:
        modes.discard("farm-cluster")
    sys.path.insert(0, str(REPO))
    from suites.manifest import resolve_suite

    suite = resolve_suite(args.suite, REPO)
    workaround = addopts_workaround()
    tmpd = Path(tempfile.mkdtemp(prefix="bench-probe-"))
    # An empty state directory: the embedded mode never attaches to a warm fleet (the bench's,
    # or one the user left up).
    farm_env = clean_env(**workaround, FARM_STATE_DIR=str(tmpd / "no-warm-fleet"))
    started = datetime.datetime.now(datetime.UTC)
    loads = {"start": load()}
    R: dict[str, list[dict]] = {k: [] for k in MODES}
    probes: dict[str, list[dict]] = {m: [] for m in FARM_MODES}
    literal: dict[str, float] = {}
    # one history per farm mode, kept across its runs: a user's next run has one
    dbs = {m: tmpd / f"{m}.db" for m in probes}

    def one(name: str, fn) -> dict:
        before = load()[0]
        r = fn()
        r["load1_before"] = before
        R[name].append(r)
        print(f"  {name}: {r['wall']:.2f} s (load {before})", flush=True)
        return r

    def farm_probe(name: str, env: dict[str, str], address: str | None) -> dict:
        pfile = tmpd / f"{name}-{len(R[name])}.json"
        r = one(name, lambda: mode_farm(suite.name, env, address, probe=pfile, db=dbs[name],
                                        what=name, devices=FARM_MODES[name][0]))
        probes[name].append({"wall": r["wall"], **profile_phases(json.loads(pfile.read_text()),
                                                                  r["wall"])})
        return r

    print(f"suite {suite.name}: {' '.join(suite.pytest_args())}; {args.reps} rounds; "
          f"load {loads['start']}; farm env {workaround or 'unchanged'}", flush=True)
    warm = mode_plain(suite, ARCHES[0])  # page cache / bytecode warm-up, not recorded
    print(f"  warm-up plain: {warm['wall']:.2f} s", flush=True)
    cl, cluster_info = None, None
    wf, warm_info = None, None
    old = signal.getsignal(signal.SIGTERM)
    try:
        if "farm-cluster" in modes:
            cl = Cluster(workaround)
        if {"farm-warm", "farm-warm-1"} & modes:
            wf = Warm(workaround)

        def on_signal(signum, frame):
            for f in (cl, wf):
                if f:
                    f.stop()
            sys.exit(130)
        signal.signal(signal.SIGTERM, on_signal)
        if cl:
            before = load()[0]
            cl.start()
            print(f"  cluster start: {cl.times['total']:.2f} s", flush=True)
            # one run outside the medians: a fresh cluster's first job pays first-use costs
            first = mode_farm(suite.name, cl.env(), cl.c.address)
            print(f"  farm-cluster first run (not in the median): {first['wall']:.2f} s",
                  flush=True)
            cluster_info = {"start_s": {k: round(v, 2) for k, v in cl.times.items()},
                            "load1_before_start": before,
                            "first_run_wall": round(first["wall"], 2)}
        if wf:
            before = load()[0]
            wf.start()
            print(f"  farm fleet up: {wf.up_s:.2f} s", flush=True)
            # the first run on it, outside the medians, as for the cluster; its history is kept
            first = mode_farm(suite.name, wf.env(), None, db=dbs["farm-warm"], what="warm")
            print(f"  farm-warm first run (not in the median): {first['wall']:.2f} s",
                  flush=True)
            warm_info = {"up_s": round(wf.up_s, 2), "load1_before_up": before,
                         "first_run_wall": round(first["wall"], 2),
                         "devices": [d["arch"] for d in wf.info["devices"]]}
        for i in range(args.reps):  # round robin, so load drift spreads over every mode
            print(f" round {i + 1}", flush=True)
            one("plain", lambda: mode_plain(suite, ARCHES[0]))
            one("sequential", lambda: mode_sequential(suite))
            if "concurrent" in modes:
                one("concurrent", lambda: mode_concurrent(suite))
            if "xdist" in modes:
                one("xdist", lambda: mode_xdist(suite))
            if "device-job" in modes:
                one("device-job", lambda: mode_device_job(suite, ARCHES[0], workaround))
            if "farm-embedded" in modes:
                farm_probe("farm-embedded", farm_env, None)
            if cl:
                farm_probe("farm-cluster", cl.env(), cl.c.address)
            if wf and "farm-warm" in modes:
                farm_probe("farm-warm", wf.env(), None)
            if "farm-embedded-1" in modes:
                farm_probe("farm-embedded-1", farm_env, None)
            if wf and "farm-warm-1" in modes:
                farm_probe("farm-warm-1", wf.env(), None)
        # the literal CLI once per farm mode, to show the timers change nothing
        if "farm-embedded" in modes:
            literal["farm-embedded"] = round(mode_farm(suite.name, farm_env, None,
                                                       db=dbs["farm-embedded"])["wall"], 2)
        if cl:
            literal["farm-cluster"] = round(mode_farm(suite.name, cl.env(), cl.c.address,
                                                      db=dbs["farm-cluster"])["wall"], 2)
        if wf and "farm-warm" in modes:
            literal["farm-warm"] = round(mode_farm(suite.name, wf.env(), None,
                                                   db=dbs["farm-warm"], what="warm")["wall"], 2)
        if wf and "farm-warm-1" in modes:
            literal["farm-warm-1"] = round(mode_farm(suite.name, wf.env(), None,
                                                     db=dbs["farm-warm-1"], what="warm",
                                                     devices=ONE)["wall"], 2)
        print(f"  literal `farm run` walls: {literal}", flush=True)
    finally:
        if cl:
            stop_s = cl.stop()
            if cluster_info is not None:
                cluster_info["stop_s"] = round(stop_s, 2)
        if wf:
            down_s = wf.stop()
            if warm_info is not None and down_s is not None:
                warm_info["down_s"] = round(down_s, 2)
        shutil.rmtree(tmpd, ignore_errors=True)
        signal.signal(signal.SIGTERM, old)
    loads["end"] = load()
    report(args, suite, workaround, started, loads, R, probes, cluster_info, literal, warm_info)


def report(args, suite, workaround, started, loads, R, probe_runs, cluster_info, literal,
           warm_info=None) -> None:
    walls = {k: [r["wall"] for r in v] for k, v in R.items() if v}
    tests = R["plain"][0]["tests"]
    single = {a: med([r["per_device"][a]["wall"] for r in R["sequential"]]) for a in ARCHES}
    slowest_arch = max(single, key=single.get)
    slowest = single[slowest_arch]
    plain_span = med([r["span"] for r in R["plain"]])
    nan = float("nan")  # a figure whose mode was not run (--modes)
    conc_span = med([r["span_max"] for r in R["concurrent"]]) if R["concurrent"] else nan
    paired = med([r["per_test_ms_in_session"] for r in R["device-job"]]) if R[
        "device-job"] else nan
    probes: dict[str, dict] = {}
    for mode, runs in probe_runs.items():
        if not runs:
            continue
        probes[mode] = {"wall": med([p["wall"] for p in runs]),
                        "phases": {k: round(med([p["phases"][k] for p in runs]), 3)
                                   for k in runs[0]["phases"]},
                        "session_span_max": med([p["session_span_max"] for p in runs]),
                        "ingest_s": med([p["ingest_s"] for p in runs]),
                        "health_seconds": runs[-1]["health_seconds"],
                        "per_job": runs[-1]["per_job"]}
    derived: dict[str, dict] = {}
    startup: dict[str, dict] = {}
    for mode in FARM_MODES:
        if mode not in walls:
            continue
        w = med(walls[mode])
        same = FARM_MODES[mode][1]  # plain pytest doing the same work, same concurrency
        same_walls = walls.get(same, [])
        # paired per round (the modes run round-robin): the farm's wall minus the plain run's
        same_fixed = [a - b for a, b in zip(walls[mode], same_walls, strict=False)]
        fixed = w - slowest
        allowed = TARGET_RATIO * slowest + TARGET_FIXED_S
        runs = probe_runs[mode]
        # per round: the farm's slowest pytest session against that round's concurrent plain one
        per_test = med([(p["session_span_max"] - c["span_max"]) / tests * 1000
                        for p, c in zip(runs, R["concurrent"], strict=False)]) if R[
            "concurrent"] else nan
        conc = med(walls["concurrent"]) if "concurrent" in walls else nan
        first = [p["first_test_s"] for p in runs if p.get("first_test_s") is not None]
        startup[mode] = {
            "devices": FARM_MODES[mode][0], "same_work": same,
            "same_work_wall_median": round(med(same_walls), 2) if same_walls else None,
            "fixed_cost_vs_same_work": round(med(same_fixed), 2) if same_fixed else None,
            "fixed_costs_vs_same_work": [round(x, 2) for x in same_fixed],
            "wall_median": round(w, 2), "plain_slowest_single": round(slowest, 2),
            "fixed_cost": round(fixed, 2), "ratio_to_slowest_single": round(w / slowest, 2),
            "fixed_costs": [round(x - slowest, 2) for x in walls[mode]],
            "first_test_s_median": round(med(first), 2) if first else None,
            "first_test_s": first,
            "first_session_s_median": round(med([p["first_session_s"] for p in runs
                                                 if p.get("first_session_s") is not None]), 2)
            if runs else None}
        d = {"wall_median": round(w, 2), "ratio_to_slowest_single": round(w / slowest, 2),
             "fixed_cost_vs_slowest_single": round(fixed, 2),
             "ratio_to_concurrent_pytest": round(w / conc, 2),
             "fixed_cost_vs_concurrent_pytest": round(w - conc, 2),
             "target_wall_s": round(allowed, 2), "meets_ratio_plus_fixed": w <= allowed,
             "farm_session_span_max": round(probes[mode]["session_span_max"], 3),
             "fixed_cost_outside_sessions": round(med([p["wall"] - p["session_span_max"]
                                                       for p in runs]), 2),
             "per_test_ms_vs_concurrent_plain": round(per_test, 2),
             "per_test_ms_farm": round(probes[mode]["session_span_max"] / tests * 1000, 2),
             "per_test_ms_plain_concurrent": round(conc_span / tests * 1000, 2),
             "per_test_ms_device_job_paired": round(paired, 2),
             "meets_per_test": per_test <= TARGET_PER_TEST_MS,
             "meets_per_test_paired": paired <= TARGET_PER_TEST_MS,
             "literal_cli_wall": literal.get(mode)}
        if mode.endswith("-1"):
            continue  # one device: the start-up section has its figures
        derived[mode] = d
    mode_load = {k: [r["load1_before"] for r in v] for k, v in R.items() if v}
    result = {
        "benchmark": "orchestration", "started": started.isoformat(timespec="seconds"),
        "host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
        "suite": suite.name, "pytest_args": suite.pytest_args(), "tests_per_device": tests,
        "reps": args.reps, "load_avg": loads, "load1_before_each_rep": mode_load,
        "farm_env_workaround": workaround,
        "modes": {k: {"walls": [round(x, 3) for x in v], "median": round(med(v), 3),
                      "runs": R[k]} for k, v in walls.items()},
        "single_device_wall_median": {a: round(v, 3) for a, v in single.items()},
        "slowest_single": {"arch": slowest_arch, "wall": round(slowest, 3)},
        "plain_session_span_median": plain_span, "concurrent_session_span_max_median": conc_span,
        "derived": derived, "profile": probes, "profile_runs": probe_runs,
        "cluster": cluster_info, "literal_cli_walls": literal,
        "startup": startup, "warm_fleet": warm_info,
        "targets": {"ratio": TARGET_RATIO, "fixed_s": TARGET_FIXED_S,
                    "per_test_ms": TARGET_PER_TEST_MS, "first_test_s": TARGET_FIRST_TEST_S,
                    "warm_fixed_s": TARGET_WARM_FIXED_S},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = markdown(result, walls)
    out.with_suffix(".md").write_text(md)
    print()
    print(md)


def markdown(res: dict, walls: dict[str, list[float]]) -> str:
    n = res["tests_per_device"]
    L = ["# Orchestration benchmark\n",
         f"`bench/bench_orchestration.py --suite {res['suite']}`, {res['started']}: "
         f"{res['cpus']} CPUs shared with other work (1/5/15-min load {res['load_avg']['start']} "
         f"at start, {res['load_avg']['end']} at end), Python {res['python']}. Suite "
         f"`{res['suite']}` = `{' '.join(res['pytest_args'])}`, {n} tests per device, devices "
         f"emulated applegpu_g13s / g14g / g15s. Wall clock from process start to end, median "
         f"of {res['reps']} rounds (range in brackets), the modes taken round-robin so load "
         f"drift spreads over all of them; the loopback cluster stays up (idle) through every "
         f"round. 1-min load before each run: " + "; ".join(
             f"{k} {v}" for k, v in res["load1_before_each_rep"].items()) + ". Farm walls are "
         "of `farm.cli.app.script` (the `farm` command) with phase timers (`--_probe`); one "
         "literal `farm run` per farm "
         "mode at the end: " + ", ".join(f"{k} {v:.2f} s" for k, v in
                                          res["literal_cli_walls"].items()) + ".\n"]
    if res["farm_env_workaround"]:
        L.append("**Farm modes ran with `PYTEST_ADDOPTS=-o addopts=`**: pyproject.toml's pytest "
                 "`addopts` carry `--dist loadfile`, an xdist option; device jobs run pytest with "
                 "plugin autoload off, so without it every `farm run` job ends `pytest ended "
                 "(exit status 4) ... unrecognized arguments: --dist` (a bug in the tree, not "
                 "fixed here).\n")
    desc = {
        "plain": "`pytest SUITE --device-arch applegpu_g13s`, one device",
        "sequential": "the same for g13s, g14g, g15s one after another",
        "concurrent": "three such pytest processes started together",
        "xdist": "`pytest -n 3 --dist each`, worker gwN emulating device N (this file as `-p` plugin)",
        "device-job": "`farm.runner.device_job.run_job` in-process (no Ray), g13s, paired with a plain run",
        "farm-embedded": f"`farm run --devices {SELECTORS}`, embedded fleet (Ray start+stop inside)",
        "farm-cluster": f"`farm run --devices {SELECTORS} --address` to a running loopback cluster",
        "farm-warm": f"`farm run --devices {SELECTORS}` with a warm fleet up (`farm fleet up`)",
        "farm-embedded-1": f"`farm run --devices {ONE}`, embedded fleet of one node",
        "farm-warm-1": f"`farm run --devices {ONE}` on the same warm fleet",
    }
    L += ["| mode | what | tests | wall s, median (range) | per test ms |", "|---|---|---:|---:|---:|"]
    for k, v in walls.items():
        t = res["modes"][k]["runs"][0]["tests"]
        L.append(f"| {k} | {desc[k]} | {t} | {fmt_walls(v)} | {med(v) / t * 1000:.1f} |")
    s = res["single_device_wall_median"]
    L.append("\nSingle device alone (from `sequential`): " + ", ".join(
        f"{a} {v:.2f} s" for a, v in s.items()) + f"; slowest {res['slowest_single']['arch']} "
        f"{res['slowest_single']['wall']:.2f} s. pytest's own session time: plain "
        f"{res['plain_session_span_median']:.2f} s; three concurrent, slowest "
        f"{res['concurrent_session_span_max_median']:.2f} s.")
    if res["cluster"]:
        c = res["cluster"]
        L.append(f"\nLoopback cluster (not in the `farm-cluster` walls): start "
                 f"{c['start_s']['total']:.2f} s (head {c['start_s']['head']:.2f} s, agents " +
                 ", ".join(f"{v:.2f}" for k, v in c["start_s"].items() if k.startswith("agent"))
                 + f" s, one at a time), stop {c['stop_s']:.2f} s; first `farm run` on the "
                 f"fresh cluster {c['first_run_wall']:.2f} s (left out of the median).")
    if res.get("warm_fleet"):
        w = res["warm_fleet"]
        L.append(f"\nWarm fleet (not in the `farm-warm` walls): `farm fleet up` {w['up_s']:.2f} s, "
                 f"`farm fleet down` {w.get('down_s', float('nan')):.2f} s; first `farm run` on "
                 f"it {w['first_run_wall']:.2f} s (left out of the median).")
    L += startup_markdown(res)
    L.append("\n## Against the targets\n")
    L.append(f"Targets: `farm run` wall <= {TARGET_RATIO} x slowest single device + "
             f"{TARGET_FIXED_S:g} s fixed cost; per-test overhead <= {TARGET_PER_TEST_MS:g} ms.\n")
    L += [("| farm mode | wall s | / slowest single | fixed cost s (wall - slowest single) | "
          "allowed wall s | ratio+fixed | / concurrent pytest | fixed s outside pytest sessions | "
          "per-test ms, farm session vs concurrent plain | per-test ms, device job vs plain "
          "(paired, alone) | per-test |"),
          "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|"]
    for k, d in res["derived"].items():
        L.append(f"| {k} | {d['wall_median']:.2f} | {d['ratio_to_slowest_single']:.2f} | "
                 f"{d['fixed_cost_vs_slowest_single']:.2f} | {d['target_wall_s']:.2f} | "
                 f"{'meets' if d['meets_ratio_plus_fixed'] else 'MISSES'} | "
                 f"{d['ratio_to_concurrent_pytest']:.2f} | "
                 f"{d.get('fixed_cost_outside_sessions', float('nan')):.2f} | "
                 f"{d.get('per_test_ms_vs_concurrent_plain', float('nan')):+.2f} "
                 f"({d.get('per_test_ms_farm', float('nan')):.1f} vs "
                 f"{d.get('per_test_ms_plain_concurrent', float('nan')):.1f}) | "
                 f"{d['per_test_ms_device_job_paired']:+.2f} | "
                 f"{'meets' if d.get('meets_per_test') else 'MISSES'} (concurrent) / "
                 f"{'meets' if d.get('meets_per_test_paired') else 'MISSES'} (paired) |")
    L.append("\nPer-test overhead: the slowest device job's pytest session inside the farm "
             "(session_start to session_finish events, device clock) against the slowest of three "
             "concurrent plain pytest sessions (pytest's own `in N s`), over the tests of one "
             "device; same concurrency (three devices on this host's CPUs), so what is left is the "
             "farm's in-session cost (results JSONL, started-test file, timeout plugin, the "
             "job's file polling and the driver's ingestion competing for the CPUs), taken per "
             "round and the median reported. Everything else is fixed cost. The paired figure: "
             "the farm's device side (`device_job.run_job`: the same pytest command, plugins, "
             "JSONL and polling the farm uses, no Ray) against plain pytest on g13s run just "
             "before it, pytest session time each, per test: the farm's in-session cost with "
             "nothing else running beside it.\n")
    L.append("## Where the time goes (median per phase over the instrumented farm runs)\n")
    L.append("`farm.cli.app.script` run in a subprocess with its phases wrapped in timers "
             "(`--_probe`); the device-side phases come from the job's own events. Critical "
             "path: the device job that ended last.\n")
    names = list(next(iter(res["profile"].values()))["phases"]) if res["profile"] else []
    modes = list(res["profile"])
    L += ["| phase | " + " | ".join(f"{m} s" for m in modes) + " |",
          "|---|" + "---:|" * len(modes)]
    for nm in names:
        L.append(f"| {nm} | " + " | ".join(
            f"{res['profile'][m]['phases'].get(nm, 0):.2f}" for m in modes) + " |")
    L.append("| **wall** | " + " | ".join(f"**{res['profile'][m]['wall']:.2f}**" for m in modes)
             + " |")
    for m in modes:
        p = res["profile"][m]
        hs = ", ".join(f"{h['seconds']:.2f}" for h in p["health_seconds"] or [] if h["seconds"])
        L.append(f"\n{m}: health-check subprocesses {hs} s each (MLX import + golden QMM); "
                 f"driver ingestion {p['ingest_s']:.2f} s in all; per job: " + "; ".join(
                     f"job {j}: dispatch->start {v['dispatch_to_job_start']:.2f}, start->session "
                     f"{v['job_start_to_session_start']:.2f}, session {v['session_span']:.2f}, "
                     f"max result lag {v['result_delivery_lag_max']:.2f}"
                     for j, v in p["per_job"].items()))
    pairs = [r["per_test_ms_in_session"] for r in res["modes"].get(
        "device-job", {"runs": [{"per_test_ms_in_session": float("nan")}]})["runs"]]
    L.append("\n## Reading these figures\n")
    L.append(f"- The host's other work moved the 1-min load between the values listed above; "
             f"single runs vary by tens of percent, so the medians carry that noise. The paired "
             f"per-test figure ranged {min(pairs):+.2f} .. {max(pairs):+.2f} ms over the rounds: "
             f"a 0.1 s wobble of a {res['plain_session_span_median']:.1f} s session is "
             f"{100 / n:.1f} ms per test, so a 2 ms target is at the edge of what this host can "
             f"resolve.")
    L.append("- Ray starts workers with `OMP_NUM_THREADS=1` (it sets it when unset), and the "
             "device job's pytest inherits it; plain pytest does not. With three processes on two "
             "cores that favours the farm's sessions a little (0.2-0.8 s of 4 s in a check "
             "beside this run), so the per-test figure against concurrent plain pytest can come "
             "out negative; it bounds the in-session cost rather than measuring it.")
    L.append("- `fixed cost` against the slowest single device also contains the cost of running "
             "three devices at once on two cores (`concurrent` against the slowest single "
             "device shows that part); `fixed s outside pytest sessions` is the farm's own.")
    return "\n".join(L) + "\n"


def startup_markdown(res: dict) -> list[str]:
    """The start-up section: fixed cost and first test per farm mode, against plain pytest."""
    st = res.get("startup") or {}
    if not st:
        return []
    slow = res["slowest_single"]
    L = ["\n## Start-up: fixed cost and first test\n",
         ("Fixed cost, same work = farm wall - plain `pytest` doing the same work at the same "
          "concurrency, paired per round (the modes run round-robin): a one-device farm run "
          f"({ONE}) against `plain` on that device; a three-device run against `concurrent` "
          "(three pytest processes at once on this host's two cores). Fixed cost, slowest single "
          f"= farm wall - plain `pytest` on the slowest single device ({slow['arch']}, "
          f"{slow['wall']:.2f} s, from `sequential`): for three devices it also holds the cost of "
          "running three at once on two cores, which no orchestrator removes. First test = "
          "process start to the first test's result (device clock, same host). Medians of "
          f"{res['reps']} rounds, each round's figure in brackets. Targets: embedded fleet's "
          f"first test <= {TARGET_FIRST_TEST_S:g} s, warm fleet's fixed cost <= "
          f"{TARGET_WARM_FIXED_S:g} s.\n"),
         ("| farm mode | devices | wall s | same work in plain pytest s | wall / same work | "
          "fixed cost, same work s (rounds) | fixed cost, slowest single s | first pytest "
          "session s | first test s |"),
         "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, d in st.items():
        first = d["first_test_s_median"]
        sess = d["first_session_s_median"]
        same = d.get("fixed_cost_vs_same_work")
        rounds = ", ".join(f"{x:.2f}" for x in d.get("fixed_costs_vs_same_work") or [])
        sw = d.get("same_work_wall_median")
        ratio = f"{d['wall_median'] / sw:.2f}" if sw else "-"
        L.append(f"| {mode} | {d.get('devices', SELECTORS)} | {d['wall_median']:.2f} | "
                 f"{'-' if sw is None else sw} ({d.get('same_work', '-')}) | {ratio} | "
                 f"{'-' if same is None else f'{same:.2f} ({rounds})'} | {d['fixed_cost']:.2f} | "
                 f"{'-' if sess is None else f'{sess:.2f}'} | "
                 f"{'-' if first is None else f'{first:.2f}'} |")
    if "farm-embedded" in st and "farm-warm" in st:
        e, w = st["farm-embedded"], st["farm-warm"]
        L.append(f"\nEmbedded against warm: fixed cost {e['fixed_cost']:.2f} s against "
                 f"{w['fixed_cost']:.2f} s ({e['fixed_cost'] - w['fixed_cost']:.2f} s is the "
                 f"fleet's start and stop).")
    return L


def rerender(path: Path) -> None:
    """Write the .md again from a .json this script wrote (no new measurements)."""
    res = json.loads(path.read_text())
    walls = {k: v["walls"] for k, v in res["modes"].items()}
    path.with_suffix(".md").write_text(markdown(res, walls))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rerender":
        rerender(Path(sys.argv[2]))
    elif len(sys.argv) > 2 and sys.argv[1] == "--_probe":
        _probe_main(sys.argv[2], sys.argv[4:] if sys.argv[3] == "--" else sys.argv[3:])
    else:
        main()
