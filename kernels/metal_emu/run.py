"""One variant launch on an emulated Apple GPU: MLX's exact source, built and executed."""

from __future__ import annotations

import functools

import mlx.core as mx
import numpy as np

from kernels.metal_emu import executor, glue, source, toolchain

_MX_TO_NP = {mx.float32: np.float32, mx.float16: np.float16, mx.uint32: np.uint32}


def _host(a: mx.array) -> executor.Buffer:
    if a.dtype == mx.bfloat16:
        return executor.Buffer("", np.array(a.view(mx.uint16)), bf16=True)
    return executor.Buffer("", np.array(a))


def _device_name(dtype: mx.Dtype):
    return "bfloat16" if dtype == mx.bfloat16 else _MX_TO_NP[dtype]


@functools.lru_cache(maxsize=1024)
def _prepared(kernel, name: str, in_specs: tuple, template: tuple, grid: tuple,
              threadgroup: tuple, out_specs: tuple) -> tuple[glue.Signature, str, str]:
    """(signature, library path, exact source) for one launch shape; traced and built once."""
    inputs = [mx.zeros(shape, dtype=dtype) for shape, dtype in in_specs]
    generated = source.generated_source(
        kernel, inputs, template=list(template), grid=grid, threadgroup=threadgroup,
        output_shapes=[s for s, _ in out_specs], output_dtypes=[d for _, d in out_specs])
    exact = source.full_source(generated)
    sig = glue.parse(generated)
    lib = toolchain.build_kernel(exact, glue.entry(sig), name)
    return sig, str(lib), exact


def prepare(kernel, name: str, inputs: list[mx.array], *, template: list, grid: tuple,
            threadgroup: tuple, output_shapes: list, output_dtypes: list):
    return _prepared(kernel, name, tuple((tuple(a.shape), a.dtype) for a in inputs),
                     tuple(template), tuple(grid), tuple(threadgroup),
                     tuple((tuple(s), d) for s, d in zip(output_shapes, output_dtypes)))


def run(kernel, name: str, input_names: list[str], output_names: list[str],
        inputs: list[mx.array], *, template: list, grid: tuple, threadgroup: tuple,
        output_shapes: list, output_dtypes: list) -> list[mx.array]:
    """Call ``kernel`` (an ``mx.fast.metal_kernel``) as MLX would on a Mac, on the executor."""
    sig, lib, _ = prepare(kernel, name, inputs, template=template, grid=grid,
                          threadgroup=threadgroup, output_shapes=output_shapes,
                          output_dtypes=output_dtypes)
    bufs = {n: _host(a) for n, a in zip(input_names, inputs)}
    outs = {n: (tuple(s), _device_name(d))
            for n, s, d in zip(output_names, output_shapes, output_dtypes)}
    got = executor.launch(name, sig, lib, bufs, outs, tuple(grid), tuple(threadgroup))
    result = []
    for n, d in zip(output_names, output_dtypes):
        a = mx.array(got[n])
        result.append(a.view(mx.bfloat16) if d == mx.bfloat16 else a)
    return result
