"""The quantized weight operand every kernel takes: exactly what ``mx.quantize`` returns."""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx


@dataclass(frozen=True, eq=False)
class QWeights:
    """(N, K) affine-quantized weights: ``w ~= scales * q + biases`` per group of K."""

    wq: mx.array  # uint32 (N, K * bits / 32)
    scales: mx.array  # (N, K / group_size), in the model's dtype
    biases: mx.array
    group_size: int
    bits: int
    # The largest |scale|, as the caller measured it (kernels.cuda.scale_magnitude) on these
    # scales as given; None: not measured. What lets a launch that sees only tracers of them (a
    # caller's mx.compile with the weights as inputs) take mma_weights_a's ``denorm``, whose
    # limit is a scale magnitude. Evaluated weights are measured by the launch anyway.
    scales_max_abs: float | None = None
    # (variant, *packing) -> w in that variant's own layout (``kernels.cuda.layouts_for``),
    # made where the weights are loaded and kept beside w, as the scales are kept in the
    # activation dtype: a caller who compiles with the weights as inputs passes these too, so
    # the copy is an input of its graph instead of an op traced into it and run on every call.
    layouts: dict = field(default_factory=dict, repr=False, compare=False)
    # dtype -> these weights with scales and biases in that dtype, made once (``in_dtype``);
    # other keys: arrays derived from them (``derived``)
    _as: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    # what a kernel back-end keeps per weights to launch on them without rebuilding anything
    # (kernels/cuda.py: variant, or (variant, x dtype, sorted params) -> (params, x dtype, the
    # launch as a function of x, for every M))
    kernel_memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

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

    def in_dtype(self, dtype: mx.Dtype) -> QWeights:
        """These weights with scales and biases in ``dtype``: ``self`` when they already are,
        else a copy converted the first time it is asked for and kept with these weights, so a
        kernel that reads them in the activation dtype converts once per weights, not per call.
        ``quantize`` stores them in the activation dtype from the start."""
        if self.scales.dtype == dtype and self.biases.dtype == dtype:
            return self
        return self.derived(dtype, lambda: QWeights(self.wq, self.scales.astype(dtype),
                                                    self.biases.astype(dtype), self.group_size,
                                                    self.bits, layouts=self.layouts))

    def derived(self, key, make):
        """``make()``'s array, made the first time ``key`` is asked for and kept with these
        weights (a kernel's own layout of ``wq``, say), so it is made once per weights."""
        hit = self._as.get(key)
        if hit is None:
            hit = self._as[key] = make()
        return hit

    def columns(self, start: int, stop: int) -> QWeights:
        """Output columns [start, stop): full K, so each column's reduction is untouched."""
        return QWeights(self.wq[start:stop], self.scales[start:stop], self.biases[start:stop],
                        self.group_size, self.bits, self.scales_max_abs)  # layouts: made anew
