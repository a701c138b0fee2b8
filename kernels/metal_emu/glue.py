"""The entry point the executor calls once per thread: MLX's kernel with its buffers and
thread-position attributes, read off the signature MLX generated (never written by hand)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_KERNEL = re.compile(r"\[\[kernel\]\] void (?P<name>\w+)\(\n(?P<params>.*?)\) \{\n", re.DOTALL)
_PARAM = re.compile(
    r"^\s*(?P<type>.+?)\s*(?P<name>\w+) \[\[(?P<attr>\w+)(?:\((?P<index>\d+)\))?\]\]$")
_INSTANCE = re.compile(r"decltype\((?P<callee>\w+<.*?>)\) (?P=callee);")

# Attribute -> the expression of the lane-info struct it reads (see shim/metal_emu_hooks.h).
_ATTRIBUTES = {
    "thread_position_in_grid": "__emu_u3(__l->thread_position_in_grid)",
    "thread_position_in_threadgroup": "__emu_u3(__l->thread_position_in_threadgroup)",
    "threadgroup_position_in_grid": "__emu_u3(__l->threadgroup_position_in_grid)",
    "threads_per_grid": "__emu_u3(__l->threads_per_grid)",
    "grid_size": "__emu_u3(__l->threads_per_grid)",
    "grid_origin": "__emu_u3(__emu_zero)",
    "threads_per_threadgroup": "__emu_u3(__l->threads_per_threadgroup)",
    "dispatch_threads_per_threadgroup": "__emu_u3(__l->threads_per_threadgroup)",
    "threadgroups_per_grid": "__emu_u3(__l->threadgroups_per_grid)",
    "thread_index_in_threadgroup": "__l->thread_index_in_threadgroup",
    "thread_index_in_simdgroup": "__l->thread_index_in_simdgroup",
    "simdgroup_index_in_threadgroup": "__l->simdgroup_index_in_threadgroup",
    "simdgroups_per_threadgroup": "__l->simdgroups_per_threadgroup",
    "dispatch_simdgroups_per_threadgroup": "__l->simdgroups_per_threadgroup",
    "threads_per_simdgroup": "__l->threads_per_simdgroup",
    "thread_execution_width": "__l->threads_per_simdgroup",
    "thread_index_in_quadgroup": "__l->thread_index_in_quadgroup",
    "quadgroup_index_in_threadgroup": "__l->quadgroup_index_in_threadgroup",
    "quadgroups_per_threadgroup": "__l->quadgroups_per_threadgroup",
    "dispatch_quadgroups_per_threadgroup": "__l->quadgroups_per_threadgroup",
}


@dataclass(frozen=True)
class Param:
    type: str
    name: str
    buffer: int | None  # buffer index, or None for a thread-position attribute
    attribute: str


@dataclass(frozen=True)
class Signature:
    kernel: str  # the function name MLX generated
    callee: str  # the instantiation to call (name<args>), or the name itself
    params: tuple[Param, ...]

    @property
    def buffers(self) -> list[Param]:
        return sorted((p for p in self.params if p.buffer is not None), key=lambda p: p.buffer)


def parse(generated: str) -> Signature:
    m = _KERNEL.search(generated)
    if m is None:
        raise ValueError("no [[kernel]] function in the generated source")
    params = []
    for line in m["params"].split(",\n"):
        p = _PARAM.match(line)
        if p is None:
            raise ValueError(f"unrecognised kernel parameter {line.strip()!r}")
        buf = p["attr"] == "buffer"
        if not buf and p["attr"] not in _ATTRIBUTES:
            raise ValueError(f"the executor does not provide attribute [[{p['attr']}]]")
        params.append(Param(p["type"], p["name"], int(p["index"]) if buf else None, p["attr"]))
    inst = _INSTANCE.search(generated, m.end())
    return Signature(m["name"], inst["callee"] if inst else m["name"], tuple(params))


# float -> bfloat rounds to nearest even, as Metal (and CUDA's __float2bfloat16_rn) does;
# compiler-rt would provide this for CPUs without AVX512-BF16, but neither zig's link nor
# libgcc 12 carries it. The CUDA emulator's kernels need it too (kernels/cuda_emu/build.py).
TRUNCSFBF2 = (
    "__attribute__((weak)) __bf16 __truncsfbf2(float f) {\n"
    "  unsigned u = __builtin_bit_cast(unsigned, f);\n"
    "  if ((u & 0x7fffffffu) > 0x7f800000u)\n"
    "    return __builtin_bit_cast(__bf16, (unsigned short)((u >> 16) | 0x40u));\n"
    "  u += 0x7fffu + ((u >> 16) & 1u);\n"
    "  return __builtin_bit_cast(__bf16, (unsigned short)(u >> 16));\n}\n")


def entry(sig: Signature) -> str:
    """C++ appended after the exact source: the hook table and ``__emu_entry``."""
    args = []
    for p in sig.params:
        if p.buffer is None:
            args.append(_ATTRIBUTES[p.attribute])
        elif p.type.endswith("&"):
            args.append(f"*({p.type[:-1].strip()}*)__b[{p.buffer}]")
        else:
            args.append(f"({p.type})__b[{p.buffer}]")
    call = ",\n    ".join(args)
    return (
        "\n// ---- executor entry (generated from the signature above) ----\n"
        'extern "C" {\n'
        "struct __emu_hooks_t __emu_hooks;\n"
        "static const unsigned __emu_zero[3] = {0, 0, 0};\n"
        "static inline uint3 __emu_u3(const unsigned* p) {\n"
        "  uint3 v; v.x = p[0]; v.y = p[1]; v.z = p[2]; return v;\n}\n"
        + TRUNCSFBF2 +
        "extern char __start_emu_tg[] __attribute__((weak));\n"
        "extern char __stop_emu_tg[] __attribute__((weak));\n"
        "void __emu_tg_bounds(char** lo, char** hi) { *lo = __start_emu_tg; *hi = __stop_emu_tg; }\n"
        "void __emu_entry(void* const* __b) {\n"
        "  const struct __emu_lane_info* __l = __emu_hooks.lane();\n"
        "  (void)__l;\n"
        f"  {sig.callee}(\n    {call});\n"
        "}\n}\n"
    )
