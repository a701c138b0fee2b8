"""The runtime bundle: a target and draft made ready to decode on this device.

Building it installs the verify wrappers on every target projection (the LM head becomes the
vocabulary wrapper), resolves the draft's quantization for the device, wraps the draft's
projections on the padded M=8 path, prewarms each selected kernel, and returns a JSON-able
effective configuration, so a run's report says what actually executed.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlx import nn
from mlx.utils import tree_map_with_path

from devices.identity import DeviceIdentity, current_device
from dflash2.model import BlockDraft, TinyTarget
from dflash2.quant import QuantSpec, parse_quant_spec, resolve_draft_spec
from dflash2.verify import (
    DraftQuantizedLinear,
    VerifyQuantizedLinear,
    custom_verifier_enabled,
)
from kernels.dispatch import dtype_name
from kernels.prewarm import prewarm


@dataclass
class Runtime:
    target: TinyTarget
    draft: BlockDraft
    device: DeviceIdentity
    config: dict


def _wrap(model: nn.Module, make) -> list[nn.Module]:
    wrapped: list[nn.Module] = []

    def swap(path: str, m):
        if isinstance(m, nn.QuantizedLinear):
            w = make(path, m)
            wrapped.append(w)
            return w
        return m

    leaves = tree_map_with_path(swap, model.leaf_modules(), is_leaf=nn.Module.is_module)
    model.update_modules(leaves)
    return wrapped


def _check_spec(draft: BlockDraft, spec: QuantSpec) -> None:
    cfg = draft.cfg
    if (cfg.bits, cfg.group_size) != (spec.bits, spec.group_size):
        from devices.errors import Dflash2Error

        raise Dflash2Error(
            f"draft spec {spec} does not match the draft's weights "
            f"(w{cfg.bits}:gs{cfg.group_size}); quantize the draft with that spec"
        )


def build_runtime(target: TinyTarget, draft: BlockDraft, *, draft_quant: str = "w4a16",
                  device: DeviceIdentity | None = None, warm: bool = True) -> Runtime:
    device = device or current_device()
    spec = parse_quant_spec(draft_quant)
    _check_spec(draft, spec)
    resolved = resolve_draft_spec(spec, device)
    act = resolved.effective.activation_dtype(target.embed.weight.dtype)

    def verify(path: str, m: nn.QuantizedLinear) -> VerifyQuantizedLinear:
        return VerifyQuantizedLinear(m, "vocab" if path == "lm_head" else path, device)

    def drafted(path: str, m: nn.QuantizedLinear) -> DraftQuantizedLinear:
        return DraftQuantizedLinear(m, f"draft.{path}", device, act)

    targets = _wrap(target, verify)
    drafts = _wrap(draft, drafted)
    half = target.embed.weight.dtype
    block = target.cfg.block
    items = [(w.op, w.qw, half, block) for w in targets]
    items += [(w.op, w.qw, act, block) for w in drafts]
    warmed = prewarm(items, device, disabled=not custom_verifier_enabled()) if warm else []
    config = {
        "device": device.to_json(),
        "model": target.cfg.to_json(),
        "target_dtype": dtype_name(half),
        "draft_quant": resolved.to_json(),
        "custom_verifier": custom_verifier_enabled(),
        "verify_modules": [w.op for w in targets],
        "draft_modules": [w.op for w in drafts],
        "prewarmed": [w.to_json() for w in warmed],
    }
    return Runtime(target, draft, device, config)

