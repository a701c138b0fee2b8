"""A few cold launches per path for ncu to time (kernel duration, DRAM throughput, occupancy).

    ncu --clock-control none --cache-control all -k regex:'qmm|qmv|dflash2' --csv \\
        --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \\
        python bench/cuda_verify_ncu.py [--cold-sweep DIR/cuda_verify_cold_sweep.json]
                                        [--points] [--shapes ...] [--dtypes ...] [--ms 8]
    python bench/cuda_verify_ncu.py --summarize ncu.csv > ncu.md

ncu flushes the caches before every kernel with --cache-control all, so each launch is cold,
and it serialises launches: its durations are each kernel ALONE. The batched timings of
bench/cuda_verify.py and bench/cuda_verify_cold_sweep.py are not: MLX's CUDA back-end records
up to 20 launches in one CUDA graph with edges only where data flows, so independent launches
of a batch (each a different weight copy) may run concurrently, and a kernel that fills a
fraction of the GPU looks faster there than it is alone.
Launches are evaluated one at a time, in the order printed, so the CSV's rows map onto them.
With --cold-sweep, the custom kernel also runs at the tile the cold sweep
(bench/cuda_verify_cold_sweep.py) chose at M=8; with --points, at every tile of that sweep's
POINTS (the isolated ranking of the whole sweep).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import json

import cuda_verify as cv
import mlx.core as mx

REPS = 3
TILE_KEYS = ("n_tile", "k_groups", "unroll", "prefetch", "stages", "l2_prefetch", "x_early")


def summarize(path: str) -> str:
    """The CSV (ncu --csv, this script's NCU_ORDER lines mixed in) as a markdown table: one row
    per profiled launch, labelled with the path it belongs to."""
    lines = Path(path).read_text().splitlines()
    order = [ln for ln in lines if ln.startswith("NCU_ORDER")]
    rows = list(csv.reader(ln for ln in lines if ln.startswith('"')))
    hdr, body = rows[0], rows[1:]
    kernels: dict[str, dict] = {}
    for r in body:
        d = dict(zip(hdr, r, strict=False))
        k = kernels.setdefault(d["ID"], {"name": d["Kernel Name"][:40], "grid": d["Grid Size"],
                                         "block": d["Block Size"]})
        if d.get("Metric Name"):
            k[d["Metric Name"]] = d["Metric Value"]
            k[d["Metric Name"] + " unit"] = d.get("Metric Unit", "")
    labels = []
    for ln in order:  # "NCU_ORDER op dtype M=m path... xN"
        head, reps = ln.rsplit(" x", 1)
        labels += [head.removeprefix("NCU_ORDER ")] * int(reps)
    out = [("| launch | kernel | grid | block | us | DRAM % of peak | DRAM MB read | "
            "L2 MB | warps active % | regs |"), "|---|---|---|---|---|---|---|---|---|---|"]
    for i, (_, k) in enumerate(sorted(kernels.items(), key=lambda kv: int(kv[0]))):
        label = labels[i] if i < len(labels) else "?"

        def num(*names, div=1.0, k=k):  # the first metric present (raw or section name)
            for name in names:
                v = k.get(name)
                if v:
                    scale = {"ns": 1e3, "nsecond": 1e3, "usecond": 1.0, "us": 1.0,
                             "msecond": 1e-3}.get(k.get(name + " unit"), div)
                    return f"{float(v.replace(',', '')) / scale:.1f}"
            return "-"
        regs = k.get("launch__registers_per_thread") or k.get("Registers Per Thread", "-")
        out.append(f"| {label} | {k['name']} | {k['grid']} | {k['block']} | "
                   f"{num('gpu__time_duration.sum', 'Duration', div=1e3)} | "
                   f"{num('dram__throughput.avg.pct_of_peak_sustained_elapsed', 'DRAM Throughput')}"
                   f" | {num('dram__bytes_read.sum', div=1e6)} | "
                   f"{num('lts__t_bytes.sum', div=1e6)} | "
                   f"{num('sm__warps_active.avg.pct_of_peak_sustained_active')} | {regs} |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cold-sweep", default=None)
    ap.add_argument("--points", action="store_true")
    ap.add_argument("--shapes", default=",".join(cv.SHAPES))
    ap.add_argument("--dtypes", default=",".join(cv.DTYPES))
    ap.add_argument("--ms", default="8")
    ap.add_argument("--reps", type=int, default=REPS)
    ap.add_argument("--summarize", default=None, metavar="CSV")
    args = ap.parse_args(argv)
    if args.summarize:
        sys.stdout.write(summarize(args.summarize))
        return 0
    sweep = json.loads((cv.ROOT / "bench" / "results" / "h200" / "cuda_verify.json").read_text())
    cold = json.loads(Path(args.cold_sweep).read_text()) if args.cold_sweep else None
    for op in args.shapes.split(","):
        k, n = cv.SHAPES[op]
        for dt_name in args.dtypes.split(","):
            dt = cv.DTYPES[dt_name]
            (qw,) = cv.make_copies(k, n, dt, 1)
            name, params = cv.sweep_choice(sweep, op, dt_name)
            paths = [("stock", cv.stock), (f"custom {params}", cv.custom_fn(name, params))]
            best = ((cold or {}).get("shapes", {}).get(f"{op}/{dt_name}") or {}).get("best_m8")
            if best:
                p = {key: best[key] for key in TILE_KEYS if key in best}
                paths.append((f"cold-best {p}", cv.custom_fn("mma_weights_a", p)))
            if args.points:
                import cuda_verify_cold_sweep as cs
                for pt in cs.POINTS[op]:
                    p = cs.as_params(pt)
                    paths.append((f"tile {p}", cv.custom_fn("mma_weights_a", p)))
            for m in (int(v) for v in args.ms.split(",")):
                x = (mx.random.normal((m, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
                mx.eval(x)
                for path, fn in paths:
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
