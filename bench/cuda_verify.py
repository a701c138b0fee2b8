"""The honest CUDA verify microbenchmark: cold and hot weights, read ceiling, eager and compiled.

    python bench/cuda_verify.py --out DIR [--quick] [--shapes gate_up,down] [--dtypes ...]

In one run, on a real NVIDIA GPU with MLX's CUDA backend:

1. The read-only ceiling: ``mx.sum`` over a >= 4 GiB float32 array (many times the 60 MB L2),
   median of several evaluations, bytes read / time. Beside it, labelled and not used as the
   ceiling, an elementwise ``a + 1`` over the same array (read + write, "copy").
2. For every shape (gate_up 5120 x 17408, down 17408 x 5120), bf16 and fp16, M in {1, 8, 16}:
   stock ``mx.quantized_matmul`` (eager and under ``mx.compile``) against the custom CUDA
   verify kernel (``kernels.cuda.launch``, eager and under ``mx.compile`` with the weights as
   the compiled function's inputs: w, scales, biases and, for a tile that reads w in a layout
   of its own, that layout, made at load as a layer makes it: ``load_layouts``), with
   - COLD weights: a list of distinct quantized copies whose total exceeds 2x L2 (>= 240 MB),
     rotated per launch, so a copy is evicted before it is used again;
   - HOT weights: one copy reused launch after launch (L2-resident: 50 MB < 60 MB).
   Device time per launch: a batch of launches is built first (lazily, not timed), then one
   ``mx.eval`` of the whole batch is timed and divided by the batch size; median over batches.
   MLX exposes no CUDA events, so this includes MLX's per-op encode cost, overlapped with the
   GPU; it is the time a model would see per launch in a long graph.
3. Host cost per launch: the time to build one launch's graph without evaluating it, for each of
   the four paths (the graph is evaluated afterwards, untimed).
4. The profilers present on the machine (nsys, ncu) and the GPU clocks, recorded.
5. The time of ONE launch, which the batched device time is not (MLX's CUDA graphs let the
   batch's independent launches overlap): a chain of dependent launches per row, cold (stock
   and custom, eager and compiled: ``chain_us``; a chain time under the floor is a failed
   subtraction of its links, kept apart and named, never shown as a time), and with ``--ncu``
   the profiler's kernel time
   of every row's stock and custom launch, each alone with caches flushed (ncu runs
   bench/cuda_verify_ncu.py --rows in a child process; its achieved DRAM throughput,
   occupancy, registers and warp-stall findings go into the row too), beside a bare read of
   the row's bytes timed the same way (bench/read_sizes_ncu.py's kernel: what a launch that
   reads that much reaches at all; a 50 MB read alone runs at ~77% of the 4 GiB rate).

Bytes per launch = 4-bit weights + scales + biases + activations + outputs; floor = bytes /
read ceiling; "% of ceiling" = floor / time. Speed-up = stock eager time / custom time.
Writes cuda_verify.json and cuda_verify.md under --out. The hot-weight tiling sweep (which
chose the custom kernels' tiles and backs the sm_90 selection table) lives in
bench/cuda_verify_sweep.py; its per-shape records are carried into the JSON under "shapes" and
"draft", labelled as hot.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from types import MappingProxyType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import device_state
import mlx.core as mx
from cuda_timing import (
    BITS,
    COLD_TARGET_BYTES,
    GS,
    L2_BYTES,
    chain_us,
    device_us,
    make_copies,
    profilers,
    qbytes,
    read_ceiling,
    wall_us,
)
from cuda_verify_candidates import measure_candidate
from cuda_verify_report import render, screen_chains
from cuda_verify_tiles import SHAPES, table_candidates, tile_for

from devices.identity import current_device
from kernels import cuda
from kernels.bench.host_cost import host_paired_us
from kernels.qweights import QWeights

ROOT = Path(__file__).resolve().parents[1]
# Timed beside them in the main rows (not tiled by the sweeps): the LM head, 636 MB of 4-bit
# weights, larger than L2 ten times over, so even one copy is cold.
MAIN_SHAPES = {**SHAPES, "vocab": (5120, 248320)}
DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16}


def stock(x, wq, s, b):
    return mx.quantized_matmul(x, wq, s, b, transpose=True, group_size=GS, bits=BITS)


def custom_fn(name: str, params: dict, scales_max_abs: float | None = None,
              layout_keys: tuple = ()):
    """The custom launch as a function of arrays, for ``mx.compile`` (QWeights is built only
    while the compiled function traces). The weights are that function's inputs, so
    ``cuda.launch`` sees tracers: it keeps nothing and its kernel call is recorded into the
    caller's graph, which replays it with each copy's arrays. ``scales_max_abs``: the largest
    |scale| of every copy the function will be given (``scale_magnitude``), so a ``denorm``
    tile runs as such where that fits its limit, not as its plain self (the launch cannot
    measure tracers). ``layout_keys``: the layouts of w the tile reads (``load_layouts``),
    passed after the biases as inputs too, as a caller passes what its layers keep from load;
    without them a packing tile's copy of w is traced into the graph and run on every call."""
    def f(x, wq, s, b, *layouts):
        return cuda.launch(name, x, QWeights(wq, s, b, GS, BITS, scales_max_abs,
                                             layouts=dict(zip(layout_keys, layouts))), params)
    return f


def load_layouts(name: str, params: dict, m: int, dtype, copies: list) -> tuple:
    """The keys of the layouts of w the tile reads at M = ``m`` (() for one that reads w as
    MLX stores it), each made now for every copy and kept with it (``QWeights.layouts``), as
    ``kernels.dispatch.at_load`` makes them where a model's layers are loaded."""
    keys: tuple = ()
    for q in copies:
        keys = tuple(cuda.layouts_for(name, q, m, dtype, params))
    return keys


def compiled_call(fn, layout_keys: tuple = ()):
    """How a compiled custom ``fn`` is called on a copy: its arrays, layouts included."""
    return lambda x, q: fn(x, q.wq, q.scales, q.biases, *(q.layouts[k] for k in layout_keys))


def scale_magnitude(copies: list) -> float:
    """The largest |scale| over every copy (kernels.cuda.scale_magnitude, once each)."""
    return max(cuda.scale_magnitude(q.scales) for q in copies)


def denorm_record(params, dtype: str, magnitude: float) -> dict:
    """For a ``denorm`` tile, whether it ran as such on these copies or fell back to the plain
    path (scales over its limit), and the scales' largest magnitude; nothing for other tiles."""
    if not int(params.get("denorm", 0)):
        return {}
    return {"denorm_runs": cuda.denorm_runs(params, dtype, magnitude),
            "scales_max_abs": magnitude}


def runs_plain(params, dtype: str, magnitude: float) -> bool:
    """A ``denorm`` tile that scales of this largest magnitude would run as its plain self:
    no time of it may be filed under its name (the sweep refuses it, ncu skips it)."""
    return denorm_record(params, dtype, magnitude).get("denorm_runs") is False


def paths_for(name: str, params: dict, scales_max_abs: float | None = None,
              layout_keys: tuple = ()) -> dict:
    """The four timed paths, each a function of (x, weights). Eager custom is called the way
    the runtime calls it: ``cuda.launch`` on the layer's QWeights, made once at load (each
    weights' launch captured and traced on its first call, in the timings' warm-up rounds,
    then replayed), with the params as the runtime passes them: the selection table's
    read-only mapping, one object per entry (``kernels.selection``). ``layout_keys``: the
    layouts of w made at load (``load_layouts``), inputs of the compiled path."""
    params = MappingProxyType(dict(params))
    stock_c = mx.compile(stock)
    custom_c = mx.compile(custom_fn(name, params, scales_max_abs, layout_keys))
    return {"stock_eager": lambda x, q: stock(x, q.wq, q.scales, q.biases),
            "stock_compiled": lambda x, q: stock_c(x, q.wq, q.scales, q.biases),
            "custom_eager": lambda x, q: cuda.launch(name, x, q, params),
            "custom_compiled": compiled_call(custom_c, layout_keys)}


def measure(op: str, k: int, n: int, dt_name: str, ms: list[int], ceiling: float,
            sweep: dict, batch: int, reps: int, table: dict | None = None) -> list[dict]:
    dt = DTYPES[dt_name]
    one = make_copies(k, n, dt, 1)[0]
    count = max(3, math.ceil(COLD_TARGET_BYTES / qbytes(one)))
    copies = [one] + make_copies(k, n, dt, count - 1, seed=1000)
    magnitude = scale_magnitude(copies)
    rows = []
    for m in ms:
        name, params, tile_from = tile_for(table or {}, sweep, op, k, dt_name, m)
        try:
            keys = load_layouts(name, params, m, dt, copies)
        except ValueError:  # a tile that cannot tile M: its launch below says so
            keys = ()
        paths = paths_for(name, params, magnitude, keys)
        x = (mx.random.normal((m, k), key=mx.random.key(7)) / k ** 0.25).astype(dt)
        mx.eval(x)
        snap = device_state.snapshot(x, one)  # held against the same once the row is timed
        moved = qbytes(one) + 2 * m * k + 2 * m * n
        row = {"shape": op, "K": k, "N": n, "dtype": dt_name, "M": m, "kernel": name,
               "params": params, "tile_from": tile_from, "bytes": moved,
               **denorm_record(params, dt_name, magnitude),
               "floor_us": moved / ceiling * 1e6,
               "cold_copies": count, "cold_working_set_bytes": count * qbytes(one),
               "layouts_from_load": [list(k) for k in keys]}
        # Does the custom kernel compute the same thing as stock here? (max |diff| / max |y|)
        try:
            ys, yc = stock(x, one.wq, one.scales, one.biases), paths["custom_eager"](x, one)
            mx.eval(ys, yc)
            row["custom_vs_stock_rel_max"] = (mx.abs(ys.astype(mx.float32) - yc.astype(
                mx.float32)).max() / mx.abs(ys.astype(mx.float32)).max()).item()
        except (ValueError, RuntimeError) as e:
            row["custom_error"] = str(e)[:300]
        for temp in ("cold", "hot"):
            ws = copies if temp == "cold" else [one]
            for path, fn in paths.items():
                if path.startswith("custom") and "custom_error" in row:
                    continue

                def make(i, fn=fn, ws=ws, x=x):
                    return fn(x, ws[i % len(ws)])
                try:
                    t = device_us(make, batch, reps)
                except (ValueError, RuntimeError) as e:
                    row[f"{temp}_{path}_error"] = str(e)[:300]
                    continue
                row[f"{temp}_{path}_us"] = t["us"]
                row[f"{temp}_{path}_spread_us"] = [t["min_us"], t["max_us"]]
                row[f"{temp}_{path}_batches_us"] = t["batches_us"]
                row[f"{temp}_{path}_pct_ceiling"] = row["floor_us"] / t["us"]
                if temp == "cold":
                    w = wall_us(make, batch, reps)
                    row[f"cold_{path}_wall_us"] = w["us"]
                    row[f"cold_{path}_wall_spread_us"] = [w["min_us"], w["max_us"]]
                    row[f"cold_{path}_wall_batches_us"] = w["batches_us"]
                    if path != "stock_compiled":  # each launch waiting for the one before
                        c = chain_us(lambda xi, i, fn=fn, ws=ws: fn(xi, ws[i % len(ws)]), x,
                                     batch, reps)
                        row[f"chain_{path}_us"] = c["us"]
                        row[f"chain_{path}_link_us"] = c["link_us"]
                        row[f"chain_{path}_pct_ceiling"] = row["floor_us"] / c["us"]
            se = row.get(f"{temp}_stock_eager_us")
            for path in ("custom_eager", "custom_compiled", "stock_compiled"):
                if se and f"{temp}_{path}_us" in row:
                    row[f"{temp}_{path}_speedup_vs_stock"] = se / row[f"{temp}_{path}_us"]
            if f"{temp}_custom_compiled_us" in row and f"{temp}_custom_eager_us" in row:
                row[f"{temp}_custom_eager_over_compiled"] = (
                    row[f"{temp}_custom_eager_us"] / row[f"{temp}_custom_compiled_us"])
        for path in ("custom_eager", "custom_compiled"):
            if "chain_stock_eager_us" in row and f"chain_{path}_us" in row:
                row[f"chain_{path}_speedup_vs_stock"] = (row["chain_stock_eager_us"]
                                                         / row[f"chain_{path}_us"])
        if "cold_custom_eager_wall_us" in row and "cold_custom_compiled_wall_us" in row:
            row["cold_wall_custom_eager_over_compiled"] = (
                row["cold_custom_eager_wall_us"] / row["cold_custom_compiled_wall_us"])
        # Host cost: the four paths in turns on hot weights (kernels/bench/host_cost.py).
        makes = {path: (lambda i, fn=fn, x=x, q=one: fn(x, q)) for path, fn in paths.items()
                 if not (path.startswith("custom") and "custom_error" in row)}
        host = host_paired_us(makes, "stock_eager", n=500, reps=9)
        for path, h in host.items():
            row[f"host_{path}_us"] = h["us"]
            row[f"host_{path}_reps_us"] = h["reps_us"]
            row[f"host_{path}_minus_stock_us"] = h["minus_baseline_us"]
        if "host_custom_eager_us" in row:
            row["host_custom_eager_minus_stock_us"] = host["custom_eager"]["minus_baseline_us"]
        if broken := device_state.problems(snap, x, one):  # the report flags it, regen skips it
            row["state_broken"] = broken
        print(json.dumps({k: (round(v, 2) if isinstance(v, float) else v)
                          for k, v in row.items()
                          if not any(w in k for w in ("spread", "batches", "reps_us"))}),
              flush=True)
        rows.append(screen_chains(row))  # a chain under the floor is no time: kept apart
    del copies, one
    mx.clear_cache()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for cuda_verify.json and .md")
    ap.add_argument("--quick", action="store_true",
                    help="bf16 only, M=8 only, fewer batches, a 4 GiB ceiling with fewer reps")
    ap.add_argument("--shapes", default=",".join(MAIN_SHAPES))
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--ms", default="1,8,16")
    ap.add_argument("--ceiling-gib", type=float, default=4.0)
    ap.add_argument("--table-rows", action="store_true",
                    help="also measure every sm_90 entry of the selection table, cold (the data "
                         "scripts/regen_sm90_table.py regenerates the sm_90 entries from)")
    ap.add_argument("--table", default=None,
                    help="selection table whose sm_90 entries --table-rows measures; default: "
                         "the shipped kernels/selection_table.json")
    ap.add_argument("--no-main", action="store_true",
                    help="skip the gate_up/down x dtype x M rows (with --table-rows)")
    ap.add_argument("--sweep-json", default=None,
                    help="the hot-weight tiling sweep's JSON (bench/cuda_verify_sweep.py) whose "
                         "M=8 tiles are timed here; default: the committed one")
    ap.add_argument("--ncu", action="store_true",
                    help="after the rows, ncu's time of every row's stock and custom launch, "
                         "each alone and cold (bench/cuda_verify_ncu.py --rows in a child "
                         "process under ncu), merged into the rows")
    ap.add_argument("--ncu-timeout", type=float, default=120.0, help="for each of ncu's two runs")
    ap.add_argument("--ncu-reps", type=int, default=2,
                    help="launches per path under ncu for the times (its cold times vary little)")
    ap.add_argument("--merge-ncu", default=None, metavar="CSV",
                    help="measure nothing: merge this ncu CSV (--rows) into --out's "
                         "cuda_verify.json and render it again")
    ap.add_argument("--render", action="store_true",
                    help="measure nothing: render --out's cuda_verify.json into its .md again "
                         "(after a change to the report; the data stay as measured)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    if args.render or args.merge_ncu:  # measure nothing: a committed run, rendered again
        src = out / "cuda_verify.json"
        if not src.is_file():
            print(f"error: no {src} to {'render' if args.render else 'merge into'}",
                  file=sys.stderr)
            return 2
        res = json.loads(src.read_text())
        if args.merge_ncu:
            import cuda_verify_ncu as cvn
            csv_path = Path(args.merge_ncu)
            print(f"{cvn.merge(res, csv_path.read_text(), csv_path.name)} rows with ncu stock "
                  "and custom times")
            src.write_text(json.dumps(res, indent=1))
        (out / "cuda_verify.md").write_text(render(res))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    sweep_path = Path(args.sweep_json) if args.sweep_json else (
        ROOT / "bench" / "results" / "h200" / "cuda_verify.json")
    sweep = json.loads(sweep_path.read_text()) if sweep_path.exists() else {}
    dev = current_device()
    print(f"device: {dev}", flush=True)
    quick = args.quick
    dtypes = ["bfloat16"] if quick else args.dtypes.split(",")
    ms = [8] if quick else [int(m) for m in args.ms.split(",")]
    batch, reps = (24, 5) if quick else (96, 11)
    res = {"device": dev.to_json(), "quick": quick,
           "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "method": {"batch": batch, "reps": reps, "cold_target_bytes": COLD_TARGET_BYTES,
                      "l2_bytes": L2_BYTES, "timing": "pre-built batch, one timed mx.eval, "
                      "/ batch, median over reps (no CUDA events in MLX's Python API)"},
           "profilers": profilers()}
    print(f"profilers: {res['profilers']}", flush=True)
    res["ceiling"] = read_ceiling(args.ceiling_gib, 5 if quick else 10)
    ceiling = res["ceiling"]["sum_read_only"]["Bps"]
    res["read_ceiling_Bps"] = ceiling
    print(f"read ceiling {ceiling / 1e12:.2f} TB/s, copy "
          f"{res['ceiling']['copy_a_plus_1_read_write']['Bps'] / 1e12:.2f} TB/s", flush=True)
    res["rows"] = []
    # The hot-weight sweep's records (tile choice, correctness, the sm_90 table's evidence),
    # carried over and labelled: they are NOT the performance figures of this run.
    for key in ("shapes", "draft"):
        if key in sweep:
            res[key] = sweep[key]
    if sweep:
        res["sweep_hot_weights"] = {
            "note": "'shapes' and 'draft' are from bench/cuda_verify_sweep.py: HOT weights "
                    "(one copy reused, L2-resident) against a 1 GiB elementwise ceiling. They "
                    "rank tiles and back the sm_90 table; they overstate speed. The figures of "
                    "this run are 'rows'.",
            "bandwidth_ceilings_Bps": sweep.get("bandwidth_ceilings_Bps"),
            "launch_floors": sweep.get("launch_floors")}

    def save() -> None:
        (out / "cuda_verify.json").write_text(json.dumps(res, indent=1))
        (out / "cuda_verify.md").write_text(render(res))

    save()
    t_start = time.perf_counter()
    tpath = Path(args.table) if args.table else ROOT / "kernels" / "selection_table.json"
    table = json.loads(tpath.read_text())
    res["table_source"] = (str(tpath.relative_to(ROOT)) if tpath.is_relative_to(ROOT)
                           else str(tpath))
    if args.table_rows:
        res["table_rows"] = []
        for c in table_candidates(table):
            res["table_rows"].append(measure_candidate(c, ceiling, batch, reps))
            save()
        print(f"table rows: {time.perf_counter() - t_start:.0f} s", flush=True)
    if not args.no_main:
        for op in args.shapes.split(","):
            k, n = MAIN_SHAPES[op]
            for dt_name in dtypes:
                res["rows"] += measure(op, k, n, dt_name, ms, ceiling, sweep, batch, reps,
                                       table)
                save()
                print(f"elapsed {time.perf_counter() - t_start:.0f} s", flush=True)
    if args.ncu and res["rows"]:
        import cuda_verify_ncu as cvn  # it imports this module: here, not at the top
        cvn.profile_rows(out, res, args.ncu_timeout, args.ncu_reps)
        save()
        print(f"elapsed {time.perf_counter() - t_start:.0f} s", flush=True)
    print(render(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
