"""CUDA verify kernels on a real NVIDIA GPU: correctness, tiling sweep, and the microbenchmark.

    python bench/cuda_verify.py --out DIR [--quick]

In one run: (1) the bandwidth ceiling (a 1 GiB elementwise copy, read + write); (2) for every
production shape, bf16 and fp16, each CUDA variant against its portable implementation (run by
MLX on the same GPU), stock QMM and a float64 reference on a column slice, in ulps; (3) a sweep
of (n_tile, k_groups) for the M=8 and M=4 kernels per shape, timed as device-synchronised
batches of launches (warmed, median of several batches); (4) the table: custom M=8 against stock
QMM at M=8 and the M=4 path, microseconds per launch, verified rows/s and achieved bytes/s as a
fraction of the measured ceiling. Writes cuda_verify.json and cuda_verify.md under --out.
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

from dflash2.device import current_device
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


def sweep(name: str, x: mx.array, qw: QWeights, tiles, groups) -> list[dict]:
    rows = []
    k = x.shape[1]
    for nt in tiles:
        for kg in groups:
            if qw.n % nt or k % (256 * kg):
                continue
            params = {"n_tile": nt, "k_groups": kg}
            try:
                s = per_launch(lambda p=params: cuda.launch(name, x, qw, p))
            except (ValueError, RuntimeError) as e:  # a tile that fails is a finding, not a stop
                rows.append({"n_tile": nt, "k_groups": kg, "error": str(e)[:200]})
                continue
            rows.append({"variant": name, "n_tile": nt, "k_groups": kg, "us": s * 1e6})
    return rows


def m4_only(k: int, n: int, dt_name: str, dt) -> dict:
    w, qw = weights(k, n, dt)
    x4 = activations(w, 4, dt)
    s4 = sweep("mma_verify", x4, qw, [8], [g for g in (1, 2, 4) if k % (128 * g) == 0])
    for r in s4:
        r["variant"] = "mma_verify"
    s4 += sweep_pairs("verify_m4", x4, qw, [(4, 1)])
    b4 = best(s4)
    entry = {"K": k, "N": n, "dtype": dt_name, "sweep_m4": s4, "best_m4": b4,
             "stock_m4_us": per_launch(lambda: VARIANTS["stock"].native(x4, qw, {})) * 1e6}
    if b4:
        entry["check_m4"] = check(b4["variant"], x4, qw,
                                  {"n_tile": b4["n_tile"], "k_groups": b4["k_groups"]})
    print(f"m4-only {k}x{n} {dt_name}: best {b4} stock {entry['stock_m4_us']:.1f}us "
          f"check {entry.get('check_m4')}", flush=True)
    return entry


def sweep_pairs(name: str, x: mx.array, qw: QWeights, pairs) -> list[dict]:
    rows = []
    for nt, kg in pairs:
        for r in sweep(name, x, qw, [nt], [kg]):
            r["variant"] = name
            rows.append(r)
    return rows


def best(rows: list[dict]) -> dict:
    ok = [r for r in rows if "us" in r]
    return min(ok, key=lambda r: r["us"]) if ok else {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="fewer sweep points")
    ap.add_argument("--m4-only", action="store_true",
                    help="time only the M=4 path per shape (plus the router and drafts): the "
                         "second half of a run split across two device calls")
    ap.add_argument("--emit-table", default=None,
                    help="write the shipped selection table plus sm_90 entries for every "
                         "kernel that beat stock here (a candidate to review and commit)")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dev = current_device()
    res: dict = {"device": dev.to_json(), "shapes": {}, "draft": {}}
    print(f"device: {dev}", flush=True)
    ceiling = bandwidth_ceiling()
    res["bandwidth_ceiling_Bps"] = ceiling
    print(f"bandwidth ceiling (1 GiB copy, read+write): {ceiling / 1e12:.2f} TB/s", flush=True)
    for op, (k, n) in SHAPES.items():
        for dt_name, dt in DTYPES.items():
            if args.m4_only and n >= 256:
                res["shapes"][f"{op}/{dt_name}"] = m4_only(k, n, dt_name, dt)
                continue
            w, qw = weights(k, n, dt)
            xs = {m: activations(w, m, dt) for m in (4, 8, 16)}
            mma_groups = [g for g in (1, 2, 4, 8, 17) if k % (128 * g) == 0]
            if n < 256:
                scalar = ("narrow_output", [(2, 2), (1, 4)])
            else:
                scalar = ("scalar_kmajor", [(8, 1), (4, 2), (8, 4)] if not args.quick
                          else [(4, 2), (8, 4)])
            cands8 = sweep("mma_verify", xs[8], qw, [8], mma_groups)
            for r in cands8:
                r["variant"] = "mma_verify"
            s8 = sweep_pairs(scalar[0], xs[8], qw, scalar[1])
            b_mma = best(cands8)
            kg = [b_mma["k_groups"]] if b_mma else [1]
            s4 = sweep("mma_verify", xs[4], qw, [8], sorted({1, *kg}))
            for r in s4:
                r["variant"] = "mma_verify"
            s4 += sweep_pairs("verify_m4", xs[4], qw, [(4, 1)])
            s16 = sweep("mma_verify", xs[16], qw, [8], sorted({1, *kg}))
            for r in s16:
                r["variant"] = "mma_verify"
            b8, b4, b16 = best(cands8 + s8), best(s4), best(s16)
            entry = {"K": k, "N": n, "dtype": dt_name, "variant": b8.get("variant"),
                     "sweep_m8": cands8 + s8, "sweep_m4": s4, "sweep_m16": s16,
                     "best_m8": b8, "best_m4": b4, "best_m16": b16}
            for m, b in ((8, b8), (4, b4), (16, b16)):
                if b:
                    entry[f"check_m{m}"] = check(b["variant"], xs[m], qw,
                                                 {"n_tile": b["n_tile"],
                                                  "k_groups": b["k_groups"]})
                entry[f"stock_m{m}_us"] = per_launch(
                    lambda q=qw, xx=xs[m]: VARIANTS["stock"].native(xx, q, {})) * 1e6
            stock4 = entry["stock_m4_us"]
            m4_us = min(b4.get("us", 1e12), stock4)
            entry["m4_path_us"] = m4_us
            entry["m4_path"] = b4["variant"] if b4 and b4["us"] < stock4 else "stock"
            moved = bytes_moved(k, n, 8, 2, qw)
            if b8:
                entry["m8_rows_per_s"] = 8 / (b8["us"] * 1e-6)
                entry["m8_Bps"] = moved / (b8["us"] * 1e-6)
                entry["m8_fraction_of_ceiling"] = entry["m8_Bps"] / ceiling
                entry["m8_over_stock"] = entry["stock_m8_us"] / b8["us"]
                entry["m8_over_m4_rows"] = (8 / b8["us"]) / (4 / m4_us)
            entry["stock_m8_rows_per_s"] = 8 / (entry["stock_m8_us"] * 1e-6)
            entry["m4_rows_per_s"] = 4 / (m4_us * 1e-6)
            res["shapes"][f"{op}/{dt_name}"] = entry
            print(f"{op:8s} {dt_name:9s} M8 {b8} stock8 {entry['stock_m8_us']:.1f}us "
                  f"M4 {entry['m4_path']} {m4_us:.1f}us (stock {stock4:.1f}) "
                  f"M16 {b16.get('us', 0):.1f}us (stock {entry['stock_m16_us']:.1f}) "
                  f"check8 {entry.get('check_m8')}", flush=True)
            del w, qw, xs
    for op, (k, n) in DRAFT.items():
        w, qw = weights(k, n, mx.bfloat16)
        x8 = activations(w, 8, mx.float32)
        s = sweep_pairs("w4a32", x8, qw, [(4, 1), (8, 1), (4, 2), (8, 4)])
        b = best(s)
        stock = per_launch(lambda q=qw, xx=x8: VARIANTS["stock"].native(xx, q, {}))
        entry = {"K": k, "N": n, "sweep": s, "best": b, "stock_us": stock * 1e6}
        if b:
            entry["check"] = check("w4a32", x8, qw, {"n_tile": b["n_tile"],
                                                    "k_groups": b["k_groups"]})
            entry["over_stock"] = stock * 1e6 / b["us"]
        res["draft"][op] = entry
        print(f"draft {op} w4a32 {b} stock {stock * 1e6:.1f}us check {entry.get('check')}",
              flush=True)
    if args.emit_table:
        Path(args.emit_table).write_text(json.dumps(candidate_table(res, dev.arch), indent=1))
        print(f"candidate table: {args.emit_table}", flush=True)
    (out / "cuda_verify.json").write_text(json.dumps(res, indent=1))
    (out / "cuda_verify.md").write_text(render(res))
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
                                "params": {"n_tile": b["n_tile"], "k_groups": b["k_groups"]},
                                "profiled": f"measured: {b['us']:.1f} us vs stock "
                                            f"{stock:.1f} us"})
    for op, e in res["draft"].items():
        b = e.get("best") or {}
        if b and b["us"] < e["stock_us"]:
            entries.append({"devices": [arch], "dtypes": ["float32"], "M": 8, "bits": 4,
                            "group_sizes": [64], "shapes": [op], "variant": "w4a32",
                            "params": {"n_tile": b["n_tile"], "k_groups": b["k_groups"]},
                            "profiled": f"measured: {b['us']:.1f} us vs stock "
                                        f"{e['stock_us']:.1f} us"})
    table["entries"] = entries
    return table


def render(res: dict) -> str:
    ceil = res["bandwidth_ceiling_Bps"]
    lines = [(f"# CUDA verify kernels on {res['device']['chip']} ({res['device']['arch']}, "
             f"MLX {res['device']['mlx_version']})"), "",
             (f"Bandwidth ceiling measured in the same run (1 GiB elementwise, read + write): "
             f"{ceil / 1e12:.2f} TB/s."), "",
             ("| shape | dtype | M=8 kernel (n_tile, k_groups) | M=8 us | stock M=8 us | "
             "M=4 path | M=4 us | M=8 rows/s | M=8/stock | M=8/M=4 rows | GB/s | "
             "of ceiling | ulps vs f64 |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, e in res["shapes"].items():
        b = e.get("best_m8") or {}
        if not b or "m8_Bps" not in e:
            continue
        lines.append(
            f"| {key.split('/')[0]} ({e['K']}, {e['N']}) | {e['dtype']} | {b['variant']} "
            f"({b['n_tile']}, {b['k_groups']}) | {b['us']:.1f} | {e['stock_m8_us']:.1f} | "
            f"{e['m4_path']} | {e['m4_path_us']:.1f} | {e['m8_rows_per_s']:.3g} | "
            f"{e['m8_over_stock']:.2f}x | {e['m8_over_m4_rows']:.2f}x | "
            f"{e['m8_Bps'] / 1e9:.0f} | {e['m8_fraction_of_ceiling']:.0%} | "
            f"{e['check_m8']['ulps_vs_f64']:.2f} |")
    lines += ["", ("| draft shape (W4A32) | kernel (n_tile, k_groups) | us | stock fp32 us | "
              "speed-up | ulps vs f64 |"), "|---|---|---|---|---|---|"]
    for op, e in res["draft"].items():
        b = e.get("best") or {}
        if b:
            lines.append(f"| {op} ({e['K']}, {e['N']}) | w4a32 ({b['n_tile']}, "
                         f"{b['k_groups']}) | {b['us']:.1f} | {e['stock_us']:.1f} | "
                         f"{e['over_stock']:.2f}x | {e['check']['ulps_vs_f64']:.2f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
