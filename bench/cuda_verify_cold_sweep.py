"""The COLD tiling sweep of ``mma_weights_a`` (register pipeline and cp.async ring) on the H200.

    python bench/cuda_verify_cold_sweep.py --out DIR [--shapes gate_up,down] [--dtypes ...]
                                           [--budget-s 240]

Unlike bench/cuda_verify_sweep.py (hot weights, graph built inside the timing), every point
here is timed the way bench/cuda_verify.py times its rows: COLD weights (a different quantized
copy per launch, rotating over more than 2x the 60 MB L2), a pre-built batch of launches and
one timed ``mx.eval``, median over batches, against the read-only ceiling (a sum over 4 GiB)
measured in the same run.

Correctness of every point before it is timed: every pipeline (register or cp.async ring,
activations early or not) runs the same mma sequence as the plain register pipeline at the same
(n_tile, k_groups), so its output must equal that tile's bit for bit (``exact_vs_register``),
and a point that does not is not a candidate; every point is also held against stock
(max |diff| / max |y|). The tile chosen per shape and dtype is then checked against the
portable contract and a float64 reference on a column slice (ulps, as bench/cuda_verify_sweep.py
does) at M = 1, 8 and 16, and timed at those M beside stock, eager and compiled.
Writes cuda_verify_cold_sweep.json and .md under --out, after every shape. ``--check-only``
checks every point and times none (ncu times each alone; the choice uses ncu's times). The
points are data: bench/sweep_points.py.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import cuda_verify as cv
import device_state
import mlx.core as mx
import sweep_points as sp
from cold_sweep_report import render
from sweep_points import (
    POINTS,
    as_params,
    launch,
    launch_of,
    register_twin,
    selected,
    tile_of,
)

from devices.identity import current_device
from kernels.dispatch import dtype_name


def rel_max(a: mx.array, b: mx.array) -> float:
    a, b = a.astype(mx.float32), b.astype(mx.float32)
    return (mx.abs(a - b).max() / mx.abs(b).max()).item()


def check_point(p: dict, x: mx.array, one, ys: mx.array, register_out: dict,
                magnitude: float) -> dict:
    """One point's row: its output against its variant's plain register pipeline at its
    (n_tile, k_groups), bit for bit (``register_out`` keeps each twin's output), and against stock
    (``ys``); a tile that fails to build or launch is a finding (``error``), not a stop. A
    ``denorm`` tile whose weights' scales (largest ``magnitude``) are over its limit would run
    its plain twin: it is not a candidate (``ok`` false), so no plain time is chosen under its
    name."""
    row = {**p, **cv.denorm_record(p, dtype_name(x.dtype), magnitude)}
    if cv.runs_plain(p, dtype_name(x.dtype), magnitude):
        row["ok"] = False
        row["error"] = "denorm: the weights' scales are over its limit (it would run plain)"
        return row
    try:
        y = launch(x, one, p)
        mx.eval(y)
        row["rel_vs_stock"] = rel_max(y, ys)
        key = (launch_of(p)[0], p["n_tile"], p["k_groups"])  # each variant its own twin
        if key not in register_out:
            y0 = launch(x, one, register_twin(p))
            mx.eval(y0)
            register_out[key] = y0
        row["exact_vs_register"] = bool(mx.array_equal(y, register_out[key]).item())
        row["ok"] = row["exact_vs_register"] and row["rel_vs_stock"] < 2e-2
    except (ValueError, RuntimeError) as e:
        row["error"] = str(e)[:300]
    return row


def _print_row(row: dict) -> None:
    print(json.dumps({kk: (round(v, 4) if isinstance(v, float) else v)
                      for kk, v in row.items()}), flush=True)


def check_shape(op: str, dt_name: str, point_m: int = 8, points: list | None = None) -> dict:
    """``--check-only``: every point checked as the sweep checks it, none timed. The choice
    takes each tile's time from ncu alone (``--choose-from-ncu``), never from the sweep's
    batches, so a device session can check the whole set in the time the timed sweep spends
    on a few points, and let ncu time them all."""
    k, n = cv.SHAPES[op]
    dt = cv.DTYPES[dt_name]
    one = cv.make_copies(k, n, dt, 1)[0]
    x = (mx.random.normal((point_m, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
    ys = cv.stock(x, one.wq, one.scales, one.biases)
    magnitude = cv.scale_magnitude([one])
    entry = {"K": k, "N": n, "dtype": dt_name, "point_m": point_m, "check_only": True,
             "points": [], "final": []}
    register_out: dict = {}
    for pt in POINTS[op] if points is None else points:
        entry["points"].append(check_point(as_params(pt), x, one, ys, register_out,
                                             magnitude))
        _print_row(entry["points"][-1])
    return entry


def sweep_shape(op: str, dt_name: str, ceiling: float, batch: int, reps: int,
                budget_s: float, final_ms: list[int], chain: bool = False,
                point_m: int = 8, points: list | None = None, final_top: int = 3,
                each: bool = False) -> dict:
    """``point_m``: the M every tile is checked and timed at (the selection table has an entry
    per M, and the tile that serves M=8 best need not serve M=16 best). ``budget_s``: for the
    points, counted once the weight copies are made and stock is timed (a budget that started
    before them went to making copies: the first M=16 run timed no gate_up point)."""
    from cuda_verify_sweep import check  # the ulps check of the hot sweep, on a column slice

    k, n = cv.SHAPES[op]
    dt = cv.DTYPES[dt_name]
    one = cv.make_copies(k, n, dt, 1)[0]
    count = max(3, math.ceil(cv.COLD_TARGET_BYTES / cv.qbytes(one)))
    copies = [one] + cv.make_copies(k, n, dt, count - 1, seed=1000)
    magnitude = cv.scale_magnitude(copies)  # the compiled path's weights are tracers: it is told
    xs = {m: (mx.random.normal((m, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
          for m in sorted({point_m, *final_ms})}
    mx.eval(list(xs.values()))
    entry = {"K": k, "N": n, "dtype": dt_name, "point_m": point_m, "cold_copies": count,
             "cold_working_set_bytes": count * cv.qbytes(one), "points": [], "final": []}

    def floor_us(m: int) -> float:
        return (cv.qbytes(one) + 2 * m * k + 2 * m * n) / ceiling * 1e6

    def cold_us(fn, x) -> dict:
        return cv.device_us(lambda i: fn(x, copies[i % len(copies)]), batch, reps)

    def alone_us(fn, x) -> dict:
        """In a chain; a time under the floor is a failed subtraction of the links, not a
        time (as cuda_verify_report.screen_chains has it): it raises, so the row records
        the error and no time."""
        c = cv.chain_us(lambda xi, i: fn(xi, copies[i % len(copies)]), x, batch, reps)
        if c["us"] < floor_us(x.shape[0]):
            raise RuntimeError(f"chain under the floor: {c['us']:.1f} us (chain "
                               f"{c['chain_us']:.1f} - links {c['link_us']:.1f})")
        return c

    x_pt = xs[point_m]
    snap = device_state.snapshot(x_pt, one)  # held against the same after the points
    ys = cv.stock(x_pt, one.wq, one.scales, one.biases)
    stock_pt = cold_us(lambda x, q: cv.stock(x, q.wq, q.scales, q.biases), x_pt)
    entry[f"stock_m{point_m}_us"] = stock_pt["us"]
    print(f"{op} {dt_name} stock M={point_m} {stock_pt['us']:.1f} us floor "
          f"{floor_us(point_m):.1f} us", flush=True)
    deadline = time.perf_counter() + budget_s
    register_out = {}
    for pt in POINTS[op] if points is None else points:
        if time.perf_counter() > deadline:
            entry["points"].append({**as_params(pt), "skipped": "time budget"})
            continue
        p = as_params(pt)
        row = check_point(p, x_pt, one, ys, register_out, magnitude)
        if row.get("ok"):
            try:
                t = cold_us(lambda x, q, p=p: launch(x, q, p), x_pt)
                row.update(us=t["us"], spread_us=[t["min_us"], t["max_us"]],
                           pct_ceiling=floor_us(point_m) / t["us"])
            except (ValueError, RuntimeError) as e:
                row["error"] = str(e)[:300]
        entry["points"].append(row)
        _print_row(row)
    broken = device_state.problems(snap, x_pt, one)
    if broken:  # figures after this are not to be trusted (bench/results/h100/xshare_0830)
        entry["state_broken"] = {**broken, "when": "after the points"}
        print(f"{op} {dt_name}: DEVICE STATE BROKEN after the points ({', '.join(broken)} "
              f"changed): no tile chosen, nothing more timed", flush=True)
        mx.clear_cache()
        return entry
    ok = [r for r in entry["points"] if r.get("ok") and "us" in r]
    ok.sort(key=lambda r: r["us"])
    entry[f"best_m{point_m}"] = ok[0] if ok else {}
    # The best tiles at every M, eager and compiled, beside stock; ulps on a column slice.
    top = [tile_of(r) for r in ok[:final_top]]
    for m in final_ms:
        x = xs[m]
        row = {"M": m, "floor_us": floor_us(m)}
        row["stock_us"] = cold_us(lambda x, q: cv.stock(x, q.wq, q.scales, q.biases), x)["us"]
        cands = []
        for p in top:
            if time.perf_counter() > deadline + 60:
                break
            try:
                cands.append((cold_us(lambda x, q, p=p: launch(x, q, p), x)["us"], p))
            except (ValueError, RuntimeError) as e:
                row.setdefault("errors", []).append(f"{p}: {str(e)[:200]}")
        if not cands:
            entry["final"].append(row)
            continue
        cands.sort(key=lambda c: c[0])
        row["candidates"] = [{"us": u, **p} for u, p in cands]

        def compiled_us(p, m=m, x=x) -> tuple[float, list]:
            keys = cv.load_layouts(*launch_of(p), m, dt, copies)
            custom_c = mx.compile(cv.custom_fn(*launch_of(p), magnitude, keys))
            return cold_us(cv.compiled_call(custom_c, keys), x)["us"], [list(k) for k in keys]
        if each:  # every candidate compiled and in a chain, not only the best
            for c, (_, p) in zip(row["candidates"][1:], cands[1:], strict=True):
                compiled, keys = compiled_us(p)
                t = c["timed"] = {"compiled_us": compiled, "layouts_from_load": keys}
                if chain:
                    try:
                        t["alone_us"] = alone_us(lambda x, q, p=p: launch(x, q, p), x)["us"]
                    except RuntimeError as e:
                        t["alone_error"] = str(e)[:300]
        us, p = cands[0]
        compiled, keys = compiled_us(p)
        row.update(params=p, custom_eager_us=us, layouts_from_load=keys,
                   custom_compiled_us=compiled,
                   m8_best_params_us=(cands[[c[1] for c in cands].index(top[0])][0]
                                      if top[0] in [c[1] for c in cands] else None))
        if chain:
            try:
                a_stock = alone_us(lambda x, q: cv.stock(x, q.wq, q.scales, q.biases), x)
                a_custom = alone_us(lambda x, q, p=p: launch(x, q, p), x)
                row.update(alone_stock_us=a_stock["us"], alone_custom_us=a_custom["us"],
                           alone_link_us=a_custom["link_us"],
                           alone_pct_ceiling=row["floor_us"] / a_custom["us"],
                           alone_speedup_vs_stock=a_stock["us"] / a_custom["us"])
            except Exception as e:  # noqa: BLE001 - recorded, not fatal
                row["alone_error"] = str(e)[:300]
        row["pct_ceiling_eager"] = row["floor_us"] / row["custom_eager_us"]
        row["pct_ceiling_compiled"] = row["floor_us"] / row["custom_compiled_us"]
        row["stock_pct_ceiling"] = row["floor_us"] / row["stock_us"]
        row["compiled_speedup_vs_stock"] = row["stock_us"] / row["custom_compiled_us"]
        row["eager_speedup_vs_stock"] = row["stock_us"] / row["custom_eager_us"]
        try:
            name, q = launch_of(p)
            row["check"] = check(name, x, one, q)
        except Exception as e:  # noqa: BLE001 - recorded
            row["check_error"] = str(e)[:300]
        entry["final"].append(row)
        print(json.dumps({kk: (round(v, 4) if isinstance(v, float) else v)
                          for kk, v in row.items() if kk != "candidates"}), flush=True)
    if broken := device_state.problems(snap, x_pt, one):
        entry["state_broken"] = {**broken, "when": "after the final timings"}
        print(f"{op} {dt_name}: DEVICE STATE BROKEN after the final timings", flush=True)
    mx.clear_cache()
    return entry


def smoke(points=sp.RING_SMOKE) -> int:
    """Launch ``points`` at M=8 and 16 and check each bit for bit against the plain register
    pipeline; 1 if any differs. Run in a process of its own (h200.sh does, under a timeout) so
    that a pipeline that faults or never completes cannot take the sweep down with it."""
    bad = 0
    for op in ("gate_up", "down"):
        k, n = cv.SHAPES[op]
        (qw,) = cv.make_copies(k, n, mx.bfloat16, 1)
        for m in (8, 16):
            x = (mx.random.normal((m, k), key=mx.random.key(7)) / k ** 0.25).astype(mx.bfloat16)
            for pt in points:
                p = as_params(pt)
                try:
                    y = launch(x, qw, p)
                except ValueError as e:  # a ring too large for this M: nothing to check
                    print(f"smoke {op} M={m} {p}: {str(e)[-80:]}", flush=True)
                    continue
                y0 = launch(x, qw, register_twin(p))
                same = mx.array_equal(y, y0).item()
                print(f"smoke {op} M={m} {p}: bit-exact {same}, rel vs stock "
                      f"{rel_max(y, cv.stock(x, qw.wq, qw.scales, qw.biases)):.2e}", flush=True)
                bad += not same
    return 1 if bad else 0


def launch_floor(batch: int, reps: int) -> dict:
    """Per-launch time of launches with next to no work (K=256, N=64, M=8), timed like every
    point: what each figure includes besides the kernel (launch gaps, MLX's per-op cost)."""
    (qw,) = cv.make_copies(256, 64, mx.bfloat16, 1)
    x = (mx.random.normal((8, 256), key=mx.random.key(7))).astype(mx.bfloat16)
    tiny = mx.zeros((8,))
    mx.eval(x, tiny)
    p = {"n_tile": 32, "k_groups": 2, "stages": 2}
    return {"elementwise_us": cv.device_us(lambda i: tiny + 1.0, batch, reps)["us"],
            "stock_qmm_us": cv.device_us(
                lambda i: cv.stock(x, qw.wq, qw.scales, qw.biases), batch, reps)["us"],
            "mma_weights_a_us": cv.device_us(
                lambda i: launch(x, qw, p), batch, reps)["us"]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="gate_up,down")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--ms", default="1,8,16")
    ap.add_argument("--budget-s", type=float, default=240.0,
                    help="stop timing new points past this (the final rows still run)")
    ap.add_argument("--smoke", action="store_true",
                    help="only launch two ring tiles per shape at M=8 and 16 and check them bit "
                         "for bit against the register pipeline (exit 1 if they differ): run "
                         "it first, in its own process, so a faulting ring cannot take the "
                         "sweep's CUDA context down with it")
    ap.add_argument("--no-ring", action="store_true", help="no cp.async ring tiles")
    ap.add_argument("--smoke-bulk", action="store_true",
                    help="as --smoke, for the bulk pipeline's tiles (a producer warp and mbarriers)")
    ap.add_argument("--no-bulk", action="store_true", help="no bulk pipeline tiles")
    ap.add_argument("--points", default="next", choices=tuple(sp.SETS),
                    help="the tiles to sweep: the next set (default) or an earlier run's")
    ap.add_argument("--chain", action="store_true",
                    help="also time the chosen tiles and stock in a chain of dependent launches "
                         "(alone_*: what a model's sequence of projections sees; the batched "
                         "figures let independent launches overlap)")
    ap.add_argument("--final-top", type=int, default=3,
                    help="how many of the fastest checked tiles are timed again at every M, "
                         "eager, compiled and (--chain) in a chain (default 3)")
    ap.add_argument("--time-each", action="store_true",
                    help="time every one of those tiles compiled and (--chain) in a chain, "
                         "not only the fastest (each candidate's 'timed')")
    ap.add_argument("--point-m", type=int, default=8,
                    help="the M at which every tile is checked and timed (default 8)")
    ap.add_argument("--check-only", action="store_true",
                    help="check every point (bit for bit against its register twin, and "
                         "against stock) at --point-m and time none: ncu then times each "
                         "alone (h200.sh ncucold --points), which is what the choice uses")
    ap.add_argument("--batch", type=int, default=96)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args(argv)
    if args.smoke or args.smoke_bulk:
        return smoke(sp.BULK_SMOKE if args.smoke_bulk else sp.RING_SMOKE)
    # the run's points, its own (a set named by --points, less what --no-ring / --no-bulk
    # leave out): the module's sets stay as they are for whatever runs next in the process
    points = {op: selected(pts, args.no_ring, args.no_bulk)
              for op, pts in sp.SETS[args.points].items()}
    missing = [op for op in args.shapes.split(",") if op not in points]
    if missing:  # before minutes of device time go on the shapes it has
        ap.error(f"--points {args.points} has no tiles for {', '.join(missing)}: pass --shapes "
                 f"{','.join(points)}")
    # A set whose every tile --no-ring / --no-bulk left out would check nothing and say "not
    # bit-exact: none" (diagnose's bulk check on an H100, 2026-12-07 13:14, after the bulk
    # smoke timed out): refused instead
    emptied = [op for op in args.shapes.split(",") if not points[op]]
    if emptied:
        ap.error(f"--points {args.points} keeps no tiles for {', '.join(emptied)} once "
                 f"--no-ring/--no-bulk leave theirs out: nothing would be checked or timed")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    dev = current_device()
    print(f"device: {dev}", flush=True)
    res = {"device": dev.to_json(), "measured_at": time.strftime("%Y-%m-%d %H:%M UTC",
                                                                   time.gmtime()),
           "method": {"batch": args.batch, "reps": args.reps,
                      "cold_target_bytes": cv.COLD_TARGET_BYTES},
           "point_set": args.points,
           "profilers": cv.profilers()}
    if args.check_only:
        res["shapes"] = {}
        for op in args.shapes.split(","):
            for dt in args.dtypes.split(","):
                res["shapes"][f"{op}/{dt}"] = check_shape(op, dt, args.point_m, points[op])
                (out / "cuda_verify_cold_sweep.json").write_text(json.dumps(res, indent=1))
                (out / "cuda_verify_cold_sweep.md").write_text(render(res))
        print(render(res))
        bad = [f"{key} {tile_of(r)}" for key, e in res["shapes"].items() for r in e["points"]
               if "exact_vs_register" in r and not r["exact_vs_register"]]
        print(f"checked in {time.perf_counter() - t0:.0f} s; not bit-exact: {bad or 'none'}",
              flush=True)
        return 1 if bad else 0
    res["ceiling"] = cv.read_ceiling(4.0, 5)
    ceiling = res["read_ceiling_Bps"] = res["ceiling"]["sum_read_only"]["Bps"]
    print(f"read ceiling {ceiling / 1e12:.2f} TB/s", flush=True)
    res["launch_floor"] = launch_floor(args.batch, args.reps)
    print(f"launch floor {res['launch_floor']}", flush=True)
    res["shapes"] = {}
    pairs = [(op, dt) for op in args.shapes.split(",") for dt in args.dtypes.split(",")]
    ms = [int(m) for m in args.ms.split(",")]
    for i, (op, dt) in enumerate(pairs):
        # each pair gets an even share of what is left of the budget for its points
        left = args.budget_s - (time.perf_counter() - t0)
        share = max(5.0, left / (len(pairs) - i)) * 0.6
        res["shapes"][f"{op}/{dt}"] = sweep_shape(op, dt, ceiling, args.batch, args.reps,
                                                  share, ms, args.chain, args.point_m,
                                                  points[op], args.final_top,
                                                  args.time_each)
        (out / "cuda_verify_cold_sweep.json").write_text(json.dumps(res, indent=1))
        (out / "cuda_verify_cold_sweep.md").write_text(render(res))
        print(f"elapsed {time.perf_counter() - t0:.0f} s", flush=True)
    print(render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
