"""``launch``: what ``kernels.cuda.launch`` computes, on the executor instead of a GPU.

The launch takes its config from ``kernels.cuda_config`` (the same constants, grid and block a
device launch gets) and the weights as the CUDA launch reads them (scales and biases in the
activation dtype). Slow (a fiber a thread, a context switch a warp collective): for small
shapes that exercise every path of a tile, not for the model's.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from kernels import cuda_config
from kernels.cuda import weights_for
from kernels.cuda_emu import build
from kernels.metal_emu import executor, glue
from kernels.qweights import QWeights
from kernels.variants import VARIANTS

# the layouts whose headers build.EMULATED covers (the split-K sources call helpers it drops)
EMULATED_LAYOUTS = frozenset({"mma_weights_a", "mma_group_sums"})
_BUFFERS = ("x", "w", "scales", "biases", "y")
_SIGNATURE = glue.Signature("dflash2", "dflash2", tuple(
    glue.Param("", n, i, "buffer") for i, n in enumerate(_BUFFERS)))


def _buffer(name: str, a: mx.array) -> executor.Buffer:
    if a.dtype == mx.bfloat16:
        return executor.Buffer(name, np.array(a.view(mx.uint16)), bf16=True)
    return executor.Buffer(name, np.array(a))


def launch(name: str, x: mx.array, qw: QWeights, params: dict,
           order: str = "forward", copies: str = "at_issue") -> mx.array:
    """y (M, N) = x (M, K) @ W^T by the variant's CUDA source, emulated; ``NotEmulated`` (one
    line) for a variant the executor cannot run (the split-K sources). ``order`` "reverse" runs
    the grid's last cluster of blocks first, and a cluster's last block first: a tile's output
    must not depend on it. ``copies`` is when the bulk pipeline's copies land
    (``executor.COPIES``): its output must not depend on it either. w is read in the layout the
    launch config names, made as a device launch makes it (``kernels.cuda.weights_for``)."""
    if getattr(VARIANTS[name], "CUDA_LAYOUT", None) not in EMULATED_LAYOUTS:
        raise build.NotEmulated(f"{name}: only the mma variants' sources are emulated "
                                f"({', '.join(sorted(EMULATED_LAYOUTS))})")
    m, k = x.shape
    dt = "bfloat16" if x.dtype == mx.bfloat16 else "float16"
    cfg = cuda_config.launch_config(name, m, k, qw.n, qw.group_size, dt, dict(params))
    lib = build.library(name, dt, cfg.template, cfg.shared_memory)
    w, scales, biases = weights_for(name, qw, x.dtype, cfg.packing)
    inputs = {"x": _buffer("x", x), "w": _buffer("w", w),
              "scales": _buffer("scales", scales), "biases": _buffer("biases", biases)}
    out = executor.launch(f"{name} (CUDA, emulated)", _SIGNATURE, str(lib), inputs,
                          {"y": ((m, qw.n), dt if dt == "bfloat16" else np.float16)},
                          (cfg.grid, 1, 1), (cfg.threads, 1, 1), cluster=cfg.cluster,
                          order=order, copies=copies)
    y = mx.array(out["y"])
    return y.view(mx.bfloat16) if dt == "bfloat16" else y
