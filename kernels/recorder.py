"""Observing kernel dispatch: every selection made while a recorder is active is appended to it.

Suites store what they observe (the history flags kernel-selection regressions from it), so the
recorder is the one place dispatch reports to. A contextvar keeps concurrent recorders apart.

A selection also names the implementation that executed (``impl``): the same variant run as its
Metal source, its emulated Metal source or its portable MLX form gives different numbers and
timings, so the history only compares a selection with one that ran the same implementation.
The names are defined here once; the history validates results files against them.

A selection also carries its ``role``: the path a test checks (``under_test``) or a computation
the test compares against (``reference``, made inside `reference`). A test that checks "verify
off equals stock" dispatches to stock on purpose; only the path under test may raise a
kernel-selection regression, or a deliberate stock call would hide a real fallback.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from dataclasses import asdict, dataclass

IMPL_METAL = "metal"  # a real Apple GPU ran the variant's Metal source
IMPL_METAL_EMULATED = "metal-emulated"  # the Metal source compiled for the CPU, SIMT executor
IMPL_PORTABLE = "portable"  # the variant's portable MLX implementation
IMPL_CUDA = "cuda"  # the variant's CUDA source on an NVIDIA GPU
IMPL_STOCK_NATIVE = "stock-native"  # MLX's own mx.quantized_matmul on the device's backend
IMPLEMENTATIONS = (IMPL_METAL, IMPL_METAL_EMULATED, IMPL_PORTABLE, IMPL_CUDA, IMPL_STOCK_NATIVE)

ROLE_UNDER_TEST = "under_test"
ROLE_REFERENCE = "reference"
ROLES = (ROLE_UNDER_TEST, ROLE_REFERENCE)


@dataclass(frozen=True)
class Selection:
    op: str  # projection name, e.g. gate_up, down, out, vocab, draft_fc
    dtype: str  # activation dtype: bfloat16 | float16 | float32
    M: int
    K: int
    N: int
    variant: str  # stock | scalar_kmajor | narrow_output | fp16_matrix | verify_m4 | ...
    reason: str  # tuned | fallback:unsupported-device | fallback:shape | fallback:dtype | ...
    # One of IMPLEMENTATIONS; "" only from a dispatcher that does not say (written as null).
    impl: str = ""
    role: str = ROLE_UNDER_TEST  # set by `report` from the enclosing `reference` block

    def __post_init__(self) -> None:
        # A misspelt name would otherwise travel to the history and be refused there, far
        # from the dispatch that made it.
        if self.impl and self.impl not in IMPLEMENTATIONS:
            raise ValueError(f"Selection.impl {self.impl!r} is not one of "
                             f"{', '.join(IMPLEMENTATIONS)}")
        if self.role not in ROLES:
            raise ValueError(f"Selection.role {self.role!r} is not one of {', '.join(ROLES)}")

    def to_json(self) -> dict:
        """Plain data for the results stream; an unreported implementation is ``null``."""
        d = asdict(self)
        d["impl"] = self.impl or None
        return d


_active: contextvars.ContextVar[list[Selection] | None] = contextvars.ContextVar(
    "kernel_recorder", default=None
)
_role: contextvars.ContextVar[str] = contextvars.ContextVar("kernel_role",
                                                           default=ROLE_UNDER_TEST)


@contextlib.contextmanager
def reference() -> Iterator[None]:
    """Selections made inside are reference computations of the test, not its path under test
    (for example the stock output a custom kernel is compared with)."""
    token = _role.set(ROLE_REFERENCE)
    try:
        yield
    finally:
        _role.reset(token)


@contextlib.contextmanager
def recording() -> Iterator[list[Selection]]:
    """Collect selections made inside the block (nested recorders each see their own)."""
    sink: list[Selection] = []
    token = _active.set(sink)
    try:
        yield sink
    finally:
        _active.reset(token)


def report(selection: Selection) -> None:
    sink = _active.get()
    if sink is None:
        return
    if _role.get() != selection.role:
        selection = dataclasses.replace(selection, role=_role.get())
    if selection not in sink:
        sink.append(selection)
