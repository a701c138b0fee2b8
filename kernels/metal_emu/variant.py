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
    from kernels.dispatch import dtype_name  # dispatch imports this module

    m, k = x.shape
    spec = metal.launch_spec(variant, m, k, qw.n, qw.group_size, dtype_name(x.dtype), params)
    act = getattr(mx, spec.activation)
    arrays = {"x": x.astype(act), "w": qw.wq, "scales": qw.scales, "biases": qw.biases}
    kernel = metal._build(variant.NAME, variant.METAL_SOURCE, variant.HEADER)
    (y,) = run.run(kernel, f"dflash2_{variant.NAME}", list(spec.inputs),
                   list(metal.OUTPUT_NAMES), [arrays[name] for name in spec.inputs],
                   template=[(name, getattr(mx, v) if name == "T" else v)
                             for name, v in spec.template],
                   grid=spec.grid, threadgroup=spec.threadgroup,
                   output_shapes=[spec.output_shape], output_dtypes=[act])
    return y
