"""Observing kernel dispatch: every selection made while a recorder is active is appended to it.

Suites store what they observe (the history flags kernel-selection regressions from it), so the
recorder is the one place dispatch reports to. A contextvar keeps concurrent recorders apart.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Selection:
    op: str  # projection name, e.g. gate_up, down, out, vocab, draft_fc
    dtype: str  # activation dtype: bfloat16 | float16 | float32
    M: int
    K: int
    N: int
    variant: str  # stock | scalar_kmajor | narrow_output | fp16_matrix | verify_m4 | ...
    reason: str  # tuned | fallback:unsupported-device | fallback:shape | fallback:dtype | ...

    def to_json(self) -> dict:
        return asdict(self)


_active: contextvars.ContextVar[list[Selection] | None] = contextvars.ContextVar(
    "kernel_recorder", default=None
)


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
    if sink is not None and selection not in sink:
        sink.append(selection)
