"""The verify/draft wrappers, the runtime bundle and greedy exactness on the small model."""

import os

import mlx.core as mx
import numpy as np
import pytest
from mlx import nn

from devices.identity import current_device
from dflash2.bundle import build_runtime
from dflash2.decode import SpecStats, greedy_autoregressive, greedy_speculative
from dflash2.model import build_pair
from dflash2.verify import (
    DraftQuantizedLinear,
    VerifyQuantizedLinear,
    custom_verifier,
    custom_verifier_enabled,
)
from kernels.dispatch import run_variant
from kernels.recorder import recording

G13 = current_device("applegpu_g13s")


def _layer(k=256, n=512, dtype=mx.bfloat16):
    lin = nn.Linear(k, n, bias=False)
    q = nn.QuantizedLinear.from_linear(lin, group_size=64, bits=4)
    q.set_dtype(dtype)
    return q


def _x(m, k=256, dtype=mx.bfloat16):
    return mx.random.normal((m, k)).astype(dtype)


def test_verify_wrapper_dispatches_tuned_m8_and_stock_elsewhere():
    q = _layer()
    v = VerifyQuantizedLinear(q, "tiny_up", G13)
    with recording() as sels:
        v(_x(8)), v(_x(1)), v(_x(8, dtype=mx.float32))
    got = [(s.M, s.dtype, s.variant, s.reason) for s in sels]
    assert got == [(8, "bfloat16", "scalar_kmajor", "tuned"),
                   (1, "bfloat16", "stock", "fallback:shape"),
                   (8, "float32", "stock", "fallback:dtype")]


def test_verify_wrapper_is_bit_exact_with_raw_dispatch_and_off_equals_stock():
    q = _layer()
    v = VerifyQuantizedLinear(q, "tiny_up", G13)
    x = _x(8)
    raw = run_variant("scalar_kmajor", x, v.qw, {"n_tile": 8}, G13)
    assert mx.array_equal(v(x[None]).reshape(8, -1), raw).item()  # (1, 8, K) batch shape too
    with custom_verifier(False):
        assert not custom_verifier_enabled()
        with recording() as sels:
            off = v(x)
        assert sels[0].reason == "fallback:disabled"
    assert custom_verifier_enabled()
    assert mx.array_equal(off, run_variant("stock", x, v.qw, {}, G13)).item()


def test_env_switch_turns_the_verifier_off(monkeypatch):
    monkeypatch.setenv("DFLASH2_CUSTOM_VERIFIER", "0")
    assert not custom_verifier_enabled()
    with custom_verifier(True):
        assert custom_verifier_enabled()


@pytest.mark.parametrize("rows", [1, 7])
def test_draft_padding_never_changes_real_rows(rows):
    q = _layer(256, 256)
    d = DraftQuantizedLinear(q, "draft.fc", G13, mx.float32)
    x = _x(8)
    with recording() as sels:
        part = d(x[:rows])
    assert part.shape == (rows, 256)
    assert (sels[0].M, sels[0].variant) == (8, "w4a32")
    full = d(x)  # the same rows inside a full block, other rows arbitrary
    assert mx.array_equal(part, full[:rows]).item()


def test_bundle_reports_effective_config():
    target, draft = build_pair(3)
    rt = build_runtime(target, draft, device=G13)
    cfg = rt.config
    assert cfg["draft_quant"]["effective"] == "w4a32:gs64"
    assert "vocab" in cfg["verify_modules"]
    warmed = {w["op"]: w["variant"] for w in cfg["prewarmed"]}
    assert warmed["layers.0.mlp.gate_proj"] == "scalar_kmajor"
    assert warmed["draft.head"] == "w4a32"
    import json

    json.dumps(cfg)
    g15 = build_runtime(*build_pair(3), device=current_device("applegpu_g15s"))
    assert g15.config["draft_quant"]["effective"] == "w4a16:gs64"
    assert {w["variant"] for w in g15.config["prewarmed"]} == {"stock"}


BUDGETS = [1, 2, 3, 7, 8, 9, 10, 15, 16, 17, 21, 24, 25, 31, 32, 33, 40, 47, 48, 55, 64]


@pytest.fixture(scope="module")
def g13_runtime():
    seed = int.from_bytes(os.urandom(2), "little")
    target, draft = build_pair(seed)
    build_runtime(target, draft, device=G13)
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, target.cfg.vocab, 12).tolist()
    return target, draft, prompt, seed


@pytest.mark.parametrize("verifier", [True, False], ids=["custom", "stock"])
def test_speculative_equals_autoregressive(g13_runtime, verifier):
    target, draft, prompt, seed = g13_runtime
    with custom_verifier(verifier):
        reference = greedy_autoregressive(target, prompt, max(BUDGETS))
        stats = SpecStats()
        with recording() as sels:
            for budget in BUDGETS:
                out = greedy_speculative(target, draft, prompt, budget, stats)
                assert out == reference[:budget], f"budget={budget} seed={seed}"
    verify = {s.variant for s in sels if s.M == 8 and s.op.startswith("layers.")}
    assert verify == ({"scalar_kmajor"} if verifier else {"stock"})
    # The draft is right often but not always: blocks end at several acceptance lengths.
    assert len(set(stats.accepted)) >= 3, stats.accepted
