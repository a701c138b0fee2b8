"""The commands' latency at one size: the library calls behind `farm show/history/regressions`
on a read-only History, and the installed CLI in a subprocess (interpreter start included, the
child's CPU time beside it, which a loaded machine inflates less)."""

from __future__ import annotations

import cProfile
import io
import pstats
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from db import open_history
from db.queries import resolve_run, show_run, test_history
from db.regressions import find_regressions
from history_bench.plans import Capture, explain, table_counts
from history_bench.synthetic import HISTORY_NODE, HISTORY_TEST

ROOT = Path(__file__).resolve().parents[2]
FARM = Path(sys.executable).with_name("farm")


def timed(fn, repeat: int) -> dict:
    xs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t0)
    return {"median_s": statistics.median(xs), "min_s": min(xs), "max_s": max(xs),
            "samples_s": xs}


def cli(args: list[str], repeat: int = 3) -> dict:
    """The installed `farm` command, ``repeat`` times: median wall (interpreter start included)
    and the child's CPU time (user + system), which a loaded machine inflates less."""
    walls, cpus = [], []
    for _ in range(repeat):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        p = subprocess.run([str(FARM), *args], capture_output=True, text=True, cwd=ROOT,
                           check=False)
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return {"wall_s": statistics.median(walls), "cpu_s": statistics.median(cpus),
            "walls_s": walls, "rc": p.returncode, "stdout_lines": p.stdout.count("\n"),
            "stderr": p.stderr.strip().splitlines()[-1:] if p.returncode not in (0, 1) else []}


QUERIES = {
    "show": lambda h: show_run(h, resolve_run(h, "latest")),
    "history": lambda h: test_history(h, HISTORY_TEST, limit=50),
    "history_node": lambda h: test_history(h, HISTORY_NODE, limit=50),
    "regressions": lambda h: find_regressions(h, "latest"),
}
CLI = {
    "show": ["show", "latest"],
    "history": ["history", HISTORY_TEST],
    "regressions": ["regressions", "latest"],
}


def measure_size(db_path: Path, repeat: int, with_cli: bool, profile: bool) -> dict:
    counts = table_counts(db_path)
    lib, plans, info = {}, {}, {}
    with open_history(str(db_path), write=False) as h:
        for name, fn in QUERIES.items():
            with Capture(h.engine) as cap:
                res = fn(h)
            info[name] = (len(res) if isinstance(res, list) else
                          {"jobs": len(res["jobs"]), "matrix_rows": len(res["matrix"])})
            lib[name] = timed(lambda fn=fn: fn(h), repeat)
            lib[name]["statements"] = len(cap.stmts)
            plans[name] = explain(db_path, cap.stmts, counts)
        if profile:
            for name in ("regressions", "history"):
                pr = cProfile.Profile()
                pr.enable()
                QUERIES[name](h)
                pr.disable()
                info[f"profile_{name}"] = _profile_text(pr)
    out = {"table_rows": counts, "db_bytes": _db_bytes(db_path), "library": lib,
           "answer": {k: v for k, v in info.items() if not k.startswith("profile_")},
           "plans": plans,
           "profiles": {k: v for k, v in info.items() if k.startswith("profile_")}}
    if with_cli:
        out["cli_startup"] = cli(["--help"])
        out["cli"] = {name: cli([*args, "--db", str(db_path)]) for name, args in CLI.items()}
    return out


def _db_bytes(p: Path) -> int:
    return sum(q.stat().st_size for q in p.parent.glob(p.name + "*"))


def _profile_text(pr: cProfile.Profile, n: int = 18) -> str:
    s = io.StringIO()
    pstats.Stats(pr, stream=s).strip_dirs().sort_stats("cumulative").print_stats(n)
    return s.getvalue()
