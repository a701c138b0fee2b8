"""greedy-e2e: speculative decoding (block 8) reproduces autoregressive greedy token for token on
the small seeded model, for budgets ending inside a block and on block boundaries, with the
custom verifier on and off. The first token comes from the prefill, then each block adds
1..8 tokens, so which budgets are boundaries depends on acceptance; the ids name the budget's
position against the 8-token block grid (``boundary`` for multiples of 8, else ``partial-tail``).
"""

import contextlib
import functools

import pytest

from dflash2.bundle import build_runtime
from dflash2.decode import SpecStats, greedy_autoregressive, greedy_speculative
from dflash2.model import build_pair
from dflash2.verify import custom_verifier
from kernels.recorder import reference
from suites import support

BUDGETS = [1, 3, 5, 7, 8, 9, 12, 15, 16, 17, 20, 23, 24, 25, 29, 31, 32, 33, 37, 40]
SEED = 11
PROMPT = [17, 301, 42, 42, 7, 260, 99, 3, 150, 18, 77, 5]
CASES = [(v, b) for v in ("custom", "stock") for b in BUDGETS]
IDS = [f"{v}-budget{b}-{'boundary' if b % 8 == 0 else 'partial-tail'}" for v, b in CASES]


@functools.cache
def _runtime():
    target, draft = build_pair(SEED)
    rt = build_runtime(target, draft, device=support.device())
    return rt


@functools.cache
def _reference(verifier: str) -> tuple[int, ...]:
    rt = _runtime()
    with custom_verifier(verifier == "custom"), reference():
        return tuple(greedy_autoregressive(rt.target, PROMPT, max(BUDGETS)))


@pytest.mark.parametrize("verifier,budget", CASES, ids=IDS)
def test_greedy_exact(verifier, budget, measure):
    rt = _runtime()
    expected = _reference(verifier)
    stats = SpecStats()
    # The stock cases switch the custom verifier off on purpose: their dispatches are a
    # reference, and only the custom cases' are the path under test.
    role = reference() if verifier == "stock" else contextlib.nullcontext()
    with custom_verifier(verifier == "custom"), role:
        out = greedy_speculative(rt.target, rt.draft, PROMPT, budget, stats)
    measure.record("blocks", float(stats.blocks), "blocks")
    measure.record("accepted_per_block", stats.mean_accepted, "tokens/block")
    first = next((i for i, (a, b) in enumerate(zip(out, expected, strict=False)) if a != b),
                 None)
    assert len(out) == budget
    assert out == list(expected[:budget]), f"first mismatch at token {first}"
