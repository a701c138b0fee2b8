"""Greedy decoding: plain autoregressive, and DFlash2 speculative with a block of 8.

Speculative decoding must reproduce autoregressive greedy output token for token, whatever the
budget: the verify pass scores the anchor plus 7 drafted tokens in one M=8 target call, keeps
the longest drafted prefix the target agrees with plus the target's own next token, and rolls
the KV cache back to what was kept. A budget that ends inside a block cuts the tail exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx

from dflash2.model import BlockDraft, TinyTarget


@dataclass
class SpecStats:
    blocks: int = 0
    accepted: list[int] = field(default_factory=list)  # drafted tokens kept, per block

    @property
    def mean_accepted(self) -> float:
        return sum(self.accepted) / len(self.accepted) if self.accepted else 0.0


def _argmax(logits: mx.array) -> list[int]:
    return mx.argmax(logits, axis=-1).tolist()


def greedy_autoregressive(target: TinyTarget, prompt: list[int], max_new: int) -> list[int]:
    cache = target.new_cache()
    tok = _argmax(target(mx.array(prompt), cache)[-1:])[0]
    out: list[int] = []
    while len(out) < max_new:
        out.append(tok)
        if len(out) == max_new:
            break
        tok = _argmax(target(mx.array([tok]), cache)[-1:])[0]
    return out


def greedy_speculative(target: TinyTarget, draft: BlockDraft, prompt: list[int], max_new: int,
                       stats: SpecStats | None = None) -> list[int]:
    if max_new <= 0:
        return []
    block = target.cfg.block
    cache = target.new_cache()
    anchor = _argmax(target(mx.array(prompt), cache)[-1:])[0]
    out = [anchor]
    while len(out) < max_new:
        proposal = draft(target.embed(mx.array(anchor))).tolist()
        base = cache.length
        preds = _argmax(target(mx.array([anchor, *proposal]), cache))  # the M=8 verify
        k = 0
        while k < block - 1 and proposal[k] == preds[k]:
            k += 1
        cache.truncate(base + 1 + k)  # anchor + accepted drafts stay; rejected ones go
        anchor = preds[k]
        out.extend([*proposal[:k], anchor])
        if stats is not None:
            stats.blocks += 1
            stats.accepted.append(k)
    return out[:max_new]
