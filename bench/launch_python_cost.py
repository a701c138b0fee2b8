"""The Python a CUDA launch adds to its compiled replay, on a host with no NVIDIA GPU.

    python bench/launch_python_cost.py [--out bench/results/launch_python_cost.json]

``kernels.cuda.launch`` finds the weights' captured launch in their memo and replays it; the
replay (MLX's compiled call) is the floor, and everything above it is the launch's Python.
On the H200's hosts that Python scaled with the host: ~0.6 us on a fast one, ~1.0 us on the
slow one whose launch came to +2.19 us over stock (bench/results/h200/host_cost*.json), so
its share is what this measures where no GPU is needed. ``mx.fast.cuda_kernel`` is replaced by
a stand-in factory whose kernel is a real MLX computation (as tests/test_cuda_launch_cache.py
does); the launch, its memo and the captured replay are the real ones. Paths, timed in turns
(kernels/bench/host_cost.host_paired_us), each minus the replay within its turn:

- ``launch``: the memo keyed by the variant (since 2026-12-04 21:30 UTC);
- ``launch_shape_keyed``: the memo keyed by (variant, x's shape), as before
  (scripts/cuda_host_cost.shape_keyed, over the same entry);
- ``stock``: ``mx.quantized_matmul``, for scale.

A ratio of paths in one run, not an absolute time: this host is shared.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import MappingProxyType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import mlx.core as mx

from kernels import cuda
from kernels.bench.host_cost import host_paired_us
from kernels.qweights import QWeights

K, N, GS = 128, 32, 64  # the smallest shape the tile takes: evaluating the outputs is untimed
PARAMS = MappingProxyType({"n_tile": 32, "k_groups": 1, "unroll": 1, "prefetch": 0})


def standin(name, input_names, output_names, source, header="", **_):
    """The kernel factory's stand-in: one cheap MLX op of x in the kernel's place (its value
    does not matter here; every turn's outputs are evaluated, untimed)."""
    def kernel(*, inputs, template, grid, threadgroup, output_shapes, output_dtypes):
        return [mx.broadcast_to(inputs[0][:, :1], output_shapes[0])]
    return kernel


def measure(reps: int, n: int) -> dict:
    """The stand-in is in place only while this runs (and the kernels built with it are
    forgotten after), where MLX has no CUDA back-end."""
    real = mx.fast.cuda_kernel
    if not (hasattr(mx, "cuda") and mx.cuda.is_available()):
        mx.fast.cuda_kernel = standin
    try:
        return _measure(reps, n, "real CUDA" if mx.fast.cuda_kernel is real else "stand-in")
    finally:
        mx.fast.cuda_kernel = real
        cuda.clear_caches()


def _measure(reps: int, n: int, kernel: str) -> dict:
    import cuda_host_cost as hc
    qw = QWeights.quantize(mx.random.normal((N, K), key=mx.random.key(0)), GS, 4, mx.bfloat16)
    x = mx.random.normal((8, K), key=mx.random.key(1)).astype(mx.bfloat16)
    mx.eval(qw.wq, qw.scales, qw.biases, x, cuda.launch("mma_weights_a", x, qw, PARAMS))
    replay, by_shape = hc.captured_of(qw, x), hc.shape_keyed(qw, x)
    t = host_paired_us({
        "replay": lambda i: replay(x),
        "launch": lambda i: cuda.launch("mma_weights_a", x, qw, PARAMS),
        "launch_shape_keyed": lambda i: by_shape("mma_weights_a", x, PARAMS),
        "stock": lambda i: mx.quantized_matmul(x, qw.wq, qw.scales, qw.biases, transpose=True,
                                               group_size=GS, bits=4),
    }, "replay", n=n, reps=reps)
    return {"method": f"paired turns: {n} calls a turn, median of {reps} turns after 2 "
                      "untimed; python_ns = median of each turn's difference to the replay",
            "kernel": kernel,
            "paths": {k: {"us": v["us"], "python_ns": v["minus_baseline_us"] * 1e3}
                      for k, v in t.items()}}


def render(res: dict) -> str:
    p = res["paths"]
    saved = 1 - p["launch"]["python_ns"] / p["launch_shape_keyed"]["python_ns"]
    lines = [f"Launch Python over its replay ({res['kernel']} kernel; {res['method']}):", "",
             "| path | ns a call | over the replay, ns |", "|---|---|---|"]
    lines += [f"| {k} | {v['us'] * 1e3:.0f} | {v['python_ns']:+.0f} |" for k, v in p.items()]
    lines += ["", (f"The variant-keyed memo takes {100 * saved:.0f}% off the shape-keyed "
                   "launch's Python.")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="JSON here, the table beside it (.md)")
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--n", type=int, default=4000, help="calls a turn")
    args = ap.parse_args(argv)
    res = measure(args.reps, args.n)
    text = render(res)
    sys.stdout.write(text)
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
        Path(args.out).with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
