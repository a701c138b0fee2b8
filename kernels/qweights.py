"""The quantized weight operand every kernel takes: exactly what ``mx.quantize`` returns."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx


@dataclass(frozen=True, eq=False)
class QWeights:
    """(N, K) affine-quantized weights: ``w ~= scales * q + biases`` per group of K."""

    wq: mx.array  # uint32 (N, K * bits / 32)
    scales: mx.array  # (N, K / group_size), in the model's dtype
    biases: mx.array
    group_size: int
    bits: int

    @property
    def n(self) -> int:
        return self.wq.shape[0]

    @property
    def k(self) -> int:
        return self.wq.shape[1] * 32 // self.bits

    @classmethod
    def quantize(cls, w: mx.array, group_size: int = 64, bits: int = 4,
                 dtype: mx.Dtype = mx.bfloat16) -> QWeights:
        """Quantize float weights; scales and biases stored in ``dtype`` as an MLX model does."""
        wq, s, b = mx.quantize(w, group_size=group_size, bits=bits)
        return cls(wq, s.astype(dtype), b.astype(dtype), group_size, bits)

    def columns(self, start: int, stop: int) -> QWeights:
        """Output columns [start, stop): full K, so each column's reduction is untouched."""
        return QWeights(self.wq[start:stop], self.scales[start:stop], self.biases[start:stop],
                        self.group_size, self.bits)
