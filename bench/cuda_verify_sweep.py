"""CUDA verify kernels on a real NVIDIA GPU: correctness and the tiling sweep (HOT weights).

    python bench/cuda_verify_sweep.py --out DIR [--quick]

Caution: this sweep times one weight copy reused call after call, so weights of up to 60 MB are
served from the H200's L2 ("hot"), and its ceiling is a 1 GiB elementwise pass, not the read
ceiling. Use it to rank tiles and check correctness only; the honest figures (cold rotating
weights, read-only ceiling over 4 GiB, eager and compiled, host cost) come from
bench/cuda_verify.py.

In one run: (1) the bandwidth ceiling (a 1 GiB elementwise copy, read + write); (2) for every
production shape, bf16 and fp16, each CUDA variant against its portable implementation (run by
MLX on the same GPU), stock QMM and a float64 reference on a column slice, in ulps; (3) a sweep
of (n_tile, k_groups) for the M=8 and M=4 kernels per shape, timed as device-synchronised
batches of launches (warmed, median of several batches); (4) the table: custom M=8 against stock
QMM at M=8 and the M=4 path, microseconds per launch, verified rows/s and achieved bytes/s as a
fraction of the measured ceiling. Writes cuda_verify_sweep.json and .md under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx
import numpy as np

from devices.identity import current_device
from kernels import arith, cuda
from kernels.qweights import QWeights
from kernels.ulps import scaled_ulps
from kernels.variants import VARIANTS

SHAPES = {"gate_up": (5120, 17408), "down": (17408, 5120), "out": (6144, 5120),
          "attn_q": (5120, 2048), "attn_kv": (5120, 1024), "router": (5120, 48)}
DRAFT = {"draft_o": (4096, 5120), "draft_q": (5120, 4096), "draft_down": (25600, 5120),
         "draft_kv": (5120, 1280)}
DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16}


def bandwidth_ceiling(gib: float = 1.0, reps: int = 20) -> float:
    n = int(gib * (1 << 30) // 4)
    a = mx.random.uniform(shape=(n,))
    mx.eval(a)
    for _ in range(3):
        mx.eval(a + 1.0)
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval(a + 1.0)
        t.append(time.perf_counter() - t0)
    return 2 * n * 4 / statistics.median(t)


def per_launch(fn, batch: int = 40, batches: int = 5) -> float:
    """Seconds per launch: ``batch`` launches evaluated together, median over batches."""
    for _ in range(3):
        mx.eval([fn() for _ in range(batch)])
    times = []
    for _ in range(batches):
        t0 = time.perf_counter()
        mx.eval([fn() for _ in range(batch)])
        times.append((time.perf_counter() - t0) / batch)
    return statistics.median(times)


def weights(k: int, n: int, dtype, seed: int = 0):
    key = mx.random.key(seed)
    w = mx.random.normal((n, k), key=key) / k ** 0.5
    qw = QWeights.quantize(w, 64, 4, dtype)
    mx.eval(qw.wq, qw.scales, qw.biases)
    return w, qw


def activations(w: mx.array, m: int, dtype, seed: int = 1) -> mx.array:
    key = mx.random.key(seed)
    idx = mx.random.randint(0, w.shape[0], (m,), key=key)
    noise = mx.random.normal((m, w.shape[1]), key=mx.random.split(key)[0]) / w.shape[1] ** 0.5
    return (w[idx] + 0.3 * noise).astype(dtype)


def bytes_moved(k: int, n: int, m: int, act_bytes: int, qw: QWeights) -> int:
    return (qw.wq.nbytes + qw.scales.nbytes + qw.biases.nbytes + m * k * act_bytes
            + m * n * act_bytes)


def check(name: str, x: mx.array, qw: QWeights, params: dict, cols: int = 256) -> dict:
    """CUDA kernel vs portable contract vs stock vs float64, on the first ``cols`` columns."""
    y = cuda.launch(name, x, qw, params)
    sub = qw.columns(0, min(cols, qw.n))
    port = VARIANTS[name].portable(x, sub, {**VARIANTS[name].DEFAULTS, **params})
    stock = VARIANTS["stock"].native(x, sub, {})
    mx.eval(y, port, stock)
    yc = np.array(y[:, : sub.n].astype(mx.float32), np.float64)
    wd = np.array(arith.dequantize_f32(sub.wq, sub.scales, sub.biases, 64, 4), np.float64)
    xd = np.array(x.astype(mx.float32), np.float64)
    ref, scale = xd @ wd.T, np.abs(xd) @ np.abs(wd).T
    out = "float32" if name == "w4a32" else str(x.dtype).split(".")[-1]
    pc = np.array(port.astype(mx.float32), np.float64)
    sc = np.array(stock.astype(mx.float32), np.float64)
    return {"finite": bool(np.isfinite(np.array(y.astype(mx.float32))).all()),
            "ulps_vs_f64": float(scaled_ulps(yc, ref, scale, out).max()),
            "ulps_vs_portable": float(scaled_ulps(yc, pc, scale, out).max()),
            "max_abs_vs_portable": float(np.abs(yc - pc).max()),
            "max_abs_vs_stock": float(np.abs(yc - sc).max()),
            "stock_ulps_vs_f64": float(scaled_ulps(sc, ref, scale, out).max())}


def best(rows: list[dict]) -> dict:
    ok = [r for r in rows if "us" in r]
    return min(ok, key=lambda r: r["us"]) if ok else {}


def weights_a_grid(k: int, n: int, m: int, quick: bool) -> list[dict]:
    """The (n_tile, k_groups, unroll) points of ``mma_weights_a`` worth timing for one shape."""
    tiles = [t for t in (32, 64) if n % t == 0] or [t for t in (48, 16) if n % t == 0][:1]
    steps = k // 128
    # Enough warps to fill 132 SMs several times over, without splitting K into slivers: the
    # two smallest K splits that reach 1024 warps, and the largest one below that.
    groups = [g for g in range(1, 33) if steps % g == 0]
    enough = [g for g in groups if (n // tiles[0]) * g >= 1024][:2]
    fewer = [g for g in groups if (n // tiles[0]) * g < 1024][-1:]
    groups = fewer + enough
    # (unroll, prefetch): prefetching doubles the weight registers, so it pairs with less unroll.
    pipelines = ((2, 0),) if quick else ((2, 0), (4, 0), (1, 1), (2, 1))
    grid = {}
    for t in tiles:
        for g in groups:
            for u, pf in pipelines:
                try:
                    cfg = cuda.launch_config("mma_weights_a", m, k, n, 64, "bfloat16",
                                             {"n_tile": t, "k_groups": g, "unroll": u})
                except ValueError:
                    continue
                unroll = cfg.template["UNROLL"]
                grid.setdefault((t, g, unroll, pf), {
                    "n_tile": t, "k_groups": g, "unroll": unroll, "prefetch": pf})
    return list(grid.values())


def time_points(name: str, x: mx.array, qw: QWeights, points: list[dict]) -> list[dict]:
    rows = []
    for p in points:
        try:
            s = per_launch(lambda p=p: cuda.launch(name, x, qw, p))
        except (ValueError, RuntimeError) as e:  # a tile that fails is a finding, not a stop
            rows.append({"variant": name, **p, "error": str(e)[:200]})
            continue
        rows.append({"variant": name, **p, "us": s * 1e6})
    return rows


def params_of(row: dict) -> dict:
    return {k: row[k] for k in ("n_tile", "k_groups", "unroll", "prefetch") if k in row}


def measure_shape(op: str, k: int, n: int, dt_name: str, dt, args, ceiling: float) -> dict:
    """M=8, M=4 and M=16 candidates against stock for one production shape and dtype."""
    w, qw = weights(k, n, dt)
    xs = {m: activations(w, m, dt) for m in (4, 8, 16)}
    mma_kg = [g for g in (2, 4) if k % (128 * g) == 0]
    s8 = time_points("mma_weights_a", xs[8], qw, weights_a_grid(k, n, 8, args.quick))
    s8 += time_points("mma_verify", xs[8], qw, [{"n_tile": 8, "k_groups": g} for g in mma_kg])
    if args.with_scalar:
        scalar = "narrow_output" if n < 256 else "scalar_kmajor"
        s8 += time_points(scalar, xs[8], qw, [{"n_tile": 4, "k_groups": 2},
                                              {"n_tile": 8, "k_groups": 4}])
    b8 = best(s8)
    bwa = best([r for r in s8 if r["variant"] == "mma_weights_a"])
    bmv = best([r for r in s8 if r["variant"] == "mma_verify"])
    entry = {"K": k, "N": n, "dtype": dt_name, "variant": b8.get("variant"), "sweep_m8": s8,
             "best_m8": b8}
    for m in (4, 16):
        pts = []
        if bwa:
            pts.append(("mma_weights_a", params_of(bwa)))
            kg2 = bwa["k_groups"] * 2
            if (k // 128) % kg2 == 0 and m == 4:
                pts.append(("mma_weights_a", {**params_of(bwa), "k_groups": kg2}))
        if bmv:
            pts.append(("mma_verify", params_of(bmv)))
        rows = [r for name, p in pts for r in time_points(name, xs[m], qw, [p])]
        entry[f"sweep_m{m}"] = rows
        entry[f"best_m{m}"] = best(rows)
    for m in (8, 4, 16):
        b = entry[f"best_m{m}"]
        if b:
            entry[f"check_m{m}"] = check(b["variant"], xs[m], qw, params_of(b))
        entry[f"stock_m{m}_us"] = per_launch(
            lambda q=qw, xx=xs[m]: VARIANTS["stock"].native(xx, q, {})) * 1e6
    b4 = entry["best_m4"]
    stock4 = entry["stock_m4_us"]
    m4_us = min(b4.get("us", 1e12), stock4)
    entry["m4_path_us"] = m4_us
    entry["m4_path"] = b4["variant"] if b4 and b4["us"] < stock4 else "stock"
    moved = bytes_moved(k, n, 8, 2, qw)
    entry["m8_floor_us"] = moved / ceiling * 1e6
    if b8:
        entry["m8_rows_per_s"] = 8 / (b8["us"] * 1e-6)
        entry["m8_Bps"] = moved / (b8["us"] * 1e-6)
        entry["m8_fraction_of_ceiling"] = entry["m8_Bps"] / ceiling
        entry["m8_over_stock"] = entry["stock_m8_us"] / b8["us"]
        entry["m8_over_m4_rows"] = (8 / b8["us"]) / (4 / m4_us)
    entry["stock_m8_rows_per_s"] = 8 / (entry["stock_m8_us"] * 1e-6)
    entry["stock_m8_fraction_of_ceiling"] = moved / (entry["stock_m8_us"] * 1e-6) / ceiling
    entry["m4_rows_per_s"] = 4 / (m4_us * 1e-6)
    print(f"{op:8s} {dt_name:9s} M8 {b8} stock8 {entry['stock_m8_us']:.1f}us "
          f"floor {entry['m8_floor_us']:.1f}us M4 {entry['m4_path']} {m4_us:.1f}us "
          f"(stock {stock4:.1f}) M16 {entry['best_m16'].get('us', 0):.1f}us "
          f"(stock {entry['stock_m16_us']:.1f}) check8 {entry.get('check_m8')}", flush=True)
    return entry


def launch_floor() -> dict:
    """Per-launch time of work too small to matter, measured like every kernel here: what a
    row's microseconds include besides the kernel itself (host enqueue, launch latency)."""
    w, qw = weights(256, 64, mx.bfloat16)
    x8 = activations(w, 8, mx.bfloat16)
    tiny = mx.zeros((8,))
    mx.eval(tiny)
    return {"elementwise_us": per_launch(lambda: tiny + 1.0) * 1e6,
            "stock_qmm_us": per_launch(lambda: VARIANTS["stock"].native(x8, qw, {})) * 1e6,
            "mma_weights_a_us": per_launch(lambda: cuda.launch(
                "mma_weights_a", x8, qw, {"n_tile": 32, "k_groups": 2})) * 1e6}


def measure_draft(op: str, k: int, n: int) -> dict:
    w, qw = weights(k, n, mx.bfloat16)
    x8 = activations(w, 8, mx.float32)
    s = time_points("w4a32", x8, qw, [{"n_tile": t, "k_groups": g}
                                      for t, g in ((4, 1), (8, 1), (4, 2), (8, 4))])
    b = best(s)
    stock = per_launch(lambda q=qw, xx=x8: VARIANTS["stock"].native(xx, q, {}))
    entry = {"K": k, "N": n, "sweep": s, "best": b, "stock_us": stock * 1e6}
    if b:
        entry["check"] = check("w4a32", x8, qw, params_of(b))
        entry["over_stock"] = stock * 1e6 / b["us"]
    print(f"draft {op} w4a32 {b} stock {stock * 1e6:.1f}us check {entry.get('check')}",
          flush=True)
    return entry


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for cuda_verify_sweep.json and .md")
    ap.add_argument("--quick", action="store_true", help="fewer sweep points")
    ap.add_argument("--shapes", default=None,
                    help="comma list of shapes (production and draft names) to measure; the "
                         "rest are kept from an earlier --out's JSON, so a run can be split "
                         "across device calls")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--with-scalar", action="store_true",
                    help="also time the scalar float32-FMA kernels (0.6-0.7x stock on an H200)")
    ap.add_argument("--emit-table", default=None,
                    help="write the shipped selection table plus sm_90 entries for every "
                         "kernel that beat stock here (a candidate to review and commit)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    known = {**SHAPES, **DRAFT}
    wanted = args.shapes.split(",") if args.shapes else list(known)
    bad = [s for s in wanted if s not in known]
    if bad:
        ap.error(f"unknown shape(s) {', '.join(bad)}: use {', '.join(known)}")
    dev = current_device()
    prev = out / "cuda_verify_sweep.json"
    res: dict = json.loads(prev.read_text()) if prev.exists() else {}
    res.update({"device": dev.to_json()})
    res.setdefault("shapes", {})
    res.setdefault("draft", {})
    print(f"device: {dev}", flush=True)
    ceiling = bandwidth_ceiling()
    res.setdefault("bandwidth_ceilings_Bps", []).append(ceiling)
    res["bandwidth_ceiling_Bps"] = ceiling
    print(f"bandwidth ceiling (1 GiB copy, read+write): {ceiling / 1e12:.2f} TB/s", flush=True)
    res.setdefault("launch_floors", []).append(launch_floor())
    print(f"launch floor (K=256, N=64): {res['launch_floors'][-1]}", flush=True)

    def save() -> None:
        prev.write_text(json.dumps(res, indent=1))
        (out / "cuda_verify_sweep.md").write_text(render(res))

    for op in wanted:
        if op in DRAFT:
            res["draft"][op] = measure_draft(op, *DRAFT[op])
            save()
            continue
        k, n = SHAPES[op]
        for dt_name in args.dtypes.split(","):
            res["shapes"][f"{op}/{dt_name}"] = measure_shape(op, k, n, dt_name,
                                                             DTYPES[dt_name], args, ceiling)
            save()
    if args.emit_table:
        Path(args.emit_table).write_text(json.dumps(candidate_table(res, dev.arch), indent=1))
        print(f"candidate table: {args.emit_table}", flush=True)
    save()
    print(render(res))
    return 0


def candidate_table(res: dict, arch: str) -> dict:
    """The shipped table plus one entry per (shape, dtype, M) where a kernel beat stock here."""
    table = json.loads((Path(__file__).resolve().parents[1] / "kernels" /
                        "selection_table.json").read_text())
    names = {tuple(v): k for k, v in table["shapes"].items()}
    entries = [e for e in table["entries"] if arch not in e["devices"]]
    for e in res["shapes"].values():
        shape = names[(e["K"], e["N"])]
        for m in (4, 8, 16):
            b = e.get(f"best_m{m}") or {}
            stock = e.get(f"stock_m{m}_us")
            if b and stock and b["us"] < stock and e[f"check_m{m}"]["finite"]:
                entries.append({"devices": [arch], "dtypes": [e["dtype"]], "M": m, "bits": 4,
                                "group_sizes": [64], "shapes": [shape], "variant": b["variant"],
                                "params": params_of(b),
                                "profiled": f"measured: {b['us']:.1f} us vs stock "
                                            f"{stock:.1f} us"})
    for op, e in res["draft"].items():
        b = e.get("best") or {}
        if b and b["us"] < e["stock_us"]:
            entries.append({"devices": [arch], "dtypes": ["float32"], "M": 8, "bits": 4,
                            "group_sizes": [64], "shapes": [op], "variant": "w4a32",
                            "params": params_of(b),
                            "profiled": f"measured: {b['us']:.1f} us vs stock "
                                        f"{e['stock_us']:.1f} us"})
    table["entries"] = entries
    return table


def _params(b: dict) -> str:
    return ", ".join(str(b[k]) for k in ("n_tile", "k_groups", "unroll") if k in b) + (
        ", prefetch" if b.get("prefetch") else "")


def render(res: dict) -> str:
    ceils = res.get("bandwidth_ceilings_Bps") or [res["bandwidth_ceiling_Bps"]]
    lines = [(f"# CUDA verify kernels on {res['device']['chip']} ({res['device']['arch']}, "
             f"MLX {res['device']['mlx_version']})"), "",
             ("Bandwidth ceiling (1 GiB elementwise, read + write), measured at the start of each "
              "device call that contributed: "
              + ", ".join(f"{c / 1e12:.2f}" for c in ceils) + " TB/s. Each row uses the ceiling "
              "of its own call. Bytes = 4-bit weights + scales/biases + activations + outputs; "
              "floor = bytes / ceiling."), "",
             ("Launch floor (the same timing of a K=256, N=64 problem, so nearly no work), per "
              "call: " + "; ".join(", ".join(f"{k.removesuffix('_us')} {v:.1f} us"
                                             for k, v in f.items())
                                   for f in res.get("launch_floors", [])) + "."), "",
             ("| shape | dtype | M=8 kernel (n_tile, k_groups, unroll) | M=8 us | stock M=8 us | "
              "floor us | M=8/stock | M=8 of ceiling | stock of ceiling | M=8 rows/s | "
              "M=4 path | M=4 us | M=8/M=4 rows | M=16 us (stock) | ulps vs f64 (M=8) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, e in res["shapes"].items():
        b = e.get("best_m8") or {}
        if not b or "m8_Bps" not in e:
            continue
        b16 = e.get("best_m16") or {}
        lines.append(
            f"| {key.split('/')[0]} ({e['K']}, {e['N']}) | {e['dtype']} | {b['variant']} "
            f"({_params(b)}) | {b['us']:.1f} | {e['stock_m8_us']:.1f} | "
            f"{e.get('m8_floor_us', float('nan')):.1f} | {e['m8_over_stock']:.2f}x | "
            f"{e['m8_fraction_of_ceiling']:.0%} | "
            f"{e.get('stock_m8_fraction_of_ceiling', float('nan')):.0%} | "
            f"{e['m8_rows_per_s']:.3g} | {e['m4_path']} | {e['m4_path_us']:.1f} | "
            f"{e['m8_over_m4_rows']:.2f}x | {b16.get('us', float('nan')):.1f} "
            f"({e.get('stock_m16_us', float('nan')):.1f}) | "
            f"{e['check_m8']['ulps_vs_f64']:.3f} |")
    lines += ["", ("| draft shape (W4A32) | kernel (n_tile, k_groups) | us | stock fp32 us | "
              "speed-up | ulps vs f64 |"), "|---|---|---|---|---|---|"]
    for op, e in res["draft"].items():
        b = e.get("best") or {}
        if b:
            lines.append(f"| {op} ({e['K']}, {e['N']}) | w4a32 ({_params(b)}) | {b['us']:.1f} | "
                         f"{e['stock_us']:.1f} | {e['over_stock']:.2f}x | "
                         f"{e['check']['ulps_vs_f64']:.2f} |")
    return "\n".join(lines) + "\n"

if __name__ == "__main__":
    sys.exit(main())
