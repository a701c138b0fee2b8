"""Microbenchmark: the production M=8 verify path against the M=4 and M=16 paths and stock QMM.

    python -m kernels.bench.verify_m8 --k 5120 --n 17408 --dtype bfloat16 \
        --warmup 20 --iterations 100 [--variant NAME] [--n-slice COLS] [--json PATH]

Each path runs as the device would (``--device-arch`` emulates one). Latency is per launch,
synchronised with ``mx.eval``; verified rows/s is rows per launch over the median latency, so
the M=4 path is charged two launches per 8-row block. On a CPU host a full production shape
costs seconds per call: ``--n-slice`` keeps full K over a slice of output columns, and says so.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import mlx.core as mx

from devices.errors import Dflash2Error
from devices.identity import current_device
from kernels.dispatch import run_variant
from kernels.qweights import QWeights
from kernels.selection import Choice, select
from kernels.tiling import TilingError
from kernels.variants import VARIANTS

DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def time_path(choice: Choice, x: mx.array, qw: QWeights, device, warmup: int,
              iterations: int) -> dict:
    for _ in range(warmup):
        mx.eval(run_variant(choice.variant, x, qw, choice.params, device))
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        mx.eval(run_variant(choice.variant, x, qw, choice.params, device))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    rows = x.shape[0]
    return {"variant": choice.variant, "reason": choice.reason, "M": rows,
            "median_us": med * 1e6, "p10_us": _percentile(times, 0.1) * 1e6,
            "p90_us": _percentile(times, 0.9) * 1e6, "rows_per_s": rows / med}


def run(k: int, n: int, dtype: str, warmup: int, iterations: int, variant: str | None = None,
        n_slice: int | None = None, arch: str | None = None, seed: int = 0) -> dict:
    if dtype not in DTYPES:
        raise Dflash2Error(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    if variant is not None and variant not in VARIANTS:
        raise Dflash2Error(f"unknown variant {variant!r}: use one of {', '.join(VARIANTS)}")
    if warmup < 0 or iterations < 1:
        raise Dflash2Error("--warmup must be >= 0 and --iterations >= 1")
    device = current_device(arch)
    dt = DTYPES[dtype]
    key = mx.random.key(seed)
    kw, kx = mx.random.split(key)
    cols = min(n, n_slice) if n_slice else n
    # Quantize only the measured columns: each column's K reduction is the full one.
    w = mx.random.normal((cols, k), key=kw) / k ** 0.5
    qw = QWeights.quantize(w, 64, 4, dt if dt != mx.float32 else mx.bfloat16)
    x16 = (mx.random.normal((16, k), key=kx) / k ** 0.5).astype(dt)
    x8 = x16[:8]
    # The selection for the full production shape, whatever slice is measured.
    full = select(device, dtype, 8, k, n, 4, 64)
    m4 = select(device, dtype, 4, k, n, 4, 64)
    m16 = select(device, dtype, 16, k, n, 4, 64)
    paths: dict[str, tuple[Choice, mx.array]] = {}
    if variant:
        paths[variant] = (Choice(variant, "requested", dict(VARIANTS[variant].DEFAULTS)),
                          x8[: (VARIANTS[variant].ROWS or 8)])
    else:
        paths["m8"] = (full, x8)
        paths["m4"] = (m4, x8[:4])
        paths["m16"] = (m16, x16)
        paths["stock"] = (Choice("stock", "baseline"), x8)
    results = {name: time_path(c, x, qw, device, warmup, iterations)
               for name, (c, x) in paths.items()}
    out = {"device": device.to_json(), "K": k, "N": n, "n_measured": cols,
           "n_slice": cols != n, "dtype": dtype, "warmup": warmup, "iterations": iterations,
           "paths": results}
    if "m8" in results:
        out["m8_over_m4"] = results["m8"]["rows_per_s"] / results["m4"]["rows_per_s"]
        out["m8_over_stock"] = results["m8"]["rows_per_s"] / results["stock"]["rows_per_s"]
        out["m16_over_m8"] = results["m16"]["rows_per_s"] / results["m8"]["rows_per_s"]
    return out


def render(res: dict) -> str:
    dev = res["device"]
    lines = [(f"verify microbenchmark  device={dev['arch']}{' (emulated)' if dev['emulated'] else ''}"
             f"  backend={dev['backend']}  K={res['K']} N={res['N']} dtype={res['dtype']}")]
    if res["n_slice"]:
        lines.append(f"N-slice: full K over {res['n_measured']} of {res['N']} output columns "
                     f"(latencies are for the slice, not the full projection)")
    lines.append(f"{'path':<8}{'variant':<16}{'reason':<30}{'M':>3}{'median us':>12}"
                 f"{'p10 us':>11}{'p90 us':>11}{'rows/s':>12}")
    for name, p in res["paths"].items():
        lines.append(f"{name:<8}{p['variant']:<16}{p['reason']:<30}{p['M']:>3}"
                     f"{p['median_us']:>12.1f}{p['p10_us']:>11.1f}{p['p90_us']:>11.1f}"
                     f"{p['rows_per_s']:>12.1f}")
    if "m8_over_m4" in res:
        lines.append(f"M=8/M=4 rows/s: {res['m8_over_m4']:.2f}x   "
                     f"M=8/stock rows/s: {res['m8_over_stock']:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.bench.verify_m8",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, default=5120)
    ap.add_argument("--n", type=int, default=17408)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--variant", default=None, help="run one variant alone (for tracing)")
    ap.add_argument("--n-slice", type=int, default=None,
                    help="full K over this many output columns (CPU hosts)")
    ap.add_argument("--device-arch", default=None, help="emulate a device, e.g. applegpu_g13s")
    ap.add_argument("--json", default=None, help="write the results to this JSON file")
    args = ap.parse_args(argv)
    if args.k % 256:
        print("error: --k must be a multiple of 256 (the kernels' K layout)", file=sys.stderr)
        return 2
    try:
        res = run(args.k, args.n, args.dtype, args.warmup, args.iterations, args.variant,
                  args.n_slice, args.device_arch)
    except (Dflash2Error, TilingError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(render(res))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
