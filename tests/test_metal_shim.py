"""The Metal shim, complete and strict: real clang (through toolchain.check_source) compiles MLX's
own Metal code and our variants' exact sources against it, refuses Metal that a Mac refuses,
and the shim's functions compute what MSL specifies when the executor runs them.

Nothing is mocked: MLX's utils preamble and headers come from the mlx-metal wheel of the
installed MLX version (fetched by kernels.metal_emu.mlx_metal on first use; a failed fetch
fails these tests).
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from kernels import metal
from kernels.metal_emu import lower, mlx_metal, source, toolchain
from kernels.metal_emu import run as emu
from kernels.qweights import QWeights
from kernels.variants import VARIANTS

KERNELS = "mlx/backend/metal/kernels"
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"(?P<path>mlx/[^"]+)"[ \t]*$', re.MULTILINE)
_PRAGMA_ONCE = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+once[ \t]*$", re.MULTILINE)
# The headers MLX's utils preamble already holds (it is utils.h with its includes inlined).
_IN_PREAMBLE = {f"{KERNELS}/{h}" for h in
                ("utils.h", "bf16.h", "bf16_math.h", "complex.h", "defines.h", "logging.h")}


def compiles(src: str, name: str = "snippet") -> None:
    toolchain.check_source(src, name, (mlx_metal.include_dir(),))


def refused(src: str, name: str = "snippet") -> str:
    with pytest.raises(toolchain.CompileError) as e:
        compiles(src, name)
    return str(e.value)


def jit_assembled(tail: str) -> str:
    """MLX's utils preamble, then ``tail`` with its ``#include "mlx/..."`` headers inlined, as
    MLX's JIT assembles a kernel library (each header once, `#line` marks, no `#pragma once`),
    so that lower.py sees every line clang compiles."""
    root = mlx_metal.include_dir()
    seen = set(_IN_PREAMBLE)

    def inline(path: str) -> str:
        if path in seen:
            return ""
        seen.add(path)
        text = _PRAGMA_ONCE.sub("", (root / path).read_text(encoding="utf-8"))
        parts, pos = [f'#line 1 "{path}"\n'], 0
        for m in _INCLUDE.finditer(text):
            parts += [text[pos:m.start()], inline(m["path"]),
                      f'#line {text.count(chr(10), 0, m.end()) + 1} "{path}"']
            pos = m.end()
        return "".join([*parts, text[pos:]])

    return mlx_metal.utils_preamble() + _INCLUDE.sub(lambda m: inline(m["path"]), tail)


# -- complete: MLX's own Metal ------------------------------------------------------------------

def test_mlx_utils_preamble_compiles():
    compiles(mlx_metal.utils_preamble(), "utils_preamble")


# MLX's instantiation macros from mlx/backend/metal/kernels/quantized.metal (the wheel ships
# quantized.h, not the .metal file), for the stock qmv/qmm kernels at group size 64, 4 bits.
QUANTIZED_TAIL = f"""
#include "{KERNELS}/steel/gemm/gemm.h"
#include "{KERNELS}/quantized_utils.h"
#include "{KERNELS}/quantized.h"
""" + r"""
#define instantiate_quantized_batched(name, type, group_size, bits, batched)     \
  instantiate_kernel(                                                    \
      #name "_" #type "_gs_" #group_size "_b_" #bits "_batch_" #batched, \
      name,                                                              \
      type,                                                              \
      group_size,                                                        \
      bits,                                                              \
      batched)

#define instantiate_quantized_aligned_batched(name, type, group_size, bits, aligned, batched)     \
  instantiate_kernel(                                                                     \
      #name "_" #type "_gs_" #group_size "_b_" #bits "_alN_" #aligned "_batch_" #batched, \
      name,                                                                  \
      type,                                                                  \
      group_size,                                                            \
      bits,                                                                  \
      aligned,                                                               \
      batched)

#define instantiate_quantized_batched_wrap(name, type, group_size, bits) \
  instantiate_quantized_batched(name, type, group_size, bits, 1)      \
  instantiate_quantized_batched(name, type, group_size, bits, 0)

#define instantiate_quantized_stock(type, group_size, bits)                              \
  instantiate_quantized_batched_wrap(affine_qmv_fast, type, group_size, bits)            \
  instantiate_quantized_batched_wrap(affine_qmv, type, group_size, bits)                 \
  instantiate_quantized_batched_wrap(affine_qmm_n, type, group_size, bits)               \
  instantiate_quantized_aligned_batched(affine_qmm_t, type, group_size, bits, true, 1)   \
  instantiate_quantized_aligned_batched(affine_qmm_t, type, group_size, bits, true, 0)   \
  instantiate_quantized_aligned_batched(affine_qmm_t, type, group_size, bits, false, 1)  \
  instantiate_quantized_aligned_batched(affine_qmm_t, type, group_size, bits, false, 0)

instantiate_quantized_stock(float, 64, 4)
instantiate_quantized_stock(float16_t, 64, 4)
instantiate_quantized_stock(bfloat16_t, 64, 4)
"""


def test_mlx_quantized_kernels_compile():
    # 30 kernels: qmv_fast, qmv, qmm_n (batched or not) and qmm_t (aligned N or not, batched or
    # not) for float, float16_t and bfloat16_t.
    src = jit_assembled(QUANTIZED_TAIL)
    assert src.count("instantiate_quantized_stock(") == 4  # the macro and three uses
    compiles(src, "mlx_quantized")


def test_the_quantized_check_instantiates_what_it_names():
    # The kernels are really instantiated: a bit width MLX does not define trips its own
    # static_assert inside qmm_n_impl.
    src = jit_assembled(QUANTIZED_TAIL) + "instantiate_quantized_batched(affine_qmm_n, float, 64, 7, 0)\n"
    assert "Template undefined for bits not in" in refused(src, "mlx_quantized_b7")


def test_lowering_keeps_every_line_where_it_was():
    src = jit_assembled(QUANTIZED_TAIL)
    low = lower.lower(src)
    assert low != src and low.count("\n") == src.count("\n")
    # Every `#line` mark (one per inlined header) stays on its line.
    marks = [n for n, ln in enumerate(src.splitlines()) if ln.startswith("#line")]
    assert marks and all(low.splitlines()[n] == src.splitlines()[n] for n in marks)


# -- complete: our variants, the exact source MLX generates for a production launch -------------

METAL_VARIANTS = sorted(n for n, v in VARIANTS.items() if v.METAL_SOURCE is not None)


def generated(name: str) -> str:
    v = VARIANTS[name]
    m = v.ROWS or 8
    dtype = "float16" if name == "fp16_matrix" else "bfloat16"
    k, n = 2048, 64
    spec = metal.launch_spec(v, m, k, n, 64, dtype, {})
    act = getattr(mx, spec.activation)
    qw = QWeights.quantize(mx.zeros((n, k)))
    arrays = {"x": mx.zeros((m, k), dtype=act), "w": qw.wq, "scales": qw.scales,
              "biases": qw.biases}
    kernel = metal._build(v.NAME, v.METAL_SOURCE, v.HEADER)
    return source.generated_source(
        kernel, [arrays[i] for i in spec.inputs],
        template=[(t, getattr(mx, x) if t == "T" else x) for t, x in spec.template],
        grid=spec.grid, threadgroup=spec.threadgroup, output_shapes=[spec.output_shape],
        output_dtypes=[act])


@pytest.mark.parametrize("name", METAL_VARIANTS)
def test_variant_exact_source_compiles(name):
    compiles(source.full_source(generated(name)), name)


# -- complete: each area of the shim, in small valid kernels -------------------------------------

def kernel(body: str, head: str = "") -> str:
    return mlx_metal.utils_preamble() + head + (
        "\n[[kernel]] void probe(const device float* x [[buffer(0)]],\n"
        "    device float* y [[buffer(1)]],\n"
        "    uint i [[thread_position_in_grid]],\n"
        "    uint lane [[thread_index_in_simdgroup]]) {\n" + body + "\n}\n")


VALID = {
    "types_and_literals": """
  half h = 1.5h; bfloat b = bfloat(2.0f); float f = float(b) + float(h);
  uint8_t u8 = 3; int64_t i64 = -4; ulong ul = 5; size_t s = 6;
  y[i] = f + u8 + float(i64) + float(ul) + float(s) + float(as_type<half>(as_type<ushort>(h)));""",
    "vector_constructors": """
  float4 a = float4(1.0f, 2.0f, 3.0f, 4.0f); float4 b = float4(a.xy, float2(5.0f, 6.0f));
  float4 c = float4(int4(1, 2, 3, 4)); half4 d = half4(a); float3 e = float3(a.xyz);
  uint2 u = uint2(i, 7); vec<float, 2> v = vec<float, 2>(x[i], 1.0f);
  float4 g = static_cast<float4>(int4(2)); short2 sh = short2(3, 4);
  y[i] = a.w + b.z + c.y + float(d.x) + e.z + float(u.y) + v.x + g.x + float(sh.y);""",
    "math_precise_fast": """
  float v = x[i];
  y[i] = metal::exp(v) + metal::fast::exp(v) + metal::precise::sqrt(v) + metal::log(1.0f + v)
       + fma(v, 2.0f, 1.0f) + metal::rsqrt(2.0f) + metal::pow(v, 2.0f) + metal::tanh(v)
       + metal::sinpi(v) + metal::fract(v) + metal::fmax3(v, 1.0f, 2.0f) + metal::abs(-v)
       + float(metal::exp(half(v))) + metal::exp(float4(v)).w + metal::floor(v) + metal::round(v);""",
    "bfloat_math_from_mlx": """
  bfloat16_t b = bfloat16_t(x[i]);
  y[i] = float(metal::exp(b)) + float(metal::max(b, bfloat16_t(1.0f))) + float(metal::abs(b))
       + float(metal::fast::exp(b)) + float(metal::precise::sqrt(b)) + float(log1p(b));""",
    "common_integer_relational_geometric": """
  float v = x[i];
  int k = int(i);
  y[i] = clamp(v, 0.0f, 1.0f) + mix(v, 1.0f, 0.5f) + saturate(v) + sign(v) + step(0.5f, v)
       + float(max(k, 3)) + float(min(i, 4u)) + float(clamp(k, 0, 8)) + float(abs(-k))
       + float(popcount(i)) + float(clz(i)) + float(ctz(i + 1)) + float(extract_bits(i, 1u, 3u))
       + float(mulhi(i, 7u)) + float(rotate(i, 3u)) + float(addsat(k, 1))
       + (isnan(v) ? 1.0f : 0.0f) + (all(float2(v) < float2(2.0f)) ? 1.0f : 0.0f)
       + select(0.0f, 1.0f, v > 0.5f) + dot(float3(v), float3(1.0f)) + length(float2(v, 1.0f))
       + normalize(float2(3.0f, 4.0f)).x + cross(float3(1, 0, 0), float3(0, 1, 0)).z
       + metal::max(float4(v), float4(1.0f)).x + float(metal::min(int2(k), int2(3)).y)
       + float(metal::max(half2(half(v)), half2(1.0h)).y) + metal::clamp(float2(v), 0.0f, 1.0f).x;""",
    "limits_and_traits": """
  static_assert(metal::is_same_v<metal::remove_cv_t<const float>, float>, "");
  static_assert(metal::is_floating_point_v<half> && metal::is_floating_point_v<bfloat>, "");
  static_assert(metal::is_integral_v<uint> && !metal::is_signed_v<uint>, "");
  static_assert(metal::numeric_limits<half>::max() == 65504.0h, "");
  static_assert(metal::numeric_limits<int>::lowest() < 0, "");
  static_assert(metal::is_convertible_v<int, float>, "");
  static_assert(metal::vec_elements<float4>::value == 4, "");
  y[i] = Limits<float>::finite_max > 0 ? float(metal::numeric_limits<bfloat>::epsilon()) : 0.0f;""",
    "simdgroup": """
  float v = x[i];
  y[i] = simd_sum(v) + simd_max(v) + simd_min(v) + simd_product(v) + simd_prefix_inclusive_sum(v)
       + simd_prefix_exclusive_sum(v) + simd_shuffle(v, ushort(0)) + simd_shuffle_down(v, ushort(1))
       + simd_shuffle_up(v, ushort(1)) + simd_shuffle_xor(v, ushort(1))
       + simd_broadcast(v, ushort(3)) + simd_broadcast_first(v)
       + simd_shuffle_rotate_down(v, ushort(2)) + simd_shuffle_and_fill_down(v, 0.0f, ushort(1))
       + float(simd_sum(bfloat16_t(v))) + float(simd_shuffle(uint64_t(i), ushort(2)))
       + float(simd_and(i)) + float(simd_or(i)) + float(simd_xor(i))
       + (simd_all(v > 0.0f) ? 1.0f : 0.0f) + (simd_any(v > 0.0f) ? 1.0f : 0.0f)
       + float(uint64_t(simd_ballot(v > 0.0f))) + (simd_is_first() ? 1.0f : 0.0f)
       + simd_sum(float4(v)).x + float(simd_sum(half(v)));
  simdgroup_barrier(mem_flags::mem_none);""",
    "quadgroup": """
  float v = x[i];
  y[i] = quad_sum(v) + quad_max(v) + quad_shuffle(v, ushort(1)) + quad_shuffle_xor(v, ushort(1))
       + quad_broadcast(v, ushort(0)) + quad_prefix_exclusive_sum(v)
       + (quad_any(v > 0.0f) ? 1.0f : 0.0f) + float(ushort(quad_ballot(v > 0.0f)));""",
    "threadgroup_and_barriers": """
  threadgroup float tile[64];
  threadgroup float4 quads[4][2];
  tile[lane] = x[i];
  threadgroup_barrier(mem_flags::mem_threadgroup);
  quads[0][0] = float4(tile[0]);
  threadgroup_barrier(mem_flags::mem_device | mem_flags::mem_threadgroup);
  y[i] = tile[(lane + 1) % 32] + quads[0][0].x;""",
    "simdgroup_matrix": """
  threadgroup float t[64];
  simdgroup_float8x8 a = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
  simdgroup_matrix<half, 8, 8> b;
  simdgroup_load(b, (const device half*)x, 8);
  simdgroup_matrix<float, 8, 8> c;
  simdgroup_multiply_accumulate(c, a, b, a);
  simdgroup_multiply(c, a, c);
  simdgroup_store(c, t, 8);
  simdgroup_store(c, y, 8, ulong2(0, 0), true);
  thread auto& e = c.thread_elements();
  y[i] = e[0] + t[0];""",
    "atomics": """
  threadgroup atomic<int> count;
  if (lane == 0) atomic_store_explicit(&count, 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
  atomic_fetch_max_explicit((device atomic<uint>*)y, i, memory_order_relaxed);
  int expected = 32;
  atomic_compare_exchange_weak_explicit(&count, &expected, 0, memory_order_relaxed,
                                        memory_order_relaxed);
  atomic_fetch_add_explicit((device atomic_float*)y + 1, x[i], memory_order_relaxed);
  y[i + 2] = float(atomic_load_explicit(&count, memory_order_relaxed));""",
}

CONSTANT_SPACE_HEAD = """
constant float kScale = 0.5f;
constant constexpr int kTile = 8;
template <int GS, typename P>
METAL_FUNC float first(P p, const constant int& n) { return float(p[0]) * kScale + GS + n; }
"""


@pytest.mark.parametrize("area", sorted(VALID))
def test_valid_metal_compiles(area):
    compiles(kernel(VALID[area]), area)


def test_program_scope_constants_and_deduced_address_spaces_compile():
    body = "  const constant int& t = kTile;\n  y[i] = first<64>(x, t) + float(kTile);"
    compiles(kernel(body, CONSTANT_SPACE_HEAD), "constant_space")


# -- strict: Metal a Mac refuses is refused, with clang's reason ---------------------------------

HEADER_BUG = """
inline void dequant(const device uint32_t* w, const device T* scales, uint k,
                    thread float out[8]) {
  const float s = float(scales[k / GS]);
  for (uint j = 0; j < 8; ++j) out[j] = s * float((w[k / 8] >> (4 * j)) & 0xFu);
}
template <typename T, int GS>
[[kernel]] void k(const device uint32_t* w [[buffer(0)]], const device T* scales [[buffer(1)]],
                  device float* y [[buffer(2)]], uint i [[thread_position_in_grid]]) {
  float v[8];
  dequant(w, scales, i * 8, v);
  y[i] = v[0];
}
template [[host_name("k")]] [[kernel]] decltype(k<float, 64>) k<float, 64>;
"""

INVALID = {
    # name: (snippet, [expected diagnostic fragments]); snippets are kernel bodies unless they
    # start with "//file" (then the whole source after the preamble).
    "header_uses_kernel_template_parameters": (
        "//file" + HEADER_BUG, ["unknown type name 'T'", "use of undeclared identifier 'GS'"]),
    "device_pointer_where_threadgroup_expected": (
        ("//file\ninline void stage(threadgroup float* t, uint i) { t[i] = 0.0f; }\n"
        "[[kernel]] void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "  stage(y, i);\n}\n"),
        ["no matching function for call to 'stage'",
         "cannot pass pointer to address space '1' as a pointer to address space '3'"]),
    "threadgroup_pointer_where_device_expected": (
        ("//file\ninline void put(device float* p, float v) { p[0] = v; }\n"
        "[[kernel]] void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "  threadgroup float t[32];\n  put(t, 1.0f);\n  y[i] = t[i];\n}\n"),
        ["no known conversion from 'threadgroup float[32]' to 'device float *'"]),
    "device_pointer_where_thread_expected": (
        ("//file\ninline float get(thread const float* p) { return p[0]; }\n"
        "[[kernel]] void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "  y[i] = get(y);\n}\n"),
        ["cannot pass pointer to address space '1' as a pointer to generic address space"]),
    "undeclared_template_parameter_in_kernel_body": (
        ("//file\ntemplate <typename T, int M_ROWS>\n"
        "[[kernel]] void k(device T* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "  for (uint t = 0; t < N_TILE; ++t) y[i * M_ROWS + t] = T(0);\n}\n"
        "template [[host_name(\"k\")]] [[kernel]] decltype(k<float, 8>) k<float, 8>;\n"),
        ["use of undeclared identifier 'N_TILE'"]),
    "printf": ('  printf("%f", x[i]);', ["use of undeclared identifier 'printf'"]),
    "malloc": ("  device float* p = (device float*)malloc(4);\n  y[i] = p[0];",
               ["use of undeclared identifier 'malloc'"]),
    "std_namespace": ("  y[i] = std::max(x[i], 0.0f);", ["use of undeclared identifier 'std'"]),
    "libc_header": ("//file\n#include <math.h>\n", ["'math.h' file not found"]),
    "write_through_const_device": (
        ("//file\n[[kernel]] void k(const device float* x [[buffer(0)]],\n"
        "    uint i [[thread_position_in_grid]]) {\n  x[i] = 0.0f;\n}\n"),
        ["read-only variable is not assignable"]),
    "write_through_constant": (
        ("//file\n[[kernel]] void k(constant float* x [[buffer(0)]],\n"
        "    uint i [[thread_position_in_grid]]) {\n  x[i] = 0.0f;\n}\n"),
        ["read-only variable is not assignable"]),
    "constant_pointer_where_device_expected": (
        ("//file\ninline void put(device float* p, float v) { p[0] = v; }\n"
        "[[kernel]] void k(constant float* c [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "  put(c, 1.0f);\n}\n"),
        ["no matching function for call to 'put'",
         "cannot pass pointer to address space '2' as a pointer to address space '1'"]),
    "unknown_attribute": (
        ("//file\n[[kernel]] void k(device float* y [[buffer_index(0)]],\n"
        "    uint i [[thread_position_in_grid]]) {\n  y[i] = 0.0f;\n}\n"),
        ["unknown attribute(s) buffer_index"]),
    "threadgroup_variable_with_initializer": (
        "  threadgroup float acc = 0.0f;\n  y[i] = acc;",
        ["cannot have an initializer"]),
    "double": ("  double d = x[i];\n  y[i] = float(d);", ["attempt to use a poisoned identifier"]),
    "bfloat_to_half_implicitly": (
        "  half h = bfloat16_t(x[i]);\n  y[i] = float(h);",
        ["cannot initialize a variable of type 'half'"]),
    "vector_constructor_component_count": (
        "  float4 v = float4(x[i], 1.0f);\n  y[i] = v.x;",
        ["a vector constructor needs exactly as many components as the vector has"]),
    "vector_narrowing_constructor": (
        "  float2 v = float2(float4(x[i]));\n  y[i] = v.x;",
        ["a vector converts only to a vector of as many components"]),
    "simd_sum_of_a_struct": (
        ("//file\nstruct Pair { float a, b; };\n"
        "[[kernel]] void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "  Pair p = {1.0f, 2.0f};\n  y[i] = simd_sum(p).a;\n}\n"),
        ["no matching function for call to 'simd_sum'"]),
    "atomic_in_thread_memory": (
        "  atomic<int> a;\n  atomic_fetch_add_explicit(&a, 1, memory_order_relaxed);",
        ["no matching function for call to 'atomic_fetch_add_explicit'"]),
    "device_member_called_on_thread_object": (
        ("//file\nstruct Acc { float v; float get() const device { return v; } };\n"
        "[[kernel]] void k(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {\n"
        "  Acc a = {1.0f};\n  y[i] = a.get();\n}\n"),
        ["a member for objects in the device address space"]),
}


def invalid_source(snippet: str) -> str:
    if snippet.startswith("//file"):
        return mlx_metal.utils_preamble() + snippet.removeprefix("//file")
    return kernel(snippet)


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_metal_is_refused(case):
    snippet, fragments = INVALID[case]
    message = refused(invalid_source(snippet), case)
    for fragment in fragments:
        assert fragment in message, message


# -- the shim computes what MSL specifies (one launch on the executor) ---------------------------

SLOTS = 28
PROBE = r"""
  const uint l = thread_index_in_simdgroup;
  device float* o = y + l * 28;
  const float v = x[l];
  o[0] = simd_sum(v);
  o[1] = simd_prefix_inclusive_sum(v);
  o[2] = simd_prefix_exclusive_sum(v);
  o[3] = simd_max(v);
  o[4] = simd_shuffle(v, ushort(31 - l));
  o[5] = simd_shuffle_down(v, ushort(3));
  o[6] = simd_shuffle_up(v, ushort(3));
  o[7] = simd_shuffle_xor(v, ushort(5));
  o[8] = simd_shuffle_rotate_down(v, ushort(3));
  o[9] = simd_shuffle_and_fill_down(v, v + 100.0f, ushort(2), ushort(8));
  o[10] = simd_shuffle_and_fill_up(v, v + 100.0f, ushort(2), ushort(8));
  o[11] = quad_sum(v);
  o[12] = quad_shuffle(v, ushort(3));
  o[13] = quad_prefix_exclusive_sum(v);
  o[14] = float(simd_and(uint(0xFF) ^ (1u << (l % 8))));
  o[15] = float(simd_sum(bfloat16_t(v)));
  o[16] = float(simd_shuffle(uint64_t(l) << 40, ushort(7)) >> 40);
  o[17] = float4(int4(int(l), 2, 3, 4)).x;
  o[18] = float4(float2(1.0f, 2.0f), float2(v, 4.0f)).z;
  o[19] = float(clz(uint(l + 1)));
  o[20] = float(extract_bits(int(-8), 1u, 3u));
  threadgroup atomic<int> counter;
  if (l == 0) atomic_store_explicit(&counter, 0, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  atomic_fetch_add_explicit(&counter, 1, memory_order_relaxed);
  threadgroup_barrier(mem_flags::mem_threadgroup);
  o[21] = float(atomic_load_explicit(&counter, memory_order_relaxed));
  o[22] = metal::exp(1.0f);
  o[23] = metal::sinpi(v + 0.5f);
  o[24] = metal::fmax(metal::numeric_limits<float>::quiet_NaN(), v);
  o[25] = 0.0f;
  o[26] = 0.0f;
  if (l % 2 == 1) {
    o[25] = simd_sum(v);
    o[26] = float(uint64_t(simd_ballot(true)) & 0xFFFFFFFFull);
  }
  o[27] = metal::min(v, metal::numeric_limits<float>::quiet_NaN());
"""


def test_shim_functions_compute_what_msl_specifies():
    x = mx.arange(32, dtype=mx.float32)
    k = mx.fast.metal_kernel(name="shim_probe", input_names=["x"], output_names=["y"],
                             source=PROBE)
    (y,) = emu.run(k, "shim_probe", ["x"], ["y"], [x], template=[("T", mx.float32)],
                   grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(32 * SLOTS,)],
                   output_dtypes=[mx.float32])
    o = np.array(y).reshape(32, SLOTS)
    lanes = np.arange(32)
    v = lanes.astype(np.float64)
    seg, i8 = lanes - lanes % 8, lanes % 8
    expect = {
        0: np.full(32, v.sum()),
        1: np.cumsum(v),
        2: np.cumsum(v) - v,
        3: np.full(32, 31.0),
        4: 31 - v,
        5: np.where(lanes + 3 < 32, v + 3, v),  # no wrap: the top lanes keep their value
        6: np.where(lanes >= 3, v - 3, v),
        7: (lanes ^ 5).astype(float),
        8: ((lanes + 3) % 32).astype(float),
        9: np.where(i8 + 2 < 8, seg + i8 + 2, seg + i8 + 2 - 8 + 100.0),
        10: np.where(i8 - 2 >= 0, seg + i8 - 2, seg + i8 - 2 + 8 + 100.0),
        11: np.repeat(v.reshape(8, 4).sum(1), 4),
        12: np.repeat(v.reshape(8, 4)[:, 3], 4),
        13: (np.cumsum(v.reshape(8, 4), 1) - v.reshape(8, 4)).reshape(-1),
        14: np.zeros(32),
        15: np.full(32, v.sum()),
        16: np.full(32, 7.0),
        17: v,  # float4(int4): converted, not the int's bits
        18: v,
        19: np.array([31 - int(n).bit_length() + 1 for n in lanes + 1], float),
        20: np.full(32, -4.0),
        21: np.full(32, 32.0),
        22: np.full(32, np.float32(np.e)),
        23: np.where(lanes % 2 == 0, 1.0, -1.0),  # sinpi(n + 0.5) = (-1)^n
        24: v,  # fmax and min ignore a NaN (IEEE maxNum / minNum)
        27: v,
        25: np.where(lanes % 2 == 1, v[1::2].sum(), 0.0),  # the odd lanes' own group
        26: np.where(lanes % 2 == 1, float(0xAAAAAAAA), 0.0),
    }
    for slot, want in expect.items():
        np.testing.assert_array_equal(o[:, slot], np.asarray(want, np.float32),
                                      err_msg=f"slot {slot}")


def test_function_constants_fail_when_read():
    k = mx.fast.metal_kernel(
        name="fc_probe", input_names=["x"], output_names=["y"],
        header="constant bool use_bias [[function_constant(7)]];\n",
        source="  y[thread_position_in_grid.x] = use_bias ? 1.0f : x[0];")
    from kernels.metal_emu import executor
    with pytest.raises(executor.EmulatorError, match="function constant"):
        emu.run(k, "fc_probe", ["x"], ["y"], [mx.zeros((4,))], template=[("T", mx.float32)],
                grid=(32, 1, 1), threadgroup=(32, 1, 1), output_shapes=[(32,)],
                output_dtypes=[mx.float32])


def test_shim_headers_are_metal_header_names_and_stand_alone():
    shim = Path(toolchain.SHIM)
    for header in sorted(p.name for p in shim.iterdir() if p.name.startswith("metal_")
                         and p.name != "metal_emu_hooks.h"):
        compiles(f"#include <{header}>\n", header)


def test_copies_of_the_tree_share_one_preamble_pch(tmp_path, monkeypatch):
    """Each farm job runs its own copy of the tree: they compile against one content-named shim
    and share one PCH (each used to build and keep its own, 1.5 MB and ~0.5 s a job)."""
    monkeypatch.setenv(mlx_metal.ENV_CACHE, str(tmp_path / "cache"))
    src = (mlx_metal.utils_preamble()
           + "[[kernel]] void pch_probe(device float* o [[buffer(0)]]) { o[0] = 1.0f; }\n")
    try:
        for copy in ("a", "b"):
            shim = tmp_path / copy / "shim"
            shutil.copytree(toolchain.SHIM, shim)
            monkeypatch.setattr(toolchain, "SHIM", shim)
            toolchain._preamble_pch.cache_clear()  # a new process: another job
            toolchain.check_source(src, "pch_probe")
        built = toolchain.build_dir()
        assert len(list(built.glob("preamble-*.pch"))) == 1
        assert len(list(built.glob("shim-*"))) == 1
    finally:
        toolchain._preamble_pch.cache_clear()  # nothing built against the copies outlives them


def test_the_preamble_pch_follows_its_headers_mtimes(tmp_path, monkeypatch):
    """clang refuses a PCH whose headers were rewritten since it was built, even with the same
    content (the content-named shim made again after a cache was cleaned): the PCH's key
    follows the headers' mtimes, so a launch still compiles after they change."""
    monkeypatch.setenv(mlx_metal.ENV_CACHE, str(tmp_path / "cache"))
    toolchain._preamble_pch.cache_clear()
    try:
        src = (mlx_metal.utils_preamble()
               + "[[kernel]] void pch_probe(device float* o [[buffer(0)]]) { o[0] = 1.0f; }\n")
        toolchain.check_source(src, "pch_probe")
        later = time.time() + 100
        for f in toolchain.shim_dir().rglob("*"):
            if f.is_file():
                os.utime(f, (later, later))
        toolchain._preamble_pch.cache_clear()  # a new process
        toolchain.check_source(src, "pch_probe")
    finally:
        toolchain._preamble_pch.cache_clear()  # nothing built against the copy outlives it
