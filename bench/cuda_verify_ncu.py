"""A few cold launches per path for ncu to time (kernel duration, DRAM throughput, occupancy).

    ncu --clock-control none --cache-control all -k regex:'qmm|qmv|dflash2' --csv \\
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python bench/cuda_verify_ncu.py [--cold-sweep DIR/cuda_verify_cold_sweep.json]
                                        [--points [SET]] [--shapes ...] [--dtypes ...] [--ms 8]
    python bench/cuda_verify_ncu.py --summarize ncu.csv > ncu.md
    ncu ... python bench/cuda_verify_ncu.py --rows DIR/cuda_verify.json > ncu_rows.csv

With --rows, every row of bench/cuda_verify.py's results (stock and the row's custom kernel and
tile, at the row's shape, dtype and M) is launched; ``merge`` puts ncu's times back into those
rows (bench/cuda_verify.py --ncu runs both).

ncu flushes the caches before every kernel with --cache-control all, so each launch is cold,
and it serialises launches: its durations are each kernel ALONE. The batched timings of
bench/cuda_verify.py and bench/cuda_verify_cold_sweep.py are not: MLX's CUDA back-end records
up to 20 launches in one CUDA graph with edges only where data flows, so independent launches
of a batch (each a different weight copy) may run concurrently, and a kernel that fills a
fraction of the GPU looks faster there than it is alone.
Launches are evaluated one at a time, in the order printed, so the CSV's rows map onto them.
With --cold-sweep, the custom kernel also runs at the tile the cold sweep
(bench/cuda_verify_cold_sweep.py) chose at M=8; with --points, at every tile that sweep timed
(the isolated ranking of the whole sweep), and with --points SET at every tile of a named set
of bench/sweep_points.SETS.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import json

import cuda_verify as cv
import mlx.core as mx
import sweep_points as sp
from cuda_verify_report import cell
from sass_stalls import read as read_csv  # a CSV's text, gzipped (.gz) or not

REPS = 3


UNITS_PER_US = {"ns": 1e3, "nsecond": 1e3, "usecond": 1.0, "us": 1.0, "msecond": 1e-3}


def parse(text: str) -> list[dict]:
    """The CSV (ncu --csv, this script's NCU_ORDER lines mixed in) as one record per profiled
    launch, in launch order: ``label`` (the path it belongs to, from NCU_ORDER), ``name``,
    ``grid``, ``block`` and every metric as ``metrics[name] = (value, unit)``."""
    lines = text.splitlines()
    order = [ln for ln in lines if ln.startswith("NCU_ORDER")]
    rows = list(csv.reader(ln for ln in lines if ln.startswith('"')))
    if not rows:
        return []
    hdr, body = rows[0], rows[1:]
    kernels: dict[str, dict] = {}
    for r in body:
        d = dict(zip(hdr, r, strict=False))
        k = kernels.setdefault(d["ID"], {"name": d["Kernel Name"], "grid": d["Grid Size"],
                                         "block": d["Block Size"], "metrics": {}, "rules": []})
        if d.get("Metric Name"):
            k["metrics"][d["Metric Name"]] = (d["Metric Value"], d.get("Metric Unit", ""))
        elif d.get("Rule Name"):  # a section's finding (stall reasons, occupancy limits)
            k["rules"].append(f"{d.get('Section Name', '')}/{d['Rule Name']}: "
                              f"{d.get('Rule Description', '')}")
    labels = []
    for ln in order:  # "NCU_ORDER op dtype M=m path... xN"
        head, reps = ln.rsplit(" x", 1)
        labels += [head.removeprefix("NCU_ORDER ")] * int(reps)
    out = []
    for i, (_, k) in enumerate(sorted(kernels.items(), key=lambda kv: int(kv[0]))):
        out.append({"label": labels[i] if i < len(labels) else "?", **k})
    return out


def csv_of(launches: list[tuple[str, str, float]]) -> str:
    """``parse``'s inverse for kernel times alone: (label, kernel name, us) a launch, as an ncu
    run of this script writes them (NCU_ORDER lines, then the CSV). What the chooser is fed in
    tests and in the device plan's rehearsal (scripts/rehearse_h200_plan.py)."""
    hdr = ["ID", "Kernel Name", "Block Size", "Grid Size", "Metric Name", "Metric Unit",
           "Metric Value"]
    lines = [f"NCU_ORDER {label} x1" for label, _, _ in launches]
    lines.append(",".join(f'"{h}"' for h in hdr))
    for i, (_, kernel, us) in enumerate(launches):
        lines.append(",".join(f'"{v}"' for v in (i, kernel, "(128, 1, 1)", "(544, 1, 1)",
                                                 "gpu__time_duration.sum", "usecond", us)))
    return "\n".join(lines) + "\n"


def metric(k: dict, *names: str, div: float = 1.0) -> float | None:
    """The first of ``names`` present in one parsed launch, as a float; a time in µs (by its
    unit), anything else divided by ``div``."""
    for name in names:
        v, unit = k["metrics"].get(name, ("", ""))
        if v:
            return float(v.replace(",", "")) / UNITS_PER_US.get(unit, div)
    return None


def duration_us(k: dict) -> float | None:
    return metric(k, "gpu__time_duration.sum", "Duration", div=1e3)


# The busiest SM's active cycles over the mean SM's: above 1, SMs that hold one block more than
# the rest (544 blocks on 132 SMs: 16 of them hold 5) still run after the others are done.
SM_BUSY = ("sm__cycles_active.max", "sm__cycles_active.avg")


def sm_imbalance(k: dict) -> float | None:
    busiest, mean = (metric(k, name) for name in SM_BUSY)
    return busiest / mean if busiest and mean else None


# The share of cycles a scheduler issued an instruction, and the warp instructions in all: near
# 100% a kernel is held by its own instruction stream, not by what it waits on (the ablated
# kernels' "math alone" asks this of the math).
ISSUE_ACTIVE = "smsp__issue_active.avg.pct_of_peak_sustained_active"
# DRAM throughput as a share of its peak: the light metric, then the sections' name for it
DRAM_PCT = ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "DRAM Throughput")
WARP_INSTRUCTIONS = "smsp__inst_executed.sum"


def summarize(path: str) -> str:
    """The CSV as a markdown table: one row per profiled launch, labelled with its path (with
    the SMs' imbalance, the issue slots' use and the instruction count where the run measured
    them)."""
    launches = parse(read_csv(path))
    busy = any(sm_imbalance(k) is not None for k in launches)
    issue = any(metric(k, ISSUE_ACTIVE) is not None for k in launches)
    out = [("| launch | kernel | grid | block | us | DRAM % of peak | DRAM MB read | "
            "L2 MB | warps active % | regs |" + (" SM busy max/mean |" if busy else "")
            + (" issue active % | warp inst (M) |" if issue else "")),
           "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if busy else "")
           + ("---|---|" if issue else "")]
    for k in launches:
        def num(*names, div=1.0, k=k):
            v = metric(k, *names, div=div)
            return "-" if v is None else f"{v:.1f}"
        regs = (k["metrics"].get("launch__registers_per_thread")
                or k["metrics"].get("Registers Per Thread") or ("-",))[0]
        out.append(f"| {k['label']} | {k['name'][:40]} | {k['grid']} | {k['block']} | "
                   f"{num('gpu__time_duration.sum', 'Duration', div=1e3)} | "
                   f"{num(*DRAM_PCT)}"
                   f" | {num('dram__bytes_read.sum', div=1e6)} | "
                   f"{num('lts__t_bytes.sum', div=1e6)} | "
                   f"{num('sm__warps_active.avg.pct_of_peak_sustained_active')} | {regs} |"
                   + (f" {cell(sm_imbalance(k), '{:.2f}')} |" if busy else "")
                   + (f" {num(ISSUE_ACTIVE)} | {num(WARP_INSTRUCTIONS, div=1e6)} |"
                      if issue else ""))
    return "\n".join(out) + "\n"


def row_label(r: dict, path: str) -> str:
    """The NCU_ORDER label of one bench row's launch (``path``: stock or custom)."""
    return f"row {r['shape']} {r['dtype']} M={r['M']} {path}"


# A bench row's paths under ncu and how each one's kernel is known by name: stock is MLX's QMM,
# custom a dflash2 kernel, read the bare read of the row's bytes (read_sizes_ncu).
PATH_KERNELS = (("stock", lambda name: "qmm" in name or "qmv" in name),
                ("custom", lambda name: "dflash2" in name and "dflash2_read" not in name),
                ("read", lambda name: "dflash2_read" in name))


def merge(res: dict, text: str, source: str, times: bool = True) -> int:
    """Put ncu's time of each bench row's stock and custom launch (each ALONE, caches flushed:
    cold) into ``res['rows']``: ``ncu_{stock,custom}_us`` (median over the launches), their
    DRAM throughput, warps active and registers, % of the read ceiling and the ratio to stock;
    with a bare read of the row's bytes launched too, ``ncu_read_us`` and the custom kernel's
    rate as a share of that read's (``ncu_custom_pct_of_bare_read``: what a launch of this
    size can reach at all, read_sizes_ncu).
    A launch whose kernel is not the path's (stock: MLX's qmm/qmv; custom: dflash2) is left
    out, not mislabelled. Returns the number of rows that got both times."""
    by: dict[str, list[dict]] = {}
    for k in parse(text):
        by.setdefault(k["label"], []).append(k)
    both = 0
    for r in res.get("rows", []):
        for path, is_path in PATH_KERNELS:
            ks = [k for k in by.get(row_label(r, path), [])
                  if is_path(k["name"]) and duration_us(k) is not None]
            if not ks:
                continue
            if times:
                ts = sorted(duration_us(k) for k in ks)
                r[f"ncu_{path}_us"] = statistics.median(ts)
                r[f"ncu_{path}_all_us"] = ts
                r[f"ncu_{path}_pct_ceiling"] = r["floor_us"] / r[f"ncu_{path}_us"]
            for key, names in (("dram_pct", DRAM_PCT),
                               ("warps_active_pct",
                                ("sm__warps_active.avg.pct_of_peak_sustained_active",)),
                               ("registers", ("launch__registers_per_thread",
                                              "Registers Per Thread")),
                               ("achieved_occupancy_pct", ("Achieved Occupancy",)),
                               ("theoretical_occupancy_pct", ("Theoretical Occupancy",)),
                               ("waves_per_sm", ("Waves Per SM",)),
                               ("cycles_per_issue", ("Warp Cycles Per Issued Instruction",)),
                               ("block_limit_registers", ("Block Limit Registers",))):
                v = metric(ks[0], *names)
                if v is not None:
                    r[f"ncu_{path}_{key}"] = v
            if sm_imbalance(ks[0]) is not None:
                r[f"ncu_{path}_sm_busy_max_over_mean"] = sm_imbalance(ks[0])
            r[f"ncu_{path}_grid"], r[f"ncu_{path}_block"] = ks[0]["grid"], ks[0]["block"]
            if ks[0].get("rules"):
                r[f"ncu_{path}_findings"] = [t[:400] for t in ks[0]["rules"]
                                             if "could not be found" not in t]
        if "ncu_read_us" in r and "ncu_custom_us" in r:
            r["ncu_custom_pct_of_bare_read"] = r["ncu_read_us"] / r["ncu_custom_us"]
        if "ncu_stock_us" in r and "ncu_custom_us" in r:
            r["ncu_custom_speedup_vs_stock"] = r["ncu_stock_us"] / r["ncu_custom_us"]
            both += 1
    if not times:
        res.setdefault("ncu", {})["limits_source"] = source
        return both
    res["ncu"] = {"source": source, "rows_timed": both,
                  "method": "ncu --clock-control none --cache-control all: each launch alone "
                            "(ncu serialises kernels), caches flushed before it (cold), "
                            "median over the launches per path"}
    return both


def launch_rows(res: dict, reps: int, ms: set[int] | None = None,
                shapes: set[str] | None = None, dtypes: set[str] | None = None) -> int:
    """The launches ``merge`` reads back: every row's (at M in ``ms``, of ``shapes`` and
    ``dtypes`` where given) stock and custom path, one weight copy, then a bare read of the
    row's bytes."""
    import read_sizes_ncu as rs
    reader = rs.read_kernel()
    made: dict = {}
    for r in res.get("rows", []):
        if (r.get("custom_error") or (ms and r["M"] not in ms)
                or (shapes and r["shape"] not in shapes) or (dtypes and r["dtype"] not in dtypes)):
            continue
        key = (r["shape"], r["dtype"])
        if key not in made:
            made.clear()  # one shape's weights on the GPU at a time
            made[key] = cv.make_copies(r["K"], r["N"], cv.DTYPES[r["dtype"]], 1)[0]
        qw = made[key]
        x = (mx.random.normal((r["M"], r["K"]), key=mx.random.key(7)) / r["K"] ** 0.25
             ).astype(cv.DTYPES[r["dtype"]])
        mx.eval(x)
        for path, fn in (("stock", cv.stock), ("custom", cv.custom_fn(r["kernel"], r["params"]))):
            for _ in range(reps):
                mx.eval(fn(x, qw.wq, qw.scales, qw.biases))
            print(f"NCU_ORDER {row_label(r, path)} x{reps}", flush=True)
        if r.get("bytes"):
            rs.read_launches(reader, r["bytes"], reps)
            print(f"NCU_ORDER {row_label(r, 'read')} x{reps}", flush=True)
    return 0


NCU_METRICS = ("gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,"
               "dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,"
               "launch__grid_size,launch__registers_per_thread,"
               "sm__cycles_active.max,sm__cycles_active.avg")


# The sections that say what limits a kernel: achieved bandwidth, occupancy and its limits, warp
# stall findings, waves.
NCU_SECTIONS = ("--section", "SpeedOfLight", "--section", "Occupancy", "--section",
                "LaunchStats", "--section", "WarpStateStats")


def profile_rows(out: Path, res: dict, timeout: float, reps: int = 2) -> None:
    """Kernel time from the profiler: ncu runs bench/cuda_verify_ncu.py --rows on this run's
    JSON (every row's stock and custom launch, each alone, caches flushed) in a child process;
    its CSV is kept beside the JSON and merged into the rows."""
    ncu = (res.get("profilers", {}).get("ncu") or {}).get("path")
    if not ncu:
        res["ncu"] = {"absent": "no ncu on this machine: the one-launch times are the chain's"}
        return
    for csv_name, sections, ms, n_reps in (("cuda_verify_ncu_rows.csv", (), "", reps),
                                           ("cuda_verify_ncu_limits.csv", NCU_SECTIONS, "8", 1)):
        # times of every row (one pass a kernel), then what limits the M=8 rows (more passes)
        csv_path = out / csv_name
        cmd = [ncu, "--clock-control", "none", "--cache-control", "all", "-k",
               "regex:qmm|qmv|dflash2", "--csv", *sections, "--metrics", NCU_METRICS,
               sys.executable, str(Path(__file__).resolve()), "--rows",
               str(out / "cuda_verify.json"), "--reps", str(n_reps), "--ms", ms]
        mx.clear_cache()
        try:
            with csv_path.open("w") as f:
                rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout,
                                    check=False).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        n = merge(res, csv_path.read_text(), csv_path.name, times=not sections)
        res["ncu"][f"rc {csv_name}"] = rc
        print(f"ncu {csv_name}: rc {rc}, {n} rows with stock and custom", flush=True)


def point_tiles(given: str | None, cold: dict | None, shape: str, no_ring: bool = False,
                no_bulk: bool = False) -> list[dict]:
    """The tiles --points adds for a shape ("op/dtype"): those of the set given by name, else
    every point the --cold-sweep JSON timed there (without one, the next set). A bare --points
    once took the next set, not the sweep's bulk-x, and ncu timed out before reaching it
    (2026-12-05 23:06, bench/results/h100/bulk_x_2303)."""
    if given is None:
        return []
    op = shape.split("/")[0]
    if given or cold is None:
        return [sp.as_params(pt) for pt in
                sp.selected(sp.SETS[given or "next"].get(op, []), no_ring, no_bulk)]
    rows = ((cold.get("shapes") or {}).get(shape) or {}).get("points", [])
    return [sp.tile_of(row) for row in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold-sweep", default=None)
    ap.add_argument("--points", nargs="?", const="", default=None, metavar="SET",
                    help="also every tile the --cold-sweep JSON timed, each alone (with no "
                         "JSON, the next set), or every tile of SET (bench/sweep_points.SETS)")
    ap.add_argument("--no-ring", action="store_true", help="with --points: no cp.async ring tiles")
    ap.add_argument("--no-bulk", action="store_true",
                    help="with --points: no bulk pipeline tiles (h200.sh passes it when the "
                         "sweep's bulk smoke test failed)")
    ap.add_argument("--shapes", default=",".join(cv.SHAPES))
    ap.add_argument("--dtypes", default=",".join(cv.DTYPES))
    ap.add_argument("--ms", default="8", help="the M to launch (with --rows: '' for every row's)")
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--tiles", default=None, metavar="JSON",
                    help="a JSON list of mma_weights_a params (another variant's with a "
                         "\"variant\" key), each launched beside the committed tile (tiles "
                         "the cold sweep does not list)")
    ap.add_argument("--summarize", default=None, metavar="CSV")
    ap.add_argument("--rows", default=None, metavar="JSON",
                    help="launch each row of bench/cuda_verify.py's JSON (its stock and its "
                         "custom kernel and tile, at its shape, dtype and M) --reps times")
    args = ap.parse_args(argv)
    if args.summarize:
        sys.stdout.write(summarize(args.summarize))
        return 0
    if args.rows:
        given = {o: set(getattr(args, o).split(",")) for o in ("shapes", "dtypes")
                 if getattr(args, o) != ap.get_default(o)}
        return launch_rows(json.loads(Path(args.rows).read_text()), args.reps,
                           {int(v) for v in args.ms.split(",")} if args.ms else None, **given)
    sweep = json.loads((cv.ROOT / "bench" / "results" / "h200" / "cuda_verify.json").read_text())
    cold = json.loads(Path(args.cold_sweep).read_text()) if args.cold_sweep else None
    table = json.loads((cv.ROOT / "kernels" / "selection_table.json").read_text())
    if args.points and args.points not in sp.SETS:
        ap.error(f"--points {args.points}: no such set; the sets: {', '.join(sp.SETS)}")
    for op in args.shapes.split(","):
        k, n = cv.SHAPES[op]
        for dt_name in args.dtypes.split(","):
            dt = cv.DTYPES[dt_name]
            (qw,) = cv.make_copies(k, n, dt, 1)
            paths = [("stock", cv.stock)]
            magnitude = cv.scale_magnitude([qw])
            tiles = []
            best = ((cold or {}).get("shapes", {}).get(f"{op}/{dt_name}") or {}).get("best_m8")
            if best:
                tiles.append(("cold-best", sp.tile_of(best)))
            tiles += [("tile", p) for p in (json.loads(args.tiles) if args.tiles else [])]
            tiles += [("tile", p) for p in point_tiles(args.points, cold, f"{op}/{dt_name}",
                                                       args.no_ring, args.no_bulk)]
            for label, p in tiles:
                if cv.runs_plain(p, dt_name, magnitude):
                    # these weights would run it plain: its time would be the plain tile's
                    print(f"NCU_SKIP {op} {dt_name} {label} {p}: scales over denorm's limit "
                          f"({magnitude:.3g})", flush=True)
                    continue
                paths.append((f"{label} {p}", cv.custom_fn(*sp.launch_of(p))))
            for m in (int(v) for v in args.ms.split(",")):
                x = (mx.random.normal((m, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
                mx.eval(x)
                # the tile the committed table ships at this M (as the bench picks it)
                name, params, _ = cv.tile_for(table, sweep, op, k, dt_name, m)
                for path, fn in (paths[:1] + [(f"custom {params}", cv.custom_fn(name, params))]
                                 + paths[1:]):
                    try:
                        for _ in range(args.reps):
                            mx.eval(fn(x, qw.wq, qw.scales, qw.biases))
                    except ValueError as e:  # a tile that does not tile this M: no launch
                        print(f"NCU_SKIP {op} {dt_name} M={m} {path}: {str(e)[-80:]}",
                              flush=True)
                        continue
                    print(f"NCU_ORDER {op} {dt_name} M={m} {path} x{args.reps}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
