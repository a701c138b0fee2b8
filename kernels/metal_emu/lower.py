"""The places where Metal and C++ differ in syntax, lowered so clang compiles the rest as is.

1. A ``threadgroup`` variable declared in a function has threadgroup storage: one instance that
   every thread of the threadgroup shares. C++ has no such storage class, and clang refuses an
   automatic variable in an address space; the executor runs threadgroups one at a time, so
   ``static`` storage in that address space has exactly these semantics. The declaration gains
   ``static`` and keeps its address space; it is placed in the section ``emu_tg`` so the
   executor can fill all threadgroup memory with NaN bytes before each threadgroup, as
   uninitialised threadgroup memory is garbage on hardware. It is also marked
   ``loader_uninitialized``: MSL gives threadgroup variables no initializer, and a static one
   would be initialised once per process, not per threadgroup, so clang must refuse one
   ("variable with 'loader_uninitialized' attribute cannot have an initializer").
2. Member functions qualified by an address space (``complex_t() threadgroup``, MLX's utils) are
   OpenCL/Metal syntax that clang accepts only in OpenCL mode. C++ cannot call a member on an
   object in an address space at all (``this`` is a default-space pointer), so the qualifier
   becomes ``__EMU_ADDRESS_SPACE_MEMBER(space)`` (metal_types): an ``enable_if`` that is never
   true, different per space. The member is still parsed and type-checked, it does not collide
   with its ``thread`` twin, and no call ever selects it: a thread object calls the ``thread``
   member, as in MSL, and a call that only a ``device`` member could serve fails to compile
   instead of silently running that member on a thread object.
3. An explicit instantiation carrying attributes (``template [[host_name("...")]] [[kernel]]
   decltype(f<...>) f<...>;``, which MLX appends to every templated kernel) is MSL syntax that
   C++ forbids; the attributes name the host-visible function and are dropped.
4. Metal's vector constructors: ``float4(a, b, c, d)``, ``float4(f2, f2)``, ``float4(i4)``,
   ``vec<T, 4>(...)`` and ``static_cast<float4>(...)``. On a clang ext_vector_type a
   functional cast takes a single argument, and on a vector of the same size it reinterprets
   the bits (``float4(int4)`` would turn 1 into 1.4e-45). Each becomes a call of
   ``::__emu_make<float4>(...)`` (metal_types), which builds the vector as MSL does. A C-style
   cast ``(float4)x`` is left alone (its operand has no textual end), and still bit-casts a
   vector of the same size.
5. A function constant (``constant bool align_M [[function_constant(200)]];``) gets its value
   when the pipeline is built; C++ has no such thing, and `constant` is read-only here. It
   becomes a ``metal::__emu::function_constant<T, index>`` object whose every read fails the
   launch with a message: the executor sets no function constants.
6. An array parameter in an address space (``constant const int64_t strides[3]``, MLX's utils)
   is a pointer parameter in C++ as in MSL, but clang checks the address space before it adjusts
   the type, and refuses it. It is written as the pointer it adjusts to
   (``constant const int64_t *strides``; ``a[2][3]`` becomes ``(*a)[3]``): the same type.
7. A C-style cast to a pointer in an address space that is dereferenced at once
   (``*((threadgroup ReadVector*)p) = *((const device ReadVector*)q)``, MLX's steel loaders;
   ``w_local = *((device vec_w*)ws)``, its quantized kernels) yields a struct lvalue in that
   space, and C++ cannot copy a class object in an address space (its copy operations take
   ``this`` and their argument in the default space). The cast keeps its type but for the
   address space (``constant`` leaves its ``const``): the same bytes are read and written;
   only the address-space check of that one dereferenced lvalue is lost.
8. ``[[threadgroup(n)]]`` (a threadgroup-memory argument) spells its attribute with a word
   the shim defines as a macro; the attribute becomes ``[[emu_threadgroup(n)]]``, which clang
   ignores as it ignores ``[[buffer(n)]]``.

The rewrites keep every line where it was, so compiler messages point into the exact source.
Nothing else is touched: ``check_attributes`` then holds every ``[[attribute]]`` to the list
Metal defines, since clang would only warn about one it does not know.
"""

from __future__ import annotations

import re

_TG_DECL = re.compile(
    r"(?P<lead>(?:^|[;{}])[ \t]*)(?P<decl>threadgroup\s+[A-Za-z_][\w:<>, \t]*?\s+[A-Za-z_]\w*\s*[\[;=({])",
    re.MULTILINE)
_METHOD_AS = re.compile(
    r"(?P<head>\)\s*(?:const\s+)?)(?P<space>threadgroup|device|constant)\b(?=\s*[{:;=])")
_INSTANCE_ATTRS = re.compile(r"\btemplate(?P<attrs>(?:\s*\[\[[^\]]*\]\])+)(?=\s*decltype\b)")
_ATTR = re.compile(r"\[\[\s*(?P<name>[A-Za-z_]\w*)")

_VEC_NAME = r"(?:bool|char|uchar|short|ushort|int|uint|long|ulong|half|bfloat|float)[234]"
_TEMPLATE_ARGS = r"[^<>;{}()]*(?:<[^<>;{}()]*>[^<>;{}()]*)*"
_VEC_TYPE = rf"(?:metal::)?(?:{_VEC_NAME}\b|vec\s*<{_TEMPLATE_ARGS}>)"
_VEC_CTOR = re.compile(rf"(?<![\w.:])(?P<type>(?:metal::)?(?:{_VEC_NAME}|vec\s*<{_TEMPLATE_ARGS}>))\(")
_VEC_CAST = re.compile(rf"\bstatic_cast\s*<\s*(?P<type>{_VEC_TYPE})\s*>\s*\(")
_ARRAY_PARAM = re.compile(
    r"(?P<decl>\b(?:device|constant|threadgroup)\b[^,;(){}\[\]]*?)\b(?P<name>[A-Za-z_]\w*)[ \t]*"
    r"\[[^\[\];]*\](?P<rest>(?:[ \t]*\[[^\[\];]*\])*)(?=\s*[,)])")
_DEREF_CAST = re.compile(
    r"(?P<head>\*\s*\(\s*\(\s*(?:const\s+)?)(?P<space>device|threadgroup|constant)\s+"
    r"(?P<type>(?:const\s+)?[A-Za-z_][\w:]*(?:\s*<[^<>;()]*>)?\s*\*\s*\))")
_TG_ATTR = re.compile(r"\[\[\s*threadgroup\s*\(")
_OPERATOR_BEFORE = re.compile(r"\boperator\s*$")
_FUNCTION_CONSTANT = re.compile(
    r"(?P<lead>(?:^|[;{}])[ \t]*)constant[ \t]+(?P<type>[A-Za-z_][\w:<>, \t]*?)[ \t]+"
    r"(?P<name>[A-Za-z_]\w*)[ \t]*\[\[[ \t]*function_constant[ \t]*\([ \t]*(?P<index>\d+)"
    r"[ \t]*\)[ \t]*\]\][ \t]*;", re.MULTILINE)

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


def _breaks(text: str) -> str:
    """The line breaks (with their macro continuations) in ``text``: what a rewrite that drops
    ``text`` puts back so every later line stays where it was."""
    return "".join(re.findall(r"\\?\n", text))


def _vector_constructor(m: re.Match) -> str:
    if _OPERATOR_BEFORE.search(m.string, 0, m.start()):
        return m[0]  # `operator float4()`: a conversion function, not a construction
    return f"::__emu_make<{m['type']}>("


def lower(source: str) -> str:
    out = _TG_DECL.sub(
        lambda m: m["lead"] + 'static __attribute__((section("emu_tg"))) '
        "__attribute__((loader_uninitialized)) " + m["decl"], source)
    out = _METHOD_AS.sub(lambda m: m["head"] + f"__EMU_ADDRESS_SPACE_MEMBER({m['space']})", out)
    out = _INSTANCE_ATTRS.sub(lambda m: "template" + _breaks(m["attrs"]), out)
    out = _FUNCTION_CONSTANT.sub(
        lambda m: f"{m['lead']}static constexpr ::metal::__emu::function_constant<{m['type']}, "
        f"{m['index']}> {m['name']}{{}};", out)
    out = _ARRAY_PARAM.sub(
        lambda m: m["decl"] + (f"(*{m['name']}){m['rest']}" if m["rest"] else f"*{m['name']}"), out)
    out = _DEREF_CAST.sub(
        lambda m: m["head"] + ("const " if m["space"] == "constant" else "")
        + _breaks(m[0][m.end("head") - m.start():m.start("type") - m.start()]) + m["type"], out)
    out = _TG_ATTR.sub(lambda m: "[[emu_threadgroup(" + _breaks(m[0]), out)
    out = _VEC_CAST.sub(lambda m: f"::__emu_make<{m['type']}>(" + _breaks(m[0]), out)
    return _VEC_CTOR.sub(_vector_constructor, out)


def unknown_attributes(source: str) -> list[str]:
    """Attribute names Metal does not define (clang would merely warn about them)."""
    return sorted({m["name"] for m in _ATTR.finditer(source)} - METAL_ATTRIBUTES)
