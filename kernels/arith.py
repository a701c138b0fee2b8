"""The arithmetic the portable kernel implementations share: dequantization and split-K reductions.

A portable implementation reproduces its Metal kernel's *arithmetic contract*, not its memory
traffic: which dtype each operand is rounded to, which dtype accumulates, and how K is split
into partial sums and in what order those partials are combined. Within one partial the order is
left to MLX's float32 matmul (BLAS); the split structure is what makes two kernels round
differently, and it is modelled exactly here.

Layouts of K over the 32 lanes of a SIMD group:

- ``interleaved``: lane ``l`` owns the 8 consecutive values ``[256*c + 8*l, 256*c + 8*l + 8)``
  of every 256-wide block ``c`` (one packed uint32 word per lane per block): MLX's qmv order.
- ``contiguous``: lane ``l`` owns the contiguous range ``[l*K/32, (l+1)*K/32)`` (K-major loads).
- ``sequential``: one accumulator walks all of K (matrix-unit tiles accumulated along K).

Lane partials are combined by a butterfly (``simd_sum``): halves added pairwise, 16 then 8 ...
then 1. ``k_groups`` > 1 splits K into contiguous groups first (one SIMD group each), and their
sums are added in group order through threadgroup memory.
"""

from __future__ import annotations

from collections import OrderedDict

import mlx.core as mx
import numpy as np

LANES = 32
WORD = 8  # 4-bit values per packed uint32 word
BLOCK = LANES * WORD

_CACHE_LIMIT = 64
_cache: OrderedDict[tuple, tuple[mx.array, mx.array]] = OrderedDict()


def _cached(key: tuple, owner: mx.array, build) -> mx.array:
    """LRU cache keyed by the owner array's identity; the owner is held so its id stays unique."""
    hit = _cache.get(key)
    if hit is not None and hit[0] is owner:
        _cache.move_to_end(key)
        return hit[1]
    value = build()
    mx.eval(value)
    _cache[key] = (owner, value)
    while len(_cache) > _CACHE_LIMIT:
        _cache.popitem(last=False)
    return value


def dequantize_f32(wq: mx.array, scales: mx.array, biases: mx.array, group_size: int,
                   bits: int) -> mx.array:
    """(N, K) float32 weights exactly as a Metal kernel sees them: scale * q + bias in float32.

    Scales and biases keep the dtype they were stored in (bf16 for a bf16 model): converting
    them to float32 is exact, so this is the dequantized weight every contract starts from.
    Cached per packed-weight array, since dequantizing a gate/up matrix costs ~0.9 s on a CPU.
    """
    key = ("deq", id(wq), group_size, bits)
    return _cached(key, wq, lambda: mx.dequantize(
        wq, scales.astype(mx.float32), biases.astype(mx.float32),
        group_size=group_size, bits=bits).astype(mx.float32))


def dequantize_fused(wq: mx.array, scales: mx.array, biases: mx.array, group_size: int,
                     bits: int, dtype: mx.Dtype) -> mx.array:
    """(N, K) float32 holding ``round_dtype(scale * q + bias)`` with one rounding: a fused FMA in
    the activation dtype, as ``__hfma2`` dequantizes.

    ``dequantize_f32`` rounds twice (to float32, then to ``dtype``), which can differ from one
    rounding by an ulp when the float32 sum lands on a ``dtype`` midpoint. Here the sum is formed
    in float64 (exact while scale * q and bias lie within 38 binades: 15 + 11 significant bits
    in 53), rounded to float32 towards odd, then to ``dtype`` to nearest even: round-to-odd with
    at least two spare bits makes the double rounding exact. Cached like ``dequantize_f32``.
    """

    def build() -> mx.array:
        q = np.array(wq).astype(np.uint32)
        n = q.shape[0]
        shifts = np.arange(0, 32, bits, dtype=np.uint32)
        nib = ((q[:, :, None] >> shifts) & np.uint32((1 << bits) - 1)).reshape(n, -1)
        sc = np.repeat(np.array(scales.astype(mx.float32), np.float64), group_size, axis=1)
        bi = np.repeat(np.array(biases.astype(mx.float32), np.float64), group_size, axis=1)
        exact = sc * nib + bi
        f = exact.astype(np.float32)
        back = f.astype(np.float64)
        toward_zero = np.abs(back) > np.abs(exact)
        f = np.where(toward_zero, np.nextafter(f, np.float32(0)), f)
        fb = f.view(np.uint32) | (back != exact).astype(np.uint32)  # round to odd
        return mx.array(fb.view(np.float32)).astype(dtype).astype(mx.float32)

    return _cached(("fused", id(wq), group_size, bits, str(dtype)), wq, build)


def _pad_k(a: mx.array, multiple: int) -> mx.array:
    k = a.shape[-1]
    pad = (-k) % multiple
    if pad == 0:
        return a
    # Zero padding adds exact zeros to every partial: the sums are unchanged.
    return mx.concatenate([a, mx.zeros((*a.shape[:-1], pad), dtype=a.dtype)], axis=-1)


def _lanes_view(a: mx.array, layout: str) -> mx.array:
    """(rows, K) -> (32, rows, K/32): the K values each lane owns, in the lane's own order."""
    rows, k = a.shape
    if layout == "interleaved":
        return a.reshape(rows, k // BLOCK, LANES, WORD).transpose(2, 0, 1, 3).reshape(
            LANES, rows, k // LANES)
    if layout == "contiguous":
        return a.reshape(rows, LANES, k // LANES).transpose(1, 0, 2)
    if layout == "sequential":
        return a[None]
    raise ValueError(f"unknown K layout {layout!r}")


def butterfly_sum(partials: mx.array) -> mx.array:
    """Sum over axis 0 the way simd_sum pairs lanes: halves added, then halves of halves."""
    p = partials
    while p.shape[0] > 1:
        half = p.shape[0] // 2
        p = p[:half] + p[half:]
    return p[0]


def prepared_weights(w32: mx.array, owner: mx.array, layout: str, k_groups: int,
                     tag: str = "") -> mx.array:
    """Per-group lane views of the weights, transposed for a batched matmul; cached.

    ``tag`` names any rounding applied to ``w32`` so differently rounded copies of one
    packed weight are cached apart.
    """

    def build() -> mx.array:
        w = _pad_k(w32, BLOCK * k_groups)
        _n, k = w.shape
        kg = k // k_groups
        views = [_lanes_view(w[:, g * kg:(g + 1) * kg], layout).transpose(0, 2, 1)
                 for g in range(k_groups)]
        return mx.stack(views)  # (groups, 32, K/(32*groups), N)

    return _cached(("lanes", id(owner), w32.shape, layout, k_groups, tag), owner, build)


def split_k_matmul(x32: mx.array, wprep: mx.array, layout: str, k_groups: int) -> mx.array:
    """float32 (M, N) = x32 @ W^T with the contract's split of K (see the module docstring)."""
    x = _pad_k(x32, BLOCK * k_groups)
    _m, k = x.shape
    kg = k // k_groups
    total = None
    for g in range(k_groups):
        xl = _lanes_view(x[:, g * kg:(g + 1) * kg], layout)  # (32, M, kl)
        part = butterfly_sum(xl @ wprep[g])  # (M, N)
        total = part if total is None else total + part
    return total


def round_through(a: mx.array, dtype: mx.Dtype) -> mx.array:
    """Round float32 values to ``dtype`` and back: models an operand stored in that dtype."""
    return a.astype(dtype).astype(mx.float32)
