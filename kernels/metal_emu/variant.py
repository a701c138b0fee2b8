"""A kernel variant's Metal source on an emulated Apple GPU, launched exactly as on a Mac.

The launch (template, grid, threadgroup, inputs) is ``kernels.metal.launch_spec``'s, the kernel
object is ``kernels.metal``'s own ``mx.fast.metal_kernel``: the only difference from a Mac is
who compiles and runs the source MLX generates.
"""

from __future__ import annotations

import mlx.core as mx

from kernels import metal
from kernels.metal_emu import run
from kernels.qweights import QWeights


def launch(variant, x: mx.array, qw: QWeights, params: dict) -> mx.array:
    call = metal.prepare(variant, x, qw, params)
    (y,) = run.run(call.kernel, f"dflash2_{variant.NAME}", list(metal.INPUT_NAMES),
                   list(metal.OUTPUT_NAMES), **call.kwargs)
    return y
