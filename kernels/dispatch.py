"""One quantized matmul through the kernel the table selects, observed by the recorder.

Where each variant runs (``implementation``, a lookup, recorded with every selection):
- a real Apple GPU: its Metal source (``metal``); stock is MLX's own QMM (``stock-native``);
- an emulated Apple GPU: its Metal source, exactly as MLX generates it, compiled by clang and
  run by the SIMT executor (``metal-emulated``), and held against its portable form, the
  oracle: a result beyond the variant's ulp bound raises ``KernelMismatch``. Stock runs its
  portable form (``portable``): MLX's Metal QMM accumulates in float32, the CPU's does not.
  ``DFLASH2_EMULATE_METAL=0`` runs the portable forms instead (the pre-emulator path, kept for
  the bench that prices the emulator);
- an NVIDIA GPU: the CUDA source (``cuda``) where a variant has one;
- a plain CPU device: only stock is selected, the CPU backend's own ``mx.quantized_matmul``
  (``stock-native``): low-precision bf16/fp16 accumulation that the suites record, not hide.
"""

from __future__ import annotations

import os

import mlx.core as mx

from devices.identity import DeviceIdentity
from kernels import metal, tiling
from kernels.qweights import QWeights
from kernels.recorder import (
    IMPL_CUDA,
    IMPL_METAL,
    IMPL_METAL_EMULATED,
    IMPL_PORTABLE,
    IMPL_STOCK_NATIVE,
    Selection,
    report,
)
from kernels.selection import Choice, select, tuned_keys
from kernels.variants import VARIANTS, stock

_DTYPE_NAMES = {mx.bfloat16: "bfloat16", mx.float16: "float16", mx.float32: "float32"}


def dtype_name(dtype: mx.Dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).removeprefix("mlx.core."))


ENV_EMULATE_METAL = "DFLASH2_EMULATE_METAL"


def _emulates_metal(device: DeviceIdentity) -> bool:
    return (device.emulated and device.generation is not None
            and os.environ.get(ENV_EMULATE_METAL, "1") != "0")


def implementation(name: str, device: DeviceIdentity) -> str:
    """Which implementation of variant ``name`` runs on ``device`` (see the module docstring)."""
    variant = VARIANTS[name]
    if name == "stock":
        return IMPL_PORTABLE if device.emulated else IMPL_STOCK_NATIVE
    has_metal = getattr(variant, "METAL_SOURCE", None) is not None
    if device.backend == "metal" and not device.emulated and has_metal:
        return IMPL_METAL
    if has_metal and _emulates_metal(device):
        return IMPL_METAL_EMULATED
    if device.backend == "cuda" and not device.emulated:
        from kernels import cuda

        if cuda.has_source(name):
            return IMPL_CUDA
    return IMPL_PORTABLE


def _portable(variant, x, qw, params, device):
    return variant.portable(x, qw, {**variant.DEFAULTS, **params})


def _metal_emulated(variant, x, qw, params, device):
    from kernels.metal_emu import oracle
    from kernels.metal_emu import variant as emulated

    y = emulated.launch(variant, x, qw, params)
    ref = _portable(variant, x, qw, params, device)
    oracle.check(variant.NAME, y, ref, x, qw, dtype_name(y.dtype),
                 getattr(variant, "ORACLE_ULPS", oracle.DEFAULT_BOUND))
    return y


def _cuda(variant, x, qw, params, device):
    from kernels import cuda

    return cuda.launch(variant.NAME, x, qw, params)


_RUNNERS = {
    IMPL_STOCK_NATIVE: lambda v, x, qw, p, d: stock.native(x, qw, p),
    IMPL_PORTABLE: _portable,
    IMPL_METAL: lambda v, x, qw, p, d: metal.launch(v, x, qw, p),
    IMPL_METAL_EMULATED: _metal_emulated,
    IMPL_CUDA: _cuda,
}


def run_variant(name: str, x: mx.array, qw: QWeights, params: dict,
                device: DeviceIdentity) -> mx.array:
    """Run one variant as ``device`` would; ``x`` is (M, K)."""
    return _RUNNERS[implementation(name, device)](VARIANTS[name], x, qw, params, device)


def at_load(qw: QWeights, device: DeviceIdentity, *, columns_of: int | None = None) -> QWeights:
    """``qw`` with every layout of w that the table's tuned CUDA entries for this device and
    shape read made now (``kernels.cuda.layouts_for``), where the layer is loaded, rather than
    on a first call or, inside a caller's ``mx.compile`` with the weights as inputs, on every
    call. Other devices read w as MLX stores it: ``qw`` as given. A tile that cannot tile the
    shape is left to its call, which says so."""
    if device.backend != "cuda":  # nothing but CUDA tiles pack w
        return qw
    from kernels import cuda

    for dt, m, choice in tuned_keys(device, qw.k, columns_of or qw.n, qw.bits, qw.group_size):
        if implementation(choice.variant, device) != IMPL_CUDA:
            continue
        try:
            cuda.layouts_for(choice.variant, qw, m, getattr(mx, dt), choice.params)
        except tiling.TilingError:
            continue
    return qw


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
                     choice.reason, implementation(choice.variant, device)))
    return run_variant(choice.variant, x, qw, choice.params, device)
