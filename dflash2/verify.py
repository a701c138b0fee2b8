"""The verify and draft wrappers that route a model's quantized projections through the kernels.

``VerifyQuantizedLinear`` replaces a target ``nn.QuantizedLinear``: bf16/fp16 activations with
M in {4, 8, 16} rows go through the selected kernel, everything else through stock. The custom
verifier can be switched off for a scope (``custom_verifier(False)``) or for the process
(``DFLASH2_CUSTOM_VERIFIER=0``); off means stock, bit for bit.
``DraftQuantizedLinear`` runs the draft's fewer-than-8-row inputs zero-padded to the M=8 path.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator

import mlx.core as mx
from mlx import nn

from devices.identity import DeviceIdentity
from kernels.dispatch import at_load, quantized_matmul
from kernels.qweights import QWeights
from kernels.selection import FALLBACK_DTYPE, Choice

ENV_SWITCH = "DFLASH2_CUSTOM_VERIFIER"
VERIFY_DTYPES = (mx.bfloat16, mx.float16)

_enabled: contextvars.ContextVar[bool | None] = contextvars.ContextVar("custom_verifier",
                                                                       default=None)


def custom_verifier_enabled() -> bool:
    scoped = _enabled.get()
    if scoped is not None:
        return scoped
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


@contextlib.contextmanager
def custom_verifier(enabled: bool) -> Iterator[None]:
    token = _enabled.set(enabled)
    try:
        yield
    finally:
        _enabled.reset(token)


def qweights_of(layer: nn.QuantizedLinear) -> QWeights:
    return QWeights(layer.weight, layer.scales, layer.biases, layer.group_size, layer.bits)


class _KernelLinear(nn.Module):
    """What both wrappers hold: the layer's quantized weights, bias, op name and device."""

    def __init__(self, layer: nn.QuantizedLinear, op: str, device: DeviceIdentity,
                 columns_of: int | None = None):
        super().__init__()
        self.qw = at_load(qweights_of(layer), device, columns_of=columns_of)
        self.columns_of = columns_of  # full N when the layer holds a column slice (suites)
        self.bias = layer.get("bias") if "bias" in layer else None
        self.op = op
        self.device = device

    def _finish(self, y: mx.array, lead: tuple[int, ...]) -> mx.array:
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*lead, self.qw.n)


class VerifyQuantizedLinear(_KernelLinear):
    """A target projection whose verify passes run the tuned kernel for this device."""

    def __init__(self, layer: nn.QuantizedLinear, op: str, device: DeviceIdentity,
                 columns_of: int | None = None):
        super().__init__(layer, op, device, columns_of)
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        forced = None if x.dtype in VERIFY_DTYPES else Choice("stock", FALLBACK_DTYPE)
        y = quantized_matmul(x2, self.qw, self.device, op=self.op,
                             disabled=not custom_verifier_enabled(), choice=forced,
                             columns_of=self.columns_of)
        return self._finish(y, lead)


class DraftQuantizedLinear(_KernelLinear):
    """A draft projection: activations in the resolved dtype, <8 rows padded to the M=8 path.

    Padding rows are zeros and every output row depends only on its own input row, so the
    real rows are exactly what they would be in a full block; the pad is sliced off.
    """

    BLOCK = 8

    def __init__(self, layer: nn.QuantizedLinear, op: str, device: DeviceIdentity,
                 activation_dtype: mx.Dtype, columns_of: int | None = None):
        super().__init__(layer, op, device, columns_of)
        self.activation_dtype = activation_dtype
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k).astype(self.activation_dtype)
        rows = x2.shape[0]
        if rows < self.BLOCK:
            pad = mx.zeros((self.BLOCK - rows, k), dtype=x2.dtype)
            y = quantized_matmul(mx.concatenate([x2, pad]), self.qw, self.device,
                                 op=self.op, columns_of=self.columns_of)[:rows]
        else:
            y = quantized_matmul(x2, self.qw, self.device, op=self.op,
                                 columns_of=self.columns_of)
        return self._finish(y.astype(x.dtype), lead)
