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
import datetime
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: the orchestration package

from orchestration.common import (
    ARCHES,
    FARM_MODES,
    MODES,
    ONE,
    OUT_DIR,
    REPO,
    addopts_workaround,
    clean_env,
    load,
)
from orchestration.fleets import Cluster, Warm
from orchestration.modes import (
    mode_concurrent,
    mode_device_job,
    mode_farm,
    mode_plain,
    mode_sequential,
    mode_xdist,
)
from orchestration.probe import _probe_main, profile_phases
from orchestration.report import report, rerender


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


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rerender":
        rerender(Path(sys.argv[2]))
    elif len(sys.argv) > 2 and sys.argv[1] == "--_probe":
        _probe_main(sys.argv[2], sys.argv[4:] if sys.argv[3] == "--" else sys.argv[3:])
    else:
        main()
