"""One quantized matmul through the kernel the table selects, observed by the recorder.

Where each variant runs: on a real Apple GPU its Metal source; on an emulated device its
portable implementation (stock included: MLX's Metal QMM accumulates in float32, the CPU's does
not); on a plain CPU device only stock is ever selected, and it is the CPU backend's own
``mx.quantized_matmul`` -- low-precision bf16/fp16 accumulation that the suites record, not hide.
"""

from __future__ import annotations

import mlx.core as mx

from dflash2.device import DeviceIdentity
from kernels import metal
from kernels.qweights import QWeights
from kernels.recorder import Selection, report
from kernels.selection import Choice, select
from kernels.variants import VARIANTS, stock

_DTYPE_NAMES = {mx.bfloat16: "bfloat16", mx.float16: "float16", mx.float32: "float32"}


def dtype_name(dtype: mx.Dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).removeprefix("mlx.core."))


def run_variant(name: str, x: mx.array, qw: QWeights, params: dict,
                device: DeviceIdentity) -> mx.array:
    """Run one variant as ``device`` would; ``x`` is (M, K)."""
    variant = VARIANTS[name]
    if name == "stock":
        return stock.portable(x, qw, params) if device.emulated else stock.native(x, qw, params)
    if device.backend == "metal" and not device.emulated:
        return metal.launch(variant, x, qw, params)
    if device.backend == "cuda" and not device.emulated:
        from kernels import cuda

        if cuda.has_source(name):
            return cuda.launch(name, x, qw, params)
    return variant.portable(x, qw, {**variant.DEFAULTS, **params})


def choose(x: mx.array, qw: QWeights, device: DeviceIdentity, *, disabled: bool = False,
           columns_of: int | None = None) -> Choice:
    """``columns_of``: the projection's full N when ``qw`` holds a slice of its columns (suites
    on CPU hosts), so the selection is the production shape's."""
    m = x.shape[0]
    return select(device, dtype_name(x.dtype), m, qw.k, columns_of or qw.n, qw.bits,
                  qw.group_size, disabled=disabled)


def quantized_matmul(x: mx.array, qw: QWeights, device: DeviceIdentity, *, op: str = "linear",
                     disabled: bool = False, choice: Choice | None = None,
                     columns_of: int | None = None) -> mx.array:
    """y (M, N) = x (M, K) @ W^T through the selected kernel; the selection is reported.

    ``choice`` overrides the table for callers that know better (a target wrapper given fp32
    activations is not a verify pass); it is reported like any other selection.
    """
    n = columns_of or qw.n
    if disabled:
        choice = choose(x, qw, device, disabled=True)
    elif choice is None:
        choice = choose(x, qw, device, columns_of=n)
    report(Selection(op, dtype_name(x.dtype), x.shape[0], qw.k, n, choice.variant,
                     choice.reason))
    return run_variant(choice.variant, x, qw, choice.params, device)
