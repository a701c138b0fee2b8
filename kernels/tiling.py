"""What shapes each kernel variant can tile, declared once as data and checked in one place.

A kernel launched on a shape its source does not tile does not fail: it reads out of bounds or
leaves outputs unwritten (verify_m16 at K=256 with two K groups: each lane's slice of K is 4
values, and the loop steps 8). So every variant module declares, next to its source, a
``Tiling`` per back-end (``METAL_TILING``, ``CUDA_TILING``), and the three places that decide
what runs -- the selection table's loader, ``kernels.metal`` and ``kernels.cuda`` -- all ask
``check``, which raises ``TilingError`` with one line naming the variant, the shape, the dtype,
the params and every rule the shape breaks.

Rules are data: a multiple is a product of factors, each a param name (``"k_groups"``), a
derived size (``"M"``, ``"M8"``: M rounded up to a multiple of 8) or a constant, so
``k_multiple=(256, "k_groups")`` reads "K % (256 * k_groups) == 0".
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

BACKENDS = ("metal", "cuda")
LABELS = {"metal": "Metal", "cuda": "CUDA"}
SOURCE_ATTR = {"metal": "METAL_SOURCE", "cuda": "CUDA_SOURCE"}
TILING_ATTR = {"metal": "METAL_TILING", "cuda": "CUDA_TILING"}
# Per-threadgroup (per-block) memory and threads each back-end gives a kernel: Apple GPUs have
# 32 KiB of threadgroup memory; CUDA allows 48 KiB of *static* shared memory per block.
MEMORY = {"metal": (32 * 1024, "threadgroup memory"), "cuda": (48 * 1024, "static shared memory")}
MAX_THREADS = {"metal": 1024, "cuda": 1024}
HALF_AND_FLOAT = ("bfloat16", "float16", "float32")

Factor = str | int


class TilingError(ValueError):
    """A shape, dtype or param set that a variant's source cannot compute correctly."""


@dataclass(frozen=True)
class Tiling:
    """One variant's constraints on one back-end. Every field is a rule ``check`` applies."""

    rows: tuple[int, int] = (1, 16)  # M, inclusive; the per-lane accumulators are M x n_tile
    dtypes: tuple[str, ...] = HALF_AND_FLOAT  # activation dtypes the source reads correctly
    k_multiple: tuple[Factor, ...] = (256, "k_groups")  # K % product == 0
    n_multiple: tuple[Factor, ...] = ("n_tile",)  # N % product == 0 (whole output tiles)
    group_multiple: int = 8  # group_size % this == 0: a loaded word never straddles two groups
    positive: tuple[str, ...] = ("n_tile", "k_groups")  # params that must be integers >= 1
    param_choices: tuple[tuple[str, tuple[int, ...]], ...] = ()  # param -> allowed values
    param_multiples: tuple[tuple[str, int], ...] = ()  # param -> what it must be a multiple of
    threads: tuple[Factor, ...] = (32, "k_groups")  # threads per threadgroup / block
    shared_floats: tuple[Factor, ...] = ()  # float32 words of threadgroup / shared memory


def merged_params(variant: ModuleType, params: dict) -> dict:
    """The params a launch uses: the variant's defaults, the caller's, then what it fixes."""
    return {**variant.DEFAULTS, **params, **getattr(variant, "FIXED_PARAMS", {})}


def tiling_for(variant: ModuleType, backend: str) -> Tiling | None:
    """The variant's constraints on ``backend``; None where MLX's own kernel runs (any shape)."""
    if backend not in BACKENDS:
        raise TilingError(f"unknown back-end {backend!r}: expected one of {', '.join(BACKENDS)}")
    declared = getattr(variant, TILING_ATTR[backend], None)
    if getattr(variant, SOURCE_ATTR[backend], None) is None:
        if hasattr(variant, "native"):  # stock: mx.quantized_matmul, whatever the shape
            return None
        raise TilingError(f"{variant.NAME} has no {LABELS[backend]} source")
    if declared is None:
        raise TilingError(f"{variant.NAME} has a {LABELS[backend]} source but declares no "
                          f"{TILING_ATTR[backend]}")
    return declared


@dataclass(frozen=True)
class _Shape:
    m: int
    k: int
    n: int
    dtype: str
    group_size: int
    backend: str
    dims: dict  # params as ints, plus "M" and "M8"


def _product(factors: tuple[Factor, ...], dims: dict) -> tuple[int, str]:
    """The product and how to print it: ``256*k_groups=512``, ``n_tile=4`` or ``8``."""
    value = 1
    for f in factors:
        value *= dims[f] if isinstance(f, str) else f
    text = "*".join(str(f) for f in factors)
    return value, text if all(isinstance(f, int) for f in factors) else f"{text}={value}"


def _rows(t: Tiling, s: _Shape) -> str | None:
    lo, hi = t.rows
    if lo <= s.m <= hi:
        return None
    return f"M={s.m} is not {lo}" if lo == hi else f"M={s.m} is outside {lo}..{hi}"


def _dtype(t: Tiling, s: _Shape) -> str | None:
    if s.dtype in t.dtypes:
        return None
    return f"activation dtype {s.dtype} is not {' or '.join(t.dtypes)}"


def _choices(t: Tiling, s: _Shape) -> str | None:
    bad = [f"{p}={s.dims[p]} is not {' or '.join(map(str, ok))}"
           for p, ok in t.param_choices if s.dims[p] not in ok]
    return "; ".join(bad) or None


def _param_multiples(t: Tiling, s: _Shape) -> str | None:
    bad = [f"{p}={s.dims[p]} is not a multiple of {q}"
           for p, q in t.param_multiples if s.dims[p] % q]
    return "; ".join(bad) or None


def _k(t: Tiling, s: _Shape) -> str | None:
    q, text = _product(t.k_multiple, s.dims)
    return f"K={s.k} is not a multiple of {text}" if s.k % q else None


def _n(t: Tiling, s: _Shape) -> str | None:
    q, text = _product(t.n_multiple, s.dims)
    return f"N={s.n} is not a multiple of {text}" if s.n % q else None


def _group(t: Tiling, s: _Shape) -> str | None:
    bad = []
    if s.group_size % t.group_multiple:
        bad.append(f"group_size={s.group_size} is not a multiple of {t.group_multiple}")
    if s.k % s.group_size:
        bad.append(f"K={s.k} is not a multiple of group_size={s.group_size}")
    return "; ".join(bad) or None


def _threads(t: Tiling, s: _Shape) -> str | None:
    q, text = _product(t.threads, s.dims)
    limit = MAX_THREADS[s.backend]
    return f"{text} threads exceed {limit} per threadgroup" if q > limit else None


def _memory(t: Tiling, s: _Shape) -> str | None:
    if not t.shared_floats:
        return None
    q, text = _product(t.shared_floats, s.dims)
    limit, what = MEMORY[s.backend]
    if 4 * q <= limit:
        return None
    return f"{text} floats ({4 * q} B) exceed the {limit // 1024} KiB of {what}"


RULES = (_rows, _dtype, _choices, _param_multiples, _k, _n, _group, _threads, _memory)


def _dims(t: Tiling, m: int, p: dict) -> tuple[dict, list[str]]:
    """Every param a rule names, as an int, plus the derived sizes; and what is not usable."""
    names = {f for f in (*t.k_multiple, *t.n_multiple, *t.threads, *t.shared_floats)
             if isinstance(f, str)} - {"M", "M8"}
    names |= set(t.positive) | {name for name, _ in (*t.param_choices, *t.param_multiples)}
    dims, bad = {"M": m, "M8": -(-m // 8) * 8}, []
    for name in sorted(names):
        value = p.get(name)
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
            bad.append(f"param {name}={value!r} is not an integer")
            continue
        dims[name] = int(value)
        if name in t.positive and dims[name] < 1:
            bad.append(f"{name}={dims[name]} is not a positive integer")
    return dims, bad


def check(name: str, backend: str, m: int, k: int, n: int, dtype: str, group_size: int,
          params: dict) -> None:
    """Raise TilingError unless ``name``'s ``backend`` source computes this launch correctly.

    ``dtype`` is the activation dtype's name as given (before a variant such as w4a32 widens
    it); ``params`` are merged with the variant's defaults and fixed params first."""
    from kernels.variants import VARIANTS  # the variant modules import this one for Tiling

    if name not in VARIANTS:
        raise TilingError(f"unknown variant {name!r}")
    variant = VARIANTS[name]
    t = tiling_for(variant, backend)
    if t is None:
        return
    p = merged_params(variant, params)
    dims, broken = _dims(t, m, p)
    if min(m, k, n, group_size) < 1:
        broken.append("M, K, N and group_size must be positive")
    if not broken:
        shape = _Shape(m, k, n, dtype, group_size, backend, dims)
        broken = [msg for rule in RULES if (msg := rule(t, shape))]
    if broken:
        raise TilingError(f"{name} ({backend}) does not tile M={m}, K={k}, N={n}, {dtype}, "
                          f"group_size={group_size} with {p}: {'; '.join(broken)}")
