"""Quantization specs (``w4a16:gs64``) and the per-generation resolution of draft specs.

On affected G13 GPUs a W4A16 draft produces non-finite logits, so the runtime runs W4A32 there
and says so. The affected generations are a data list, not a branch in the code.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

import mlx.core as mx

from devices.errors import Dflash2Error
from devices.identity import DeviceIdentity

# Generations whose W4A16 draft gives non-finite logits (field reports: M1 family).
W4A16_NONFINITE_GENERATIONS: tuple[int, ...] = (13,)

_SPEC = re.compile(r"^w(?P<bits>2|4|8)(?:a(?P<act>16|32))?(?::gs(?P<gs>32|64|128))?$")


@dataclass(frozen=True)
class QuantSpec:
    bits: int = 4
    act_bits: int = 16
    group_size: int = 64

    def __str__(self) -> str:
        return f"w{self.bits}a{self.act_bits}:gs{self.group_size}"

    def activation_dtype(self, half: mx.Dtype = mx.bfloat16) -> mx.Dtype:
        return mx.float32 if self.act_bits == 32 else half

    def to_json(self) -> dict:
        return {**asdict(self), "spec": str(self)}


def parse_quant_spec(text: str) -> QuantSpec:
    m = _SPEC.match(text.strip().lower())
    if not m:
        raise Dflash2Error(
            f"bad quantization spec {text!r}: expected w{{2,4,8}}[a{{16,32}}][:gs{{32,64,128}}], "
            f"e.g. w4a16:gs64"
        )
    return QuantSpec(int(m["bits"]), int(m["act"] or 16), int(m["gs"] or 64))


@dataclass(frozen=True)
class Resolved:
    requested: QuantSpec
    effective: QuantSpec
    reason: str

    def to_json(self) -> dict:
        return {"requested": str(self.requested), "effective": str(self.effective),
                "activation_dtype": "float32" if self.effective.act_bits == 32 else "bfloat16",
                "reason": self.reason}


def resolve_draft_spec(spec: QuantSpec | str, device: DeviceIdentity) -> Resolved:
    spec = parse_quant_spec(spec) if isinstance(spec, str) else spec
    if (spec.bits == 4 and spec.act_bits == 16
            and device.generation in W4A16_NONFINITE_GENERATIONS):
        eff = QuantSpec(spec.bits, 32, spec.group_size)
        return Resolved(spec, eff, f"w4a16 draft gives non-finite logits on g{device.generation}")
    return Resolved(spec, spec, "as requested")
