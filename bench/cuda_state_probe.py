"""After which launch does the device go wrong? A probe for the cold sweep's 2026-12-07 08:30
run (an H100), where stock QMM, fine at a shape's start (42.1 us), timed 3.6 us and gave
600 ulps against float64 once the x-sharing points had run, and the plain tile's check failed.

    python bench/cuda_state_probe.py [--shape gate_up] [--points xshare] [--out DIR]

The weights, x and stock's output are kept as host copies first. Then each point of the set is
launched once, and after each: are the weights and x on the device still what they were, is
stock's output still bit for bit the first, and does stock take its time (20 hot launches)?
The first point after which an answer changes is the one that breaks the device's state. One
JSON line a point, and ``state_probe.json`` under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cuda_verify as cv
import device_state
import mlx.core as mx
from cuda_timing import device_us
from sweep_points import SETS, as_params, launch


def state(x, one, snap: device_state.Snapshot) -> dict:
    found = device_state.problems(snap, x, one)
    return {"inputs_unchanged": {k: found.get(k, True) for k in ("x", "wq", "scales", "biases")},
            "stock_same": "stock" not in found,
            "stock_us": round(device_us(lambda i: cv.stock(x, one.wq, one.scales, one.biases),
                                        20, 3)["us"], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="gate_up", choices=sorted(cv.SHAPES))
    ap.add_argument("--points", default="xshare", choices=sorted(SETS))
    ap.add_argument("--m", type=int, default=8)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--batch", type=int, default=0,
                    help="also time each point as the cold sweep does: BATCH launches over "
                         "--copies weight copies, 7 batches, before its state is read")
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--only", default="", help="the set's points by index, comma-separated")
    args = ap.parse_args(argv)
    k, n = cv.SHAPES[args.shape]
    one = cv.make_copies(k, n, mx.bfloat16, 1)[0]
    copies = [one] + (cv.make_copies(k, n, mx.bfloat16, args.copies - 1, seed=1000)
                      if args.batch else [])
    x = (mx.random.normal((args.m, k), key=mx.random.key(7)) / k ** 0.25).astype(mx.bfloat16)
    mx.eval(x)
    snap = device_state.snapshot(x, one)
    rows = [{"after": "nothing", **state(x, one, snap)}]
    print(json.dumps(rows[-1]), flush=True)
    pts = SETS[args.points][args.shape]
    if args.only:
        pts = [pts[int(i)] for i in args.only.split(",")]
    for pt in pts:
        p = as_params(pt)
        row = {"after": p}
        try:
            y1 = launch(x, one, p)
            mx.eval(y1)
            y2 = launch(x, one, p)
            mx.eval(y2)
            row["repeatable"] = bool(mx.array_equal(y1, y2).item())
            if args.batch:
                row["batched_us"] = round(device_us(
                    lambda i, p=p: launch(x, copies[i % len(copies)], p), args.batch, 7)["us"], 2)
                row["stock_batched_us"] = round(device_us(
                    lambda i: cv.stock(x, copies[i % len(copies)].wq,
                                       copies[i % len(copies)].scales,
                                       copies[i % len(copies)].biases), args.batch, 7)["us"], 2)
        except Exception as e:  # noqa: BLE001 - the finding
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        try:
            row.update(state(x, one, snap))
        except Exception as e:  # noqa: BLE001 - the finding
            row["state_error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "state_probe.json").write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
