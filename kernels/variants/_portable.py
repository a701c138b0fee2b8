"""The one portable form every split-K float32 contract shares (see kernels/arith.py)."""

from __future__ import annotations

import mlx.core as mx

from kernels import arith
from kernels.qweights import QWeights


def split_k(x: mx.array, qw: QWeights, *, layout: str, k_groups: int,
            operand_dtype: mx.Dtype | None = None, fused_dequant: bool = False) -> mx.array:
    """y = x @ W^T: operands optionally rounded to ``operand_dtype``, float32 accumulation in
    the contract's split of K, one rounding to the activation dtype at the end.

    ``fused_dequant``: the weights are ``scale * q + bias`` rounded once to ``operand_dtype``
    (an FMA in that dtype) instead of through float32."""
    if fused_dequant:
        w32 = arith.dequantize_fused(qw.wq, qw.scales, qw.biases, qw.group_size, qw.bits,
                                     operand_dtype)
    else:
        w32 = arith.dequantize_f32(qw.wq, qw.scales, qw.biases, qw.group_size, qw.bits)
        if operand_dtype is not None:
            w32 = arith.round_through(w32, operand_dtype)
    x32 = x.astype(mx.float32)
    tag = ""
    if operand_dtype is not None:
        x32 = arith.round_through(x32, operand_dtype)
        tag = f"fused-{operand_dtype}" if fused_dequant else str(operand_dtype)
    wprep = arith.prepared_weights(w32, qw.wq, layout, k_groups, tag)
    return arith.split_k_matmul(x32, wprep, layout, k_groups).astype(x.dtype)
