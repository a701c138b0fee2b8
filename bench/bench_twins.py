#!/usr/bin/env python
"""Twins benchmark: one suite on one node against the same suite split across two twin nodes.

Two fleets, each measured alone (``--fleets``):
- ``cluster``: a loopback cluster (``farm head`` plus two ``farm agent --emulate applegpu_g14g``
  nodes, token auth, started as tests/ray_cluster.py starts them, on a port block of its own):
  device jobs are Ray tasks, each run's first job on a node pays a Ray worker's start.
- ``warm``: a warm fleet of two g14 nodes (``farm fleet up --devices g14*2``, in a state
  directory of the bench's own): device jobs go to the nodes' warm executors
  (`farm.fleet.executor`), and twins ask their queue through them.
One node is ``farm run --devices g14*1``, two twins ``--devices g14`` (``g14*2`` on the warm
fleet), alternating rep by rep after a warm-up of each (the load of a shared host drifts). Where this checkout's `farm run` does not
take ``*N`` yet, the one-node runs happen first, before the second agent joins. Per suite and
mode, medians of: the wall of the ``farm run`` process; the run's own ``seconds`` (listing the
devices to the last result stored); the span from the first result to the last (the part
sharding divides); the fixed part (run seconds minus span: health checks, device jobs and
pytest starting, collection; not divided). Ratios twins / one node (goal <= 0.6x), and how
many tests each twin ran.

Suites:
- ``device-bound``: tests/farm_fixtures/suite_device_bound.py, 48 tests of 0.5 s waiting on
  the device (as a kernel on a Mac's GPU does): twins on separate machines share nothing else.
- ``m8-parity``: the shipped suite, 55 tests that are CPU-bound here (the emulated Metal
  kernels run on this host's CPU): two twins on one host contend for the same cores.

Never a unit test: ``python bench/bench_twins.py [--reps 3] [--suites device-bound,m8-parity]
[--fleets cluster,warm]``.
Writes bench/results/twins.json and prints a table.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "bench" / "results" / "twins.json"
FARM = [sys.executable, "-c", "from farm.cli.app import script; script()"]
ARCH = "applegpu_g14g"
SUITES = {"device-bound": "tests/farm_fixtures/suite_device_bound.py", "m8-parity": "m8-parity"}
GOAL = 0.6


def _rc():
    sys.path.insert(0, str(REPO / "tests"))
    import ray_cluster

    return ray_cluster


def _block(rc) -> int:
    """A test port block nobody on this host holds (the tests' flock files), held while we run."""
    base = rc.claim_block(reversed(rc._BLOCKS))
    if base is None:
        raise SystemExit("every test port block is held: run the benchmark when the tests are done")
    return base


def start_cluster(rc):
    base = _block(rc)
    c = rc.FarmCluster(address=f"127.0.0.1:{base}", token=secrets.token_hex(32), base=base,
                       temp_dir=Path(tempfile.mkdtemp(prefix="benchtwins-", dir="/tmp")))
    head = rc._start(c, [*FARM, "head", "--node-ip", rc.LOOPBACK, "--port", str(base),
                         "--num-cpus", "1", "--object-store-mb", "100",
                         "--temp-dir", str(c.temp_dir)], {})
    c.groups["head"] = head.pid
    rc._wait(head, "farm head")
    return c


def _warm():
    """A warm fleet of two g14 nodes in a state directory of its own (bench_orchestration's)."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_orchestration import Warm

    return Warm({"PYTEST_ADDOPTS": "-o addopts="}, devices="g14*2")


def farm_run(c, suite: str, db: Path, devices: str = "g14") -> dict:
    env = {k: v for k, v in c.env().items() if k not in ("DFLASH2_DEVICE_ARCH", "PYTEST_ADDOPTS",
                                                         "PYTEST_XDIST_WORKER")}
    if c.address is None:  # the warm fleet (bench_orchestration.Warm)
        env["PYTEST_ADDOPTS"] = "-o addopts="
    where = ["--address", c.address] if c.address else []
    t0 = time.perf_counter()
    out = subprocess.run([*FARM, "run", *where, "--json", "--suite", suite,
                          "--devices", devices, "--db", str(db)], cwd=REPO, env=env, text=True,
                         capture_output=True, timeout=900, check=False)
    wall = time.perf_counter() - t0
    if out.returncode not in (0, 1) or not out.stdout.strip():
        raise SystemExit(f"farm run {suite} failed (exit {out.returncode}): {out.stderr[-3000:]}")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    (job,) = run["jobs"]
    if job["status"] not in ("passed", "failed"):
        raise SystemExit(f"farm run {suite}: job {job['status']}: {job['error']}")
    per_node = Counter(r["farm_node"][:8] for r in job["results"])
    times = sorted(r["time"] for r in job["results"])
    span = times[-1] - times[0] if times else 0.0
    return {"wall": round(wall, 3), "seconds": run["seconds"], "span": round(span, 3),
            "fixed": round(run["seconds"] - span, 3), "tests": len(job["results"]),
            "nodes": len(set(job["nodes"])), "per_node": dict(per_node),
            "load1": round(os.getloadavg()[0], 2)}


def measure(c, suites: list[str], reps: int, db: Path, modes: dict[str, str]) -> dict:
    """``modes``: label -> --devices; the modes alternate rep by rep."""
    out: dict = {m: {} for m in modes}
    for name in suites:
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for devices in modes.values():  # warm-up: a node's first job pays its worker's start
            farm_run(c, SUITES[name], db, devices)
        for i in range(reps):
            for label, devices in modes.items():
                r = farm_run(c, SUITES[name], db, devices)
                runs[label].append(r)
                print(f"  {label:7} {name:13} rep {i + 1}: wall {r['wall']:6.2f}s  run "
                      f"{r['seconds']:6.2f}s  span {r['span']:6.2f}s  per node "
                      f"{r['per_node']}  load {r['load1']}", flush=True)
        for label in modes:
            rs = runs[label]
            out[label][name] = {"runs": rs, **{k: round(statistics.median(r[k] for r in rs), 3)
                                               for k in ("wall", "seconds", "span", "fixed")}}
    return out


def table(res: dict) -> str:
    lines = [f"{'suite':13} {'tests':>5} {'what':6} {'1 node':>8} {'2 twins':>8} {'ratio':>6}"]
    for name, r in res["suites"].items():
        for what, key in (("wall", "wall"), ("run", "seconds"), ("span", "span"),
                          ("fixed", "fixed")):
            one, two = r["one"][key], r["twins"][key]
            ratio = f"{two / one:5.2f}x" if one else "    -"
            lines.append(f"{name if what == 'wall' else '':13} "
                         f"{r['tests'] if what == 'wall' else '':>5} {what:6} {one:7.2f}s "
                         f"{two:7.2f}s {ratio}" + (f"  split {r['split']}" if what == "wall"
                                                   else ""))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--suites", default=",".join(SUITES))
    ap.add_argument("--fleets", default="cluster,warm",
                    help="cluster (farm head + agents: Ray tasks), warm (farm fleet up: executors)")
    args = ap.parse_args()
    suites = [s for s in args.suites.split(",") if s]
    fleets = [f for f in args.fleets.split(",") if f]
    if bad := set(fleets) - {"cluster", "warm"}:
        ap.error(f"unknown fleet(s) {sorted(bad)}: cluster, warm")
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    load0 = [round(x, 2) for x in os.getloadavg()]
    res = {"benchmark": "twins", "started": started, "host": platform.node(),
           "cpus": os.cpu_count(), "reps": args.reps, "goal_ratio": GOAL, "order": "alternating",
           "fleets": {}}
    for fleet in fleets:
        res["fleets"][fleet] = summarize(suites, measure_fleet(fleet, suites, args.reps))
        print(f"[{fleet}]\n" + table(res["fleets"][fleet]), flush=True)
    res["load_avg"] = {"start": load0, "end": [round(x, 2) for x in os.getloadavg()]}
    res["table"] = [ln for f in fleets for ln in (f"[{f}]", *table(res["fleets"][f]).splitlines())]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    print("\n".join(res["table"]))
    print(f"(medians of {args.reps}, alternating; goal: twins <= {GOAL}x one node; "
          f"{os.cpu_count()} CPUs, load {load0} -> {res['load_avg']['end']}; written to "
          f"{OUT.relative_to(REPO)})")


def measure_fleet(fleet: str, suites: list[str], reps: int) -> dict:
    modes = {"1 node": "g14*1", "2 twins": "g14" if fleet == "cluster" else "g14*2"}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "h.db"
        if fleet == "warm":
            w = _warm()
            try:
                w.start()
                return measure(w, suites, reps, db, modes)
            finally:
                w.stop()
        rc = _rc()
        c = start_cluster(rc)
        try:
            c.add_agent("twin-a", ARCH)
            c.add_agent("twin-b", ARCH)
            return measure(c, suites, reps, db, modes)
        finally:
            rc.stop_cluster(c)


def summarize(suites: list[str], got: dict) -> dict:
    res: dict = {"suites": {}}
    for name in suites:
        o, t = got["1 node"][name], got["2 twins"][name]
        split = sorted(Counter(n for r in t["runs"] for n in r["per_node"]).keys())
        res["suites"][name] = {
            "suite": SUITES[name], "tests": o["runs"][0]["tests"], "one": o, "twins": t,
            "ratio_wall": round(t["wall"] / o["wall"], 3),
            "ratio_run": round(t["seconds"] / o["seconds"], 3),
            "ratio_span": round(t["span"] / o["span"], 3) if o["span"] else None,
            "split": "/".join(str(round(statistics.median(r["per_node"].get(n, 0)
                                                          for r in t["runs"])))
                              for n in split[:2])}
    return res


if __name__ == "__main__":
    main()
