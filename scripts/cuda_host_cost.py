"""Where the custom CUDA launch's host time goes, per launch, on an NVIDIA GPU with MLX's CUDA
backend (issue 14, Deliver 2).

    python scripts/cuda_host_cost.py [--out FILE.json]

Building one launch's graph, not evaluating it (each batch is evaluated afterwards, untimed),
hot weights, the paths timed in turns (kernels/bench/host_cost.host_paired_us: 500 launches a
turn, median of 15 turns, and each path's median difference to stock within a turn), for the
M=8 gate_up and down tiles the selection table ships:
- ``stock``: ``mx.quantized_matmul``;
- ``stock_compiled``: the same under ``mx.compile``: what a compiled call costs over the op;
- ``kernel_per_call``: the ``mx.fast.cuda_kernel`` object called directly with a launch config
  built once: MLX writes the kernel's whole source string (header, signature, constants, body)
  on every such call;
- ``kernel_specialized``: a kernel object made for this one shape, its constants written into
  its source (no template list to convert and format per call), called directly; checked bit
  for bit against ``launch``;
- ``launch``: ``kernels.cuda.launch`` as the runtime calls it (the per-weights memo, then the
  replay of the weights' captured launch: a compiled function of x alone, the weights constants
  of its graph), with the params the runtime passes: the selection table's read-only mapping,
  one object per entry, known to the memo by identity;
- ``launch_dict``: the same with a plain dict of the same params, compared item by item (what
  every launch paid before the table's params were read-only);
- ``launch_shape_keyed``: the launch as it was until 2026-12-04 21:30 UTC, its memo keyed by
  (variant, x's shape) (one captured function per shape), with the same captured function:
  the Python that keying by shape cost (``x.shape``, the tuple, its hash);
- ``replay_captured``: that captured function called directly (launch minus its Python lookup);
- ``replay_shared``: the design before, for the before/after on the same host in the same run:
  the shape's one compiled function of (x, wq, scales, biases), shared by all weights of the
  shape, called with the weights as inputs; checked bit for bit against ``launch``;
- ``launch_shared``: the whole launch before: a list per (variant, shape, dtype) in a memo,
  scanned with a params comparison, then ``replay_shared``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import MappingProxyType, SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import cuda_verify_tiles
import mlx.core as mx

from kernels import cuda
from kernels.bench.host_cost import host_paired_us
from kernels.qweights import QWeights
from kernels.variants import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
CUDA_TYPES = {"bfloat16": "__nv_bfloat16", "float16": "__half", "float32": "float"}


def table_tile(shape: str, dtype: str, m: int = 8) -> dict:
    """The tile the table's sm_90 entry ships (its candidate where it selects stock)."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    chosen = cuda_verify_tiles.table_choice(table, shape, dtype, m)
    if chosen is None:
        raise LookupError(f"no sm_90 entry for {shape} {dtype} M={m}")
    return chosen[1]


CASES = [("gate_up", 5120, 17408, "bfloat16"), ("down", 17408, 5120, "float16")]


def specialized(lx: cuda.Launcher, dt_name: str):
    """The launch's kernel made for this one shape: MLX's own ``constexpr`` lines, written once
    into the body, instead of a template list MLX formats on every call. Its header is the
    launch's own (``cuda.kernel_header``: with the tile's launch bounds), so it compiles the
    same kernel."""
    v = VARIANTS[lx.name]
    consts = "".join(
        f"  constexpr bool {k} = {'true' if val else 'false'};\n" if isinstance(val, bool)
        else f"  constexpr int {k} = {val};\n" for k, val in lx.template if k != "T")
    tag = abs(hash((tuple(lx.template[1:]), lx.header))) % 10 ** 12
    kernel = mx.fast.cuda_kernel(
        name=f"dflash2_{lx.name}_{dt_name}_{tag}", input_names=["x", "w", "scales", "biases"],
        output_names=["y"], source=f"  using T = {CUDA_TYPES[dt_name]};\n{consts}{v.CUDA_SOURCE}",
        header=lx.header)

    def call(x, w, s, b):
        return kernel(inputs=[x, w, s, b], grid=lx.grid, threadgroup=lx.threads,
                      output_shapes=lx.shapes, output_dtypes=lx.dtypes)[0]
    return call


def shared_launch(lx: cuda.Launcher, x: mx.array, qw: QWeights, params: dict):
    """The launch as it was before the weights were captured (``launch_shared``; its compiled
    function, ``replay_shared``): ``lx.call`` under one ``mx.compile`` per shape, the weights
    its inputs; the weights' memo a list per (variant, x shape, x dtype) of (params, function,
    weights). One namespace holds the function and the memo, so a timed call looks up
    ``old.launch`` and passes ``old`` as its weights, as ``cuda.launch(..., qw, ...)`` does."""
    def launch(name, x, qw, params):
        for p, fn, w, s, b in qw.kernel_memo.get((name, x.shape, x.dtype), ()):
            if p == params:
                return fn(x, w, s, b)
        raise LookupError(f"{name}: no shared launch for {x.shape} {params}")
    replay = mx.compile(lx.call)
    memo = {(lx.name, x.shape, x.dtype): [(dict(params), replay, qw.wq, qw.scales, qw.biases)]}
    return SimpleNamespace(launch=launch, kernel_memo=memo, replay=replay)


def captured_of(qw: QWeights, x: mx.array):
    """The weights' captured launch as ``cuda.launch`` keeps it (the memo's short key, the
    entry's last field)."""
    return qw.kernel_memo["mma_weights_a"][-1]


def shape_keyed(qw: QWeights, x: mx.array):
    """``cuda.launch`` as it was with its memo keyed by (variant, x's shape), over the same
    entry: the per-call Python that ``launch_shape_keyed`` times against ``launch``."""
    memo = {("mma_weights_a", x.shape): qw.kernel_memo["mma_weights_a"]}

    def launch(name, x, params):
        p, dtype, fn = memo[(name, x.shape)]
        if (p is params or p == params) and dtype == x.dtype:
            return fn(x)
        raise LookupError(f"{name}: no entry for {params}")
    return launch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args(argv)
    res = {"mlx_version": mx.__version__, "device": mx.device_info().get("device_name"),
           "method": f"paired turns: 500 launches a turn, median of {args.reps} turns after 2 "
                     "untimed; minus_stock_us = median of each turn's difference to stock",
           "cases": []}
    for op, k, n, dt_name in CASES:
        params = table_tile(op, dt_name)
        dt = getattr(mx, dt_name)
        w = mx.random.normal((n, k), key=mx.random.key(0)) / k ** 0.5
        qw = QWeights.quantize(w, 64, 4, dt)
        x = (mx.random.normal((8, k), key=mx.random.key(1)) / k ** 0.25).astype(dt)
        mx.eval(qw.wq, qw.scales, qw.biases, x)
        frozen = MappingProxyType(dict(params))  # as kernels.selection hands them out
        y = cuda.launch("mma_weights_a", x, qw, frozen)
        lx = cuda.launcher("mma_weights_a", 8, k, n, 64, dt, params)
        try:  # an experiment: a failure is recorded, the other paths still timed
            spec = specialized(lx, dt_name)
            same = mx.array_equal(spec(x, qw.wq, qw.scales, qw.biases), y).item()
        except (ValueError, RuntimeError) as e:
            spec, same = None, f"error: {str(e)[:300]}"
        stock_c = mx.compile(lambda x, w, s, b: mx.quantized_matmul(
            x, w, s, b, transpose=True, group_size=64, bits=4))

        def direct(i, lx=lx, x=x, qw=qw):
            return lx.kernel(inputs=[x, qw.wq, qw.scales, qw.biases], template=lx.template,
                             grid=lx.grid, threadgroup=lx.threads, output_shapes=lx.shapes,
                             output_dtypes=lx.dtypes)[0]
        old, cap = shared_launch(lx, x, qw, params), captured_of(qw, x)
        by_shape = shape_keyed(qw, x)
        shared_same = mx.array_equal(old.launch("mma_weights_a", x, old, params), y).item()
        makes = {
            "stock": lambda i, x=x, qw=qw: mx.quantized_matmul(
                x, qw.wq, qw.scales, qw.biases, transpose=True, group_size=64, bits=4),
            "stock_compiled": lambda i, x=x, qw=qw, f=stock_c: f(x, qw.wq, qw.scales, qw.biases),
            "kernel_per_call": direct,
            **({"kernel_specialized": lambda i, x=x, qw=qw, f=spec: f(x, qw.wq, qw.scales,
                                                                      qw.biases)}
               if spec else {}),
            "launch": lambda i, x=x, qw=qw, p=frozen: cuda.launch("mma_weights_a", x, qw, p),
            "launch_dict": lambda i, x=x, qw=qw, p=params: cuda.launch("mma_weights_a", x, qw,
                                                                       p),
            "launch_shape_keyed": lambda i, x=x, p=frozen, f=by_shape: f("mma_weights_a", x, p),
            "replay_captured": lambda i, x=x, f=cap: f(x),
            "replay_shared": lambda i, x=x, qw=qw, f=old.replay: f(x, qw.wq, qw.scales,
                                                                   qw.biases),
            "launch_shared": lambda i, x=x, p=params, old=old: old.launch("mma_weights_a", x,
                                                                          old, p)}
        t = host_paired_us(makes, "stock", n=500, reps=args.reps)
        row = {"shape": op, "K": k, "N": n, "dtype": dt_name, "M": 8, "params": params,
               "specialized_bit_exact": same, "shared_bit_exact": shared_same,
               "traces": lx.traces, **t}  # 2: the captured launch's and replay_shared's
        print(json.dumps({"shape": op, "dtype": dt_name, "specialized_bit_exact": same,
                          "shared_bit_exact": shared_same,
                          **{p: [round(v["us"], 2), round(v["minus_baseline_us"], 2)]
                             for p, v in t.items()}}), flush=True)
        res["cases"].append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
