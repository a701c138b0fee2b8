"""What the shipped suites share: the device, the shapes, seeded inputs, and the cost policy.

Cost policy (CPU hosts): every case keeps the full K of its production shape, so each output
column's reduction is the one a device performs, but only ``CPU_N_SLICE`` output columns are
computed (columns are independent). On a Metal or CUDA device the full N runs. Selections are
always made, and recorded, for the full production shape. Seeded cases are cached for the test
session, so the dequantized weights and the float64 reference are built once per shape.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx import nn

from devices.identity import DeviceIdentity, current_device
from kernels import arith
from kernels.dispatch import dtype_name, quantized_matmul, run_variant
from kernels.qweights import QWeights
from kernels.selection import load_table

CPU_N_SLICE = 128
GPU_N_CAP = 32768  # the 248320-wide vocabulary: a float64 reference of it would be 10 GB
HERE = Path(__file__).parent
DTYPES = {"bfloat16": mx.bfloat16, "float16": mx.float16, "float32": mx.float32}

TARGET_OPS = ("gate_up", "down", "out", "attn_q", "attn_kv", "router")
DRAFT_OPS = ("draft_o", "draft_q", "draft_down", "draft_kv")
VOCAB_OP = "vocab"


def device() -> DeviceIdentity:
    """Read per call: the plugin sets DFLASH2_DEVICE_ARCH before any test runs."""
    return current_device()


def shape(op: str) -> tuple[int, int]:
    return load_table().shapes[op]


def measured_columns(n: int, dev: DeviceIdentity | None = None) -> int:
    dev = dev or device()
    if dev.backend in ("metal", "cuda") and not dev.emulated:
        return min(n, GPU_N_CAP)
    return min(n, CPU_N_SLICE)


@dataclass(frozen=True, eq=False)
class Case:
    """Seeded inputs for one (op, dtype): weights N(0,1)/sqrt(K); each activation row is a row of
    W plus 0.3 x noise, so its own output sits near 1 and the argmax margin is large."""

    op: str
    k: int
    n: int  # production N (selection)
    qw: QWeights  # the measured columns
    x: mx.array  # (16, K) activation rows in the case dtype
    wd: np.ndarray  # float64 dequantized weights (measured columns)
    seed: int

    def rows(self, m: int) -> mx.array:
        return self.x[:m]

    def reference(self, m: int) -> tuple[np.ndarray, np.ndarray]:
        """float64 x @ W^T of the dequantized weights, and sum |x w| (the dot product's scale)."""
        xd = np.array(self.rows(m).astype(mx.float32), dtype=np.float64)
        return xd @ self.wd.T, np.abs(xd) @ np.abs(self.wd).T


@functools.lru_cache(maxsize=64)
def case(op: str, dtype: str, seed: int = 20261202, cols: int | None = None) -> Case:
    k, n = shape(op)
    cols = cols or measured_columns(n)
    rng = np.random.default_rng([seed, k, n])
    w = mx.array((rng.standard_normal((cols, k)) / np.sqrt(k)).astype(np.float32))
    store = mx.bfloat16 if dtype == "float32" else DTYPES[dtype]
    qw = QWeights.quantize(w, 64, 4, store)
    picks = mx.array(rng.integers(0, cols, 16))
    noise = mx.array((0.3 * rng.standard_normal((16, k)) / np.sqrt(k)).astype(np.float32))
    x = (w[picks] + noise).astype(DTYPES[dtype])
    wd = np.array(arith.dequantize_f32(qw.wq, qw.scales, qw.biases, 64, 4), dtype=np.float64)
    mx.eval(x)
    return Case(op, k, n, qw, x, wd, seed)


def verify_path(c: Case, m: int, dev: DeviceIdentity | None = None) -> mx.array:
    """The production verify path for the first M rows, selected for the full shape."""
    return verify_rows(c, 0, m, dev)


def verify_rows(c: Case, start: int, stop: int, dev: DeviceIdentity | None = None) -> mx.array:
    return quantized_matmul(c.x[start:stop], c.qw, dev or device(), op=c.op, columns_of=c.n)


def stock(c: Case, m: int, dev: DeviceIdentity | None = None) -> mx.array:
    """Stock QMM as this device runs it (the CPU backend's own on a plain CPU device)."""
    return run_variant("stock", c.rows(m), c.qw, {}, dev or device())


def as_layer(c: Case) -> nn.QuantizedLinear:
    layer = nn.QuantizedLinear(c.k, c.qw.n, bias=False, group_size=c.qw.group_size,
                               bits=c.qw.bits)
    layer.weight, layer.scales, layer.biases = c.qw.wq, c.qw.scales, c.qw.biases
    return layer


def f64(a: mx.array) -> np.ndarray:
    return np.array(a.astype(mx.float32), dtype=np.float64)


def out_dtype(a: mx.array) -> str:
    return dtype_name(a.dtype)


def load_json(name: str) -> dict:
    return json.loads((HERE / name).read_text())
