"""A small DFlash2 model pair built from a seed: a 4-bit target transformer and a block draft.

No downloads: the weights are drawn so that greedy decoding is structured, not noise. The target
mostly continues ``t -> t + 1`` (its LM head is the embedding shifted by one), with two
transformer layers adding context-dependent evidence, so its greedy path depends on the whole
prefix (a wrong KV cache shows). The draft shares the target's embedding and, from one anchor,
proposes the next 7 tokens in one pass through per-position shifted heads blurred with noise:
it is right often, not always, so blocks accept every length from 0 to 7.

Shapes (D=256, MLP 768, vocab 512, draft head 7 x 512) are listed in the selection table as
``tiny_*`` so end-to-end checks exercise the tuned verify kernels, not only the fallback.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import mlx.core as mx
from mlx import nn


@dataclass(frozen=True)
class TinyConfig:
    vocab: int = 512
    dim: int = 256
    heads: int = 4
    mlp: int = 768
    layers: int = 2
    block: int = 8  # anchor + 7 drafted tokens
    layer_scale: float = 2.8  # how much the layers bend the t -> t+1 path
    logit_scale: float = 2.0
    draft_noise: float = 0.3
    group_size: int = 64
    bits: int = 4

    def to_json(self) -> dict:
        return asdict(self)


class KVCache:
    """Keys and values per layer; ``truncate`` drops rejected draft positions after a verify."""

    def __init__(self, layers: int):
        self.k: list[mx.array | None] = [None] * layers
        self.v: list[mx.array | None] = [None] * layers

    @property
    def length(self) -> int:
        return self.length_of(0)

    def length_of(self, layer: int) -> int:
        """Positions one layer holds: read before that layer appends, so a later layer's
        positions are not shifted by the rows earlier layers already added in this call."""
        return 0 if self.k[layer] is None else self.k[layer].shape[2]

    def append(self, layer: int, k: mx.array, v: mx.array) -> tuple[mx.array, mx.array]:
        if self.k[layer] is not None:
            k = mx.concatenate([self.k[layer], k], axis=2)
            v = mx.concatenate([self.v[layer], v], axis=2)
        self.k[layer], self.v[layer] = k, v
        return k, v

    def truncate(self, length: int) -> None:
        for i in range(len(self.k)):
            if self.k[i] is not None:
                self.k[i] = self.k[i][:, :, :length]
                self.v[i] = self.v[i][:, :, :length]


class Attention(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        d = cfg.dim
        self.heads = cfg.heads
        self.q_proj = nn.Linear(d, d, bias=False)
        self.k_proj = nn.Linear(d, d, bias=False)
        self.v_proj = nn.Linear(d, d, bias=False)
        self.o_proj = nn.Linear(d, d, bias=False)
        self.rope = nn.RoPE(d // cfg.heads)

    def __call__(self, x: mx.array, cache: KVCache, layer: int) -> mx.array:
        t, d = x.shape
        hd = d // self.heads
        offset = cache.length_of(layer)

        def heads(a: mx.array) -> mx.array:
            return a.reshape(1, t, self.heads, hd).transpose(0, 2, 1, 3)

        q = self.rope(heads(self.q_proj(x)), offset=offset)
        k = self.rope(heads(self.k_proj(x)), offset=offset)
        k, v = cache.append(layer, k, heads(self.v_proj(x)))
        total = k.shape[2]
        # Causal within the new rows; every cached row is visible.
        qi = mx.arange(offset, offset + t)[:, None]
        kj = mx.arange(total)[None, :]
        mask = mx.where(kj <= qi, 0.0, -1e9).astype(x.dtype)
        o = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(hd), mask=mask)
        return self.o_proj(o.transpose(0, 2, 1, 3).reshape(t, d))


class MLP(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.mlp, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.mlp, bias=False)
        self.down_proj = nn.Linear(cfg.mlp, cfg.dim, bias=False)

    def __call__(self, x: mx.array) -> mx.array:
        return self.down_proj(nn.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.attn_norm = nn.RMSNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.mlp_norm = nn.RMSNorm(cfg.dim)
        self.mlp = MLP(cfg)

    def __call__(self, x: mx.array, cache: KVCache, layer: int) -> mx.array:
        x = x + self.attn(self.attn_norm(x), cache, layer)
        return x + self.mlp(self.mlp_norm(x))


class TinyTarget(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.layers = [Block(cfg) for _ in range(cfg.layers)]
        self.norm = nn.RMSNorm(cfg.dim)
        self.lm_head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def new_cache(self) -> KVCache:
        return KVCache(self.cfg.layers)

    def __call__(self, tokens: mx.array, cache: KVCache) -> mx.array:
        """float32 logits (T, vocab) for the new ``tokens`` appended after ``cache``."""
        x = self.embed(tokens)
        for i, layer in enumerate(self.layers):
            x = layer(x, cache, i)
        return self.lm_head(self.norm(x)).astype(mx.float32)


class BlockDraft(nn.Module):
    """Proposes ``block - 1`` tokens after an anchor in one pass."""

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        self.cfg = cfg
        self.positions = mx.zeros((cfg.block - 1, cfg.dim))
        self.anchor_proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.fc = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.head = nn.Linear(cfg.dim, (cfg.block - 1) * cfg.vocab, bias=False)

    def __call__(self, anchor_embedding: mx.array) -> mx.array:
        """Tokens (block - 1,) proposed after the anchor (given as its (dim,) embedding)."""
        n, v = self.cfg.block - 1, self.cfg.vocab
        a = self.anchor_proj(anchor_embedding[None, :])  # the 1-row anchor
        h = a + self.positions  # the 7-row draft
        h = h + self.fc(h)
        logits = self.head(h).reshape(n, n, v)  # row i, head block j
        own = logits[mx.arange(n), mx.arange(n)]  # row i reads its own head block i
        return mx.argmax(own.astype(mx.float32), axis=-1)


def _normal(key: mx.array, shape: tuple[int, ...], std: float) -> mx.array:
    return mx.random.normal(shape, key=key) * std


def build_pair(seed: int = 0, cfg: TinyConfig | None = None,
               dtype: mx.Dtype = mx.bfloat16) -> tuple[TinyTarget, BlockDraft]:
    """The seeded target and draft, quantized to 4 bits, in ``dtype`` (scales included)."""
    cfg = cfg or TinyConfig()
    keys = iter(mx.random.split(mx.random.key(seed), 64))
    v, d = cfg.vocab, cfg.dim
    emb = _normal(next(keys), (v, d), 1.0)
    emb = emb / mx.linalg.norm(emb, axis=-1, keepdims=True) * math.sqrt(d)

    target = TinyTarget(cfg)
    target.embed.weight = emb
    # LM head row j is the embedding of j - 1: a hidden state near E[t] votes for t + 1.
    target.lm_head.weight = mx.roll(emb, 1, axis=0) * (cfg.logit_scale / math.sqrt(d))
    for blk in target.layers:
        for lin in (blk.attn.q_proj, blk.attn.k_proj, blk.attn.v_proj, blk.attn.o_proj,
                    blk.mlp.gate_proj, blk.mlp.up_proj, blk.mlp.down_proj):
            fan_in = lin.weight.shape[1]
            lin.weight = _normal(next(keys), lin.weight.shape, 1.0 / math.sqrt(fan_in))
        blk.attn.o_proj.weight = blk.attn.o_proj.weight * cfg.layer_scale
        blk.mlp.down_proj.weight = blk.mlp.down_proj.weight * cfg.layer_scale

    draft = BlockDraft(cfg)
    n = cfg.block - 1
    draft.positions = _normal(next(keys), (n, d), 0.05)
    draft.anchor_proj.weight = mx.eye(d) + _normal(next(keys), (d, d), 0.02 / math.sqrt(d))
    draft.fc.weight = _normal(next(keys), (d, d), 0.02 / math.sqrt(d))
    heads = [mx.roll(emb, i + 1, axis=0) / math.sqrt(d) for i in range(n)]
    noise = _normal(next(keys), (n * v, d), cfg.draft_noise)
    draft.head.weight = mx.concatenate(heads, axis=0) + noise

    for model in (target, draft):
        nn.quantize(model, group_size=cfg.group_size, bits=cfg.bits,
                    class_predicate=lambda _, m: isinstance(m, nn.Linear))
        model.set_dtype(dtype)
        mx.eval(model.parameters())
    return target, draft
