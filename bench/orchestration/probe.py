"""The instrumented `farm run`: the `farm` command in a subprocess of its own (this bench's
``--_probe``) with its phases wrapped in timers, and the phases read back along the critical
path, so the report can say where a farm run's time goes and not only how much it takes."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import time
from pathlib import Path


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
