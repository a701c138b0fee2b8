"""Which device this process runs on, as the farm, the selector and the history see it.

The identity is read from MLX itself (never a hard-coded chip table), except that
``DFLASH2_DEVICE_ARCH`` lets a host without an Apple GPU *emulate* one architecture: kernel
selection, quantization resolution and dispatch then behave as there while the arithmetic runs
through each kernel's portable implementation. Emulation is always visible (``emulated=True``).
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass

import mlx.core as mx

from devices.errors import Dflash2Error

ENV_ARCH = "DFLASH2_DEVICE_ARCH"

# Metal architecture strings look like applegpu_g13s: generation 13..17, size letter g/s/d/p.
_APPLE_ARCH = re.compile(r"^applegpu_g(?P<gen>\d{2})(?P<size>[gsdp])$")
_CUDA_ARCH = re.compile(r"^sm_?(?P<cc>\d{2,3})[a-z]?$")

GENERATION_NAMES = {13: "M1", 14: "M2", 15: "M3", 16: "M4", 17: "M5"}


@dataclass(frozen=True)
class DeviceIdentity:
    """Plain data: crosses process and network boundaries as JSON (``to_json``)."""

    arch: str  # applegpu_g13s | cpu | sm_90
    generation: int | None  # 13..17 for Apple GPUs, None elsewhere
    size: str | None  # g/s/d/p for Apple GPUs, None elsewhere
    chip: str  # as the device reports it (emulated: "emulated applegpu_g13s on <host chip>")
    backend: str  # metal | cpu | cuda
    mlx_version: str
    emulated: bool

    @property
    def portable(self) -> bool:
        """True when kernels must run their portable MLX implementation, not native source."""
        return self.emulated or self.backend == "cpu"

    @property
    def label(self) -> str:
        return f"{self.arch} (emulated)" if self.emulated else self.arch

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> DeviceIdentity:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})


def parse_apple_arch(arch: str) -> tuple[int, str]:
    """(generation, size letter) of a Metal architecture string, or a clear error."""
    m = _APPLE_ARCH.match(arch.strip().lower())
    if not m or int(m["gen"]) not in GENERATION_NAMES:
        known = ", ".join(f"g{g}" for g in GENERATION_NAMES)
        raise Dflash2Error(
            f"bad device architecture {arch!r}: expected applegpu_g<NN><size> with generation "
            f"in {known} and size letter in g/s/d/p (e.g. applegpu_g13s)"
        )
    return int(m["gen"]), m["size"]


def emulated_identity(arch: str) -> DeviceIdentity:
    gen, size = parse_apple_arch(arch)
    host = mx.device_info().get("device_name", "cpu") if _has_device_info() else "cpu"
    return DeviceIdentity(
        arch=f"applegpu_g{gen}{size}",
        generation=gen,
        size=size,
        chip=f"emulated on {host}",
        backend="cpu",
        mlx_version=mx.__version__,
        emulated=True,
    )


def _has_device_info() -> bool:
    return hasattr(mx, "device_info")


def _device_info() -> dict:
    if _has_device_info():
        return dict(mx.device_info())
    return dict(mx.metal.device_info())  # older MLX


def native_identity() -> DeviceIdentity:
    """The device MLX runs on, read from MLX's own device info."""
    info = _device_info()
    if mx.metal.is_available():
        arch = str(info.get("architecture", "")).lower()
        gen, size = parse_apple_arch(arch)
        return DeviceIdentity(arch, gen, size, str(info.get("device_name", arch)), "metal",
                              mx.__version__, False)
    if hasattr(mx, "cuda") and mx.cuda.is_available():
        arch = str(info.get("architecture", "cuda")).lower()
        m = _CUDA_ARCH.match(arch)
        arch = f"sm_{m['cc']}" if m else arch
        return DeviceIdentity(arch, None, None, str(info.get("device_name", arch)), "cuda",
                              mx.__version__, False)
    return DeviceIdentity("cpu", None, None, str(info.get("device_name", "cpu")), "cpu",
                          mx.__version__, False)


def current_device(arch: str | None = None) -> DeviceIdentity:
    """The device this process runs on; ``arch`` or ``DFLASH2_DEVICE_ARCH`` emulates one.

    Emulation is refused on a real Apple GPU: its kernels would run portable code while the
    history labelled the results with the real chip's name.
    """
    arch = arch if arch is not None else os.environ.get(ENV_ARCH, "").strip()
    if not arch:
        return native_identity()
    native = native_identity()
    if native.backend == "metal":
        raise Dflash2Error(
            f"{ENV_ARCH}={arch} asks for emulation on a real Apple GPU ({native.arch}); "
            f"unset it to test the real device"
        )
    return emulated_identity(arch)


# ---------------------------------------------------------------------------------------------
# Device selectors: "g13s" one architecture, "g14" a generation, "cpu", "cuda", "sm90", "all".

_SEL_APPLE_EXACT = re.compile(r"^(?:applegpu_)?g(\d{2})([gsdp])$")
_SEL_APPLE_GEN = re.compile(r"^(?:applegpu_)?g(\d{2})$")
_SEL_CUDA = re.compile(r"^sm_?(\d{2,3})$")


@dataclass(frozen=True)
class Selector:
    text: str
    kind: str  # all | arch | generation | backend | cuda_arch
    value: str

    def matches(self, dev: DeviceIdentity) -> bool:
        if self.kind == "all":
            return True
        if self.kind == "arch":
            return dev.arch == self.value
        if self.kind == "generation":
            return dev.generation == int(self.value) and dev.arch.startswith("applegpu_")
        if self.kind == "backend":
            return dev.backend == self.value and not dev.emulated
        return dev.arch == self.value  # cuda_arch

    def emulation_target(self) -> str | None:
        """The architecture an embedded fleet emulates when nothing real matches this selector.

        A generation selector emulates its documented representative, the base/pro part
        (``g14`` -> ``applegpu_g14g``).
        """
        if self.kind == "arch" and self.value.startswith("applegpu_"):
            return self.value
        if self.kind == "generation":
            return f"applegpu_g{self.value}g"
        return None


def parse_selector(text: str) -> Selector:
    t = text.strip().lower()
    if t == "all":
        return Selector(text, "all", "all")
    if t in ("cpu", "cuda", "metal"):
        return Selector(text, "backend", t)
    if m := _SEL_APPLE_EXACT.match(t):
        arch = f"applegpu_g{m[1]}{m[2]}"
        parse_apple_arch(arch)
        return Selector(text, "arch", arch)
    if m := _SEL_APPLE_GEN.match(t):
        if int(m[1]) not in GENERATION_NAMES:
            raise Dflash2Error(f"unknown device selector {text!r}: no Apple GPU generation {m[1]}")
        return Selector(text, "generation", m[1])
    if m := _SEL_CUDA.match(t):
        return Selector(text, "cuda_arch", f"sm_{m[1]}")
    raise Dflash2Error(
        f"unknown device selector {text!r}: use an architecture (g13s), a generation (g14), "
        f"cpu, cuda, sm90 or all"
    )


def parse_selectors(text: str) -> list[Selector]:
    parts = [p for p in (s.strip() for s in (text or "").split(",")) if p]
    if not parts:
        raise Dflash2Error("empty device selector: name at least one device, e.g. --devices g13s")
    return [parse_selector(p) for p in parts]
