#!/usr/bin/env python
"""What running the Metal sources costs: m8-parity on emulated g13s and g14, three ways, one run.

Modes (each a separate process, wall clock from start to end):

1. ``portable``   ``DFLASH2_EMULATE_METAL=0``: every custom variant runs its portable MLX form
                  (the path before the emulator existed).
2. ``emu-cold``   the Metal sources, compiled and executed, with an empty build cache
                  (``DFLASH2_EMU_CACHE`` a fresh folder; MLX's metal wheel is taken from the
                  warm cache, so this prices compiling, not downloading; zig's own cache of its
                  libc is warm, as it is after the first build on any machine).
3. ``emu-warm``   the same again with the cache the cold run filled: nothing compiles.

Each mode is timed two ways: plain ``pytest`` of the suite on one emulated device per device
(the suite's own cost), and ``farm run --suite m8-parity --devices g13s,g14`` on the embedded
fleet (what a user waits for, Ray's start included). Ratios are against ``portable`` measured
in the same run. Goal: emu-warm at most 2x portable.

Never run as a unit test: ``python bench/bench_emulator.py [--reps 2]``. Writes
bench/results/emulator.json and bench/results/emulator.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SUITE = "m8-parity"
DEVICES = ("applegpu_g13s", "applegpu_g14s")


def _env(mode: str, cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["DFLASH2_EMULATE_METAL"] = "0" if mode == "portable" else "1"
    env["DFLASH2_EMU_CACHE"] = str(cache)
    return env


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or [""]
    return wall, r.returncode, tail[0]


def _pytest(arch: str, env: dict[str, str]) -> tuple[float, int, str]:
    from suites.manifest import load_manifest

    args = load_manifest()[SUITE].pytest_args()
    return _timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args,
                   "--device-arch", arch], env)


def _farm(env: dict[str, str], db: Path) -> tuple[float, int, str]:
    farm = str(Path(sys.executable).with_name("farm"))
    return _timed([farm, "run", "--suite", SUITE, "--devices", "g13s,g14", "--db", str(db)], env)


def _seed_cache(cache: Path, warm: Path) -> None:
    """A fresh build cache that still holds MLX's metal sources (no download in the timing)."""
    cache.mkdir(parents=True, exist_ok=True)
    if (warm / "mlx-metal").exists():
        shutil.copytree(warm / "mlx-metal", cache / "mlx-metal", dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=2, help="repetitions of portable and emu-warm")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from kernels.metal_emu import mlx_metal

    mlx_metal.extracted()  # the wheel in the user's cache, once, before any timing
    warm_root = mlx_metal.cache_root()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-emu-") as tmp:
        tmp = Path(tmp)

        def record(mode: str, how: str, cache: Path, rep: int) -> None:
            env = _env(mode, cache)
            if how == "pytest":
                for arch in DEVICES:
                    wall, rc, tail = _pytest(arch, env)
                    rows.append({"mode": mode, "how": how, "device": arch, "rep": rep,
                                 "wall_s": round(wall, 2), "rc": rc, "summary": tail})
                    print(f"{mode:9s} {how:6s} {arch:14s} rep {rep}: {wall:6.1f} s rc={rc} {tail}",
                          flush=True)
            else:
                wall, rc, tail = _farm(env, tmp / f"{mode}-{rep}.db")
                rows.append({"mode": mode, "how": how, "device": "g13s,g14", "rep": rep,
                             "wall_s": round(wall, 2), "rc": rc, "summary": tail})
                print(f"{mode:9s} {how:6s} g13s,g14       rep {rep}: {wall:6.1f} s rc={rc} {tail}",
                      flush=True)

        for how in ("pytest", "farm"):
            cold = tmp / f"cache-{how}"
            _seed_cache(cold, warm_root)
            for rep in range(args.reps):
                record("portable", how, cold, rep)
            record("emu-cold", how, cold, 0)
            for rep in range(args.reps):
                record("emu-warm", how, cold, rep)

    def med(mode: str, how: str) -> float:
        walls = [r["wall_s"] for r in rows if r["mode"] == mode and r["how"] == how]
        if how == "pytest":  # both devices, one after the other, per repetition
            reps = sorted({r["rep"] for r in rows if r["mode"] == mode and r["how"] == how})
            walls = [sum(r["wall_s"] for r in rows if r["mode"] == mode and r["how"] == how
                         and r["rep"] == rep) for rep in reps]
        return statistics.median(walls)

    summary = {}
    for how in ("pytest", "farm"):
        base = med("portable", how)
        summary[how] = {m: {"wall_s": round(med(m, how), 2), "ratio": round(med(m, how) / base, 2)}
                        for m in ("portable", "emu-cold", "emu-warm")}
    ok = all(r["rc"] == 0 for r in rows)
    out = {"date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "suite": SUITE, "devices": list(DEVICES), "reps": args.reps, "all_exit_0": ok,
           "summary": summary, "runs": rows,
           "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "emulator.json").write_text(json.dumps(out, indent=1) + "\n")
    lines = ["# Metal emulator cost: m8-parity on emulated g13s and g14", "",
             (f"{out['date']}, {os.cpu_count()} CPUs; median of {args.reps} (cold: one run). "
             "`pytest`: the suite on g13s then g14s, plain pytest; `farm`: `farm run --suite "
             "m8-parity --devices g13s,g14` on the embedded fleet (Ray's start included)."), "",
             "| how | portable s | emu-cold s | emu-warm s | cold / portable | warm / portable |",
             "|---|---|---|---|---|---|"]
    for how in ("pytest", "farm"):
        s = summary[how]
        lines.append(f"| {how} | {s['portable']['wall_s']} | {s['emu-cold']['wall_s']} | "
                     f"{s['emu-warm']['wall_s']} | {s['emu-cold']['ratio']}x | "
                     f"{s['emu-warm']['ratio']}x |")
    lines += ["", f"Every run exited 0: {ok}.", ""]
    (RESULTS / "emulator.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
