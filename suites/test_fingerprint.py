"""fingerprint: each kernel this device selects, on seeded inputs: three calls bit-identical, and
the sha256 of the float32 output bytes per (kernel, shape, dtype) against per-arch goldens.

Goldens live in ``fingerprints.json`` under the device's golden key (``applegpu_g13s`` for a real
M1 Max, ``applegpu_g13s/emulated on <host chip>`` for its emulation, ``cpu/<chip>`` for a plain
CPU host). A missing golden is recorded (``golden_missing`` = 1), not failed. Regenerate for this device:

    FARM_UPDATE_GOLDENS=1 pytest suites/test_fingerprint.py [--device-arch ARCH]
"""

import json
import os

import mlx.core as mx
import pytest

from suites import support
from suites.support import HERE

GOLDENS = HERE / "fingerprints.json"
CASES = [(op, dt, 8) for op in support.TARGET_OPS for dt in ("bfloat16", "float16")]
CASES += [(op, dt, m) for m in (4, 16) for op in ("gate_up", "down", "out")
          for dt in ("bfloat16", "float16")]
CASES += [(op, "float32", 8) for op in support.DRAFT_OPS]
IDS = [f"m{m}-{op}-{dt}" for op, dt, m in CASES]


def golden_key(dev) -> str:
    """A real GPU's digests are its architecture's; CPU arithmetic (plain or emulated) also
    depends on the host's float32 matmul, so the host chip is part of the key."""
    if dev.emulated or dev.backend == "cpu":
        return f"{dev.arch}/{dev.chip}"
    return dev.arch


def _load() -> dict:
    return json.loads(GOLDENS.read_text()) if GOLDENS.exists() else {}


@pytest.mark.parametrize("op,dtype,m", CASES, ids=IDS)
def test_fingerprint(op, dtype, m, measure):
    dev = support.device()
    c = support.case(op, dtype, seed=7)
    outs = [support.verify_path(c, m) for _ in range(3)]
    mx.eval(outs)
    for i in (1, 2):
        assert mx.array_equal(outs[0], outs[i]).item(), f"call {i + 1} differs from call 1"
    (sel,) = measure.selections
    key = f"{sel.variant}/{c.k}x{c.n}/{dtype}/m{m}/cols{c.qw.n}"
    digest = measure.fingerprint(key, outs[0])
    gk = golden_key(dev)
    if os.environ.get("FARM_UPDATE_GOLDENS") == "1":
        data = _load()
        data.setdefault(gk, {})[key] = digest
        GOLDENS.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    golden = _load().get(gk, {}).get(key)
    measure.record("golden_missing", float(golden is None), "flag")
    if golden is not None:
        assert digest == golden, f"{key} on {gk}: sha256 {digest[:16]} != golden {golden[:16]}"
