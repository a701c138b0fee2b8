#!/usr/bin/env python
"""How many single-point mutants of each Metal source does the m8-parity suite kill?

The emulated Apple GPU runs every tuned variant's exact Metal source and holds it against the
portable form; this bench measures how much of each source the suite actually pins down.

1. Mutants. Every distinct Metal source text the variants use (read from the modules: the
   variants' ``METAL_SOURCE`` and ``HEADER``, each traced back to the one string literal that
   defines it) gets single-point mutants, one edit each, made on C++ tokens (comments and
   preprocessor lines skipped, template brackets told apart from comparisons):
   ``operator`` (+ -, * /, % /, += -=, *= /=, ++ --, < <=, > >=, == !=, && ||, << >>, & |),
   ``index`` (`` + 1`` at the end of an index expression), ``constant`` (n -> n+1, n -> 0 for
   1 <= n <= 64, hex n -> n >> 1, 0.0f -> 1.0f), ``barrier`` (one ``threadgroup_barrier(...);``
   deleted) and ``simd_sum`` (``simd_sum(e)`` -> ``(e)``). Ids are stable: source, kind, line,
   column and a hash of the edit.
2. Each mutant is written into a copy of the committed tree (``git archive HEAD``: other
   engineers' uncommitted edits are not what is measured) and compile-checked there: each
   variant it affects is launched once on the emulator at a small shape, stopping after the
   build. A mutant that does not compile is counted apart and left out of the denominator (a
   Mac would refuse it). The rest run the suite on emulated g13s, then g14s, through
   ``farm.runner.device_job.run_job`` itself (the farm's command line, plugins, environment and
   timeouts, PYTHONPATH = the copy; the runner prints ``kernels.__file__`` to prove it), and
   stop at the first failing test: a mutant is killed when either device has one, or when the
   job ends in error or timeout. Two mutants run at once; results are cached in the JSON by
   mutant id (with a digest of the tree), so an interrupted run resumes.
3. A table per source and per variant, bench/results/mutation_score.json and .md; every
   survivor is listed with its diff and a judgement (``mutation/judged.py``): equivalent to the
   original, or which test would kill it. ``--also-suite``/``--also-pytest`` run the JSON's
   survivors through other checks (same mutant ids) and record which kill them.

The parts, in bench/mutation/: ``generate`` (the tokens, edits and sources: 1), ``child``
(what runs inside a copy: 2), ``slots`` (the copies, and a mutant's runs in one), ``report``
(3) and ``judged`` (the survivors' judgements); this file is the command line over them.

Never run as a unit test:

    python bench/mutation_score.py [--jobs 2] [--limit N] [--only ID,...] [--fresh]
    python bench/mutation_score.py --commit SHA      # resume a run measured at SHA
    python bench/mutation_score.py --also-suite numeric-bounds --also-pytest "tests/x.py -k y"
    python bench/mutation_score.py --report          # rewrite the report (after judging)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shlex
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/: the mutation package

from mutation.child import _runner_compile, _runner_suite
from mutation.generate import GENERATOR_VERSION, build_mutants, metal_sources
from mutation.judged import JUDGEMENTS
from mutation.report import _print_tables, summarize, write_report
from mutation.slots import (
    DEVICES,
    JOB_TIMEOUT_S,
    SUITE,
    Slot,
    _in_slots,
    _pool,
    _slots,
    _snapshot,
    _suite_spec,
    also_run,
    run_device,
    run_mutant,
    tree_digest,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def _load_json(path: Path) -> dict:
    with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
        return json.loads(path.read_text())
    return {}



def _also_checks(args, snapshot: Path) -> list[tuple[str, dict | None, list[str] | None]]:
    checks = []
    for name in args.also_suite or []:
        spec = _suite_spec(snapshot, DEVICES[0])
        from suites.manifest import load_manifest

        suite = load_manifest(snapshot / "suites" / "manifest.toml")[name]
        checks.append((f"suite {name}", {**spec, "suite": name,
                                         "pytest_args": suite.pytest_args(),
                                         "test_timeout": float(suite.timeout)}, None))
    for text in args.also_pytest or []:
        checks.append((f"pytest {text}", None, shlex.split(text)))
    return checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    ap.add_argument("--commit", default="HEAD", help="the committed tree to measure")
    ap.add_argument("--limit", type=int, default=None, help="only the first N mutants (a try)")
    ap.add_argument("--only", default=None,
                    help="only mutants whose id contains one of these (comma-separated)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached results")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--report", action="store_true",
                    help="only rewrite the report from the JSON (e.g. after judging survivors)")
    ap.add_argument("--also-suite", action="append", metavar="SUITE",
                    help="run the JSON's survivors through this farm suite too (both devices)")
    ap.add_argument("--also-pytest", action="append", metavar="ARGS",
                    help="run the JSON's survivors through plain pytest ARGS in the copy too")
    ap.add_argument("--runner", choices=("compile", "suite"), help=argparse.SUPPRESS)
    ap.add_argument("job", nargs="?", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.runner:
        job = json.loads(args.job)
        return _runner_compile(job) if args.runner == "compile" else _runner_suite(job)

    started = time.monotonic()
    json_path, md_path = RESULTS / "mutation_score.json", RESULTS / "mutation_score.md"
    cached = _load_json(json_path)
    command = "python bench/mutation_score.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    if args.report:
        if not cached:
            print(f"no {json_path.relative_to(ROOT)} to report from", file=sys.stderr)
            return 2
        cached["summary"] = summarize(cached["mutants"], cached["results"], cached["exercised"])
        cached["judgements"] = {k: {"verdict": v[0], "why": v[1]} for k, v in JUDGEMENTS.items()
                                if k in cached["results"]}
        json_path.write_text(json.dumps(cached, indent=1) + "\n")
        md_path.write_text(write_report(cached, cached["mutants"], cached["results"]))
        _print_tables(cached["summary"])
        return 0
    with tempfile.TemporaryDirectory(prefix="mutation-score-") as work_s:
        work = Path(work_s)
        snapshot = work / "snapshot"
        commit = _snapshot(snapshot, args.commit)
        sys.path.insert(0, str(snapshot))  # kernels, suites: the snapshot's, not the checkout's
        sources = metal_sources(snapshot)
        mutants = build_mutants(snapshot, sources)
        digest = tree_digest(snapshot)
        print(f"tree {commit[:12]} (digest {digest}); {len(mutants)} mutants of "
              f"{len(sources)} Metal sources:", flush=True)
        for src in sources:
            n = sum(m["source"] == src.key for m in mutants)
            print(f"  {src.key:32s} {n:4d} mutants -> {', '.join(src.variants)}")
        if args.list:
            for m in mutants:
                print(f"{m['id']:60s} {m['description'][:100]}")
            return 0
        checks = _also_checks(args, snapshot)
        if checks:
            return _run_also(args, cached, mutants, checks, commit, work, snapshot, json_path,
                             md_path, started)
        if cached and not args.fresh and cached.get("tree_digest") != digest:
            print(f"{json_path.relative_to(ROOT)} holds results for tree "
                  f"{cached.get('commit', '?')[:12]}, not this one: --commit "
                  f"{cached.get('commit', '?')[:12]} resumes it, --fresh starts over",
                  file=sys.stderr)
            return 2
        cache = {} if args.fresh else cached
        results: dict[str, dict] = dict(cache.get("results", {}))
        todo = [m for m in mutants if m["id"] not in results]
        if args.only:
            wanted = args.only.split(",")
            todo = [m for m in todo if any(w in m["id"] for w in wanted)]
        if args.limit is not None:
            todo = todo[:args.limit]
        print(f"{len(results)} cached, {len(todo)} to run", flush=True)
        slots = _slots(work, snapshot, args.jobs)
        specs = {arch: _suite_spec(snapshot, arch) for arch in DEVICES}
        lock = threading.Lock()
        exercised = dict(cache.get("exercised", {}))
        runs = list(cache.get("runs", []))

        def save(final: bool = False) -> dict:
            done = [m for m in mutants if m["id"] in results]
            out = {
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "suite": SUITE, "devices": list(DEVICES), "commit": commit,
                "tree_digest": digest, "generator_version": GENERATOR_VERSION,
                "jobs": args.jobs, "command": command,
                "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
                "job_timeout_s": JOB_TIMEOUT_S, "exercised": exercised, "runs": runs,
                "sources": [{"key": s.key, "path": s.path, "variants": list(s.variants),
                             "mutants": sum(m["source"] == s.key for m in mutants)}
                            for s in sources],
                "summary": summarize(done, results, exercised),
                "mutants": [{k: v for k, v in m.items() if not k.startswith("_")}
                            for m in mutants],
                "results": results,
                "judgements": {k: {"verdict": v[0], "why": v[1]} for k, v in JUDGEMENTS.items()
                               if k in results},
                "also": cache.get("also", {}),
            }
            measured = max(runs, key=lambda r: r["mutants_run"], default=None)
            out["measured_wall_s"] = measured["wall_s"] if measured else 0.0
            out["measured_mutants"] = measured["mutants_run"] if measured else 0
            out["measured_command"] = measured.get("command", command) if measured else command
            out["mutant_seconds"] = round(sum(r.get("wall_s", 0) for r in results.values()), 1)
            RESULTS.mkdir(parents=True, exist_ok=True)
            tmp = json_path.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(out, indent=1) + "\n")
            os.replace(tmp, json_path)
            if final:
                md_path.write_text(write_report(out, mutants, results))
            return out

        # The unmutated tree first, on both devices: it must pass (else nothing is measured),
        # it says which variants the suite runs where, and its builds stay in each slot's cache.
        bases = _in_slots(slots, lambda slot: [run_device(slot, specs[a]) for a in DEVICES])
        for i, (slot, per_device) in enumerate(zip(slots, bases)):
            for base in per_device:
                arch = base["device"]
                if base["killed"] or not str(base.get("kernels")).startswith(str(slot.tree)):
                    print(f"the unmutated tree fails {SUITE} on {arch}: "
                          f"{base['status']} {base['failures'][:3]}", file=sys.stderr)
                    return 1
                exercised[arch] = base["selected"]
                print(f"baseline {arch} (slot {i}): {base['tests']} tests passed in "
                      f"{base['wall_s']:.1f} s; Metal variants run: "
                      f"{', '.join(base['selected'])}", flush=True)
            slot.remember_builds()

        t_run = time.monotonic()
        for n, (m, r) in enumerate(_pool(slots, todo, lambda slot, m: run_mutant(
                slot, m, specs, snapshot)), 1):
            with lock:
                results[m["id"]] = r
                save()
            state = ("no-compile" if not r["compiles"] else
                     "KILLED" if r["killed"] else "survived")
            why = ""
            if r.get("killed"):
                d = next(d for d in r["devices"] if d["killed"])
                f = d["failures"][0] if d["failures"] else {"nodeid": d["status"],
                                                            "message": d.get("error")}
                why = f"{d['device']}: {f['nodeid'].split('::')[-1]}: {f['message'][:90]}"
            print(f"[{n}/{len(todo)} {time.monotonic() - t_run:6.0f}s] "
                  f"{m['id']:58s} {state:10s} {r['wall_s']:5.1f}s {why}", flush=True)
        runs.append({"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                     "mutants_run": len(todo), "wall_s": round(time.monotonic() - started, 1),
                     "command": command})
        out = save(final=True)
    _print_tables(out["summary"])
    print(f"\nwrote {json_path.relative_to(ROOT)} and {md_path.relative_to(ROOT)}; "
          f"this invocation {time.monotonic() - started:.0f} s")
    return 0



def _run_also(args, cached: dict, mutants: list[dict], checks, commit: str, work: Path,
              snapshot: Path, json_path: Path, md_path: Path, started: float) -> int:
    """The JSON's m8-parity survivors through other checks (same mutant ids, this tree)."""
    results = cached.get("results", {})
    survivors = {i for i, r in results.items() if r.get("compiles") and not r.get("killed")}
    todo = [m for m in mutants if m["id"] in survivors]
    if args.only:
        todo = [m for m in todo if any(w in m["id"] for w in args.only.split(","))]
    missing = survivors - {m["id"] for m in mutants}
    if missing:
        print(f"{len(missing)} survivors are not mutants of this tree (source changed): "
              f"{sorted(missing)}", file=sys.stderr)
    slots = _slots(work, snapshot, args.jobs)
    for label, spec, pytest_args in checks:
        base = also_run(slots[0], label, spec, pytest_args)
        if base["killed"]:
            print(f"{label} fails on the unmutated tree: {base['why']}", file=sys.stderr)
            return 1
        print(f"baseline {label}: passes", flush=True)
    also = cached.setdefault("also", {})
    for label, spec, pytest_args in checks:
        also[label] = {"commit": commit, "command": "python bench/mutation_score.py "
                       + shlex.join(sys.argv[1:]),
                       "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}

    def run(slot: Slot, m: dict) -> dict:
        target = slot.tree / m["path"]
        original = target.read_text(encoding="utf-8")
        target.write_text(m["_file"], encoding="utf-8")
        try:
            return {label: also_run(slot, label, spec, pytest_args)
                    for label, spec, pytest_args in checks}
        finally:
            target.write_text(original, encoding="utf-8")
            slot.forget_mutant_builds()

    for n, (m, r) in enumerate(_pool(slots, todo, run), 1):
        results[m["id"]].setdefault("also", {}).update(r)
        json_path.write_text(json.dumps(cached, indent=1) + "\n")
        print(f"[{n}/{len(todo)}] {m['id']:58s} " + "; ".join(
            f"{label}: {'KILLED' if v['killed'] else 'survived'} {v['why'][:80]}"
            for label, v in r.items()), flush=True)
    for label, *_ in checks:
        also[label]["wall_s"] = round(time.monotonic() - started, 1)
        also[label]["mutants_run"] = len(todo)
    cached["summary"] = summarize(cached["mutants"], results, cached["exercised"])
    json_path.write_text(json.dumps(cached, indent=1) + "\n")
    md_path.write_text(write_report(cached, cached["mutants"], results))
    print(f"this invocation {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
