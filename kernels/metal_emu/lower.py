"""The two places where Metal and C++ differ in syntax, lowered so clang compiles the rest as is.

1. A ``threadgroup`` variable declared in a function has threadgroup storage: one instance that
   every thread of the threadgroup shares. C++ has no such storage class, and clang refuses an
   automatic variable in an address space; the executor runs threadgroups one at a time, so
   ``static`` storage in that address space has exactly these semantics. The declaration gains
   ``static`` and keeps its address space; it is placed in the section ``emu_tg`` so the
   executor can fill all threadgroup memory with NaN bytes before each threadgroup, as
   uninitialised threadgroup memory is garbage on hardware.
2. Member functions qualified by an address space (``complex_t() threadgroup``, MLX's utils) are
   OpenCL/Metal syntax that clang accepts only in OpenCL mode. The qualifier is dropped: the
   member then serves objects in the default space, which only makes such code less
   constrained in overload resolution, never changes what it computes.

3. An explicit instantiation carrying attributes (``template [[host_name("...")]] [[kernel]]
   decltype(f<...>) f<...>;``, which MLX appends to every templated kernel) is MSL syntax that
   C++ forbids; the attributes name the host-visible function and are dropped.

The rewrites keep every line where it was, so compiler messages point into the exact source.
Nothing else is touched: ``check_attributes`` then holds every ``[[attribute]]`` to the list
Metal defines, since clang would only warn about one it does not know.
"""

from __future__ import annotations

import re

_TG_DECL = re.compile(
    r"(?P<lead>(?:^|[;{}])[ \t]*)(?P<decl>threadgroup\s+[A-Za-z_][\w:<>, \t]*?\s+[A-Za-z_]\w*\s*[\[;=({])",
    re.MULTILINE)
_METHOD_AS = re.compile(r"(?P<head>\)\s*(?:const\s+)?)(?:threadgroup|device|constant)\b(?=\s*[{:;=])")
_INSTANCE_ATTRS = re.compile(r"\btemplate(?P<attrs>(?:\s*\[\[[^\]]*\]\])+)(?=\s*decltype\b)")
_ATTR = re.compile(r"\[\[\s*(?P<name>[A-Za-z_]\w*)")

METAL_ATTRIBUTES = frozenset({
    "kernel", "host_name", "buffer", "texture", "sampler", "threadgroup", "function_constant",
    "maybe_unused", "clang", "stage_in", "user", "max_total_threads_per_threadgroup",
    "dispatch_quadgroups_per_threadgroup", "dispatch_simdgroups_per_threadgroup",
    "dispatch_threads_per_threadgroup", "grid_origin", "grid_size",
    "quadgroup_index_in_threadgroup", "quadgroups_per_threadgroup",
    "simdgroup_index_in_threadgroup", "simdgroups_per_threadgroup", "thread_execution_width",
    "thread_index_in_quadgroup", "thread_index_in_simdgroup", "thread_index_in_threadgroup",
    "thread_position_in_grid", "thread_position_in_threadgroup",
    "threadgroup_position_in_grid", "threadgroups_per_grid", "threads_per_grid",
    "threads_per_simdgroup", "threads_per_threadgroup", "likely", "unlikely", "fallthrough",
    "nodiscard", "deprecated", "visible", "stitchable",
})


def lower(source: str) -> str:
    out = _TG_DECL.sub(lambda m: m["lead"] + 'static __attribute__((section("emu_tg"))) ' + m["decl"], source)
    out = _METHOD_AS.sub(lambda m: m["head"], out)
    return _INSTANCE_ATTRS.sub("template", out)


def unknown_attributes(source: str) -> list[str]:
    """Attribute names Metal does not define (clang would merely warn about them)."""
    return sorted({m["name"] for m in _ATTR.finditer(source)} - METAL_ATTRIBUTES)
