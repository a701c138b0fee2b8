"""Where the custom CUDA launch's host time goes, per launch, on an NVIDIA GPU with MLX's CUDA
backend (issue 14, Deliver 2).

    python scripts/cuda_host_cost.py [--out FILE.json]

Building one launch's graph, not evaluating it (each batch is evaluated afterwards, untimed),
median over batches of 500 launches, hot weights, for:
- ``stock``: ``mx.quantized_matmul``;
- ``kernel_per_call``: the ``mx.fast.cuda_kernel`` object called directly with a launch config
  built once: what the launch cost before the launch was recorded. MLX writes the kernel's whole
  source string (header, signature, constants, body) on every such call;
- ``launch``: ``kernels.cuda.launch`` as the runtime calls it (the per-weights memo, then the
  replay of the recorded launch);
- ``replay``: the recorded launch's ``mx.compile`` function called directly (launch minus its
  Python lookup).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx

from kernels import cuda
from kernels.bench.host_cost import host_us
from kernels.qweights import QWeights

CASES = [("gate_up", 5120, 17408, "bfloat16", {"n_tile": 32, "k_groups": 1, "unroll": 1,
                                                "prefetch": 1}),
         ("down", 17408, 5120, "float16", {"n_tile": 32, "k_groups": 4, "unroll": 2,
                                            "prefetch": 1})]


def per_call_us(fn, n: int = 500, reps: int = 9) -> dict:
    return host_us(lambda i: fn(), n, reps)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    res = {"mlx_version": mx.__version__, "device": mx.device_info().get("device_name"),
           "cases": []}
    for op, k, n, dt_name, params in CASES:
        dt = getattr(mx, dt_name)
        w = mx.random.normal((n, k), key=mx.random.key(0)) / k ** 0.5
        qw = QWeights.quantize(w, 64, 4, dt)
        x = (mx.random.normal((8, k), key=mx.random.key(1)) / k ** 0.25).astype(dt)
        mx.eval(qw.wq, qw.scales, qw.biases, x)
        mx.eval(cuda.launch("mma_weights_a", x, qw, params))
        lx = cuda.launcher("mma_weights_a", 8, k, n, 64, dt, params)
        kernel, tmpl, grid, thr, shp, dts = (lx.kernel, lx.template, lx.grid, lx.threads,
                                             lx.shapes, lx.dtypes)

        def direct(kernel=kernel, tmpl=tmpl, grid=grid, thr=thr, shp=shp, dts=dts, x=x, qw=qw):
            return kernel(inputs=[x, qw.wq, qw.scales, qw.biases], template=tmpl, grid=grid,
                          threadgroup=thr, output_shapes=shp, output_dtypes=dts)[0]
        row = {"shape": op, "K": k, "N": n, "dtype": dt_name, "M": 8, "params": params,
               "stock": per_call_us(lambda x=x, qw=qw: mx.quantized_matmul(
                   x, qw.wq, qw.scales, qw.biases, transpose=True, group_size=64, bits=4)),
               "kernel_per_call": per_call_us(direct),
               "launch": per_call_us(lambda x=x, qw=qw, p=params: cuda.launch(
                   "mma_weights_a", x, qw, p)),
               "replay": per_call_us(lambda x=x, qw=qw, f=lx.fn: f(x, qw.wq, qw.scales,
                                                                    qw.biases)),
               "traces": lx.traces}
        row["launch_minus_stock_us"] = row["launch"]["us"] - row["stock"]["us"]
        print(json.dumps({k: (v["us"] if isinstance(v, dict) and "us" in v else v)
                          for k, v in row.items()}), flush=True)
        res["cases"].append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
