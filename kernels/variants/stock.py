"""stock: MLX's own quantized matmul, the fallback everywhere.

Contract (MLX's Metal QMM, qmv order): activations and weights read as float32, weights
dequantized as ``scale * q + bias`` in float32; K laid ``interleaved`` over the 32 lanes (lane l
owns the l-th packed word of every 256-value block), each lane accumulating in float32, lanes
combined by ``simd_sum``; one rounding to the activation dtype. No Metal source of ours: on Metal
(and on a plain CPU device) this *is* ``mx.quantized_matmul``. On an emulated device the portable
form below runs instead, because the CPU backend's own QMM accumulates bf16/fp16 in low precision
and would not be what an Apple GPU computes.
"""

from __future__ import annotations

import mlx.core as mx

from kernels.qweights import QWeights
from kernels.variants._portable import split_k

NAME = "stock"
ROWS = None  # any M
DEFAULTS: dict = {}
METAL_SOURCE = None


def native(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return mx.quantized_matmul(x, qw.wq, qw.scales.astype(x.dtype), qw.biases.astype(x.dtype),
                               transpose=True, group_size=qw.group_size, bits=qw.bits)


def portable(x: mx.array, qw: QWeights, params: dict) -> mx.array:
    return split_k(x, qw, layout="interleaved", k_groups=1)
