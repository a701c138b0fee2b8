"""Survivors, judged by reading the source: id -> (verdict, why).

A survivor is either equivalent to the original (no input can tell them apart) or names the
test that kills it; the report lists each beside its diff."""

from __future__ import annotations

_ROW = ("one more row of threadgroup memory that nothing touches; the row length (8), which "
        "the matrix load/store stride and the [i][j] indexing depend on, is unchanged")
_BROADCAST = ("simd_sum returns the SIMD group's total to every lane, so lane 1 (or lanes "
              "1-31, each with that same value) stores exactly what lane 0 stored")
_STRIDE_K1 = ("equivalent for narrow_output and for verify_m16 at k_groups 2 (every output is "
              "written in the first pass), not at k_groups 1 (64 outputs over 32 lanes): the "
              "second pass misses output 32 (stride 33) or never runs (-=, the index wraps). "
              "m8-parity's M = 16 test and numeric-bounds run verify_m16 only at k_groups 2 "
              "(production shapes); the k_groups 1 tiling (the e2e model's tiny_* shapes) is "
              "killed by tests/test_metal_launches.py (verify_m16 rows) and the sanitizer test")

JUDGEMENTS: dict[str, tuple[str, str]] = {
    "_metal_common.SPLIT_K_BODY:operator:L26C16:9fda35": ("equivalent", _BROADCAST),
    "_metal_common.SPLIT_K_BODY:constant:L26C19:183974": ("equivalent", _BROADCAST),
    "_metal_common.SPLIT_K_BODY:constant:L29C58:bfd68b": ("not equivalent", _STRIDE_K1),
    "_metal_common.SPLIT_K_BODY:operator:L29C55:1726d6": ("not equivalent", _STRIDE_K1),
    "_metal_common.SPLIT_K_BODY:operator:L29C61:2b0f85": (
        "equivalent", ("the write-back stride only shrinks (32 / K_GROUPS >= 1: K_GROUPS <= 32 "
        "under the 1024-thread limit) while the start indices g * 32 + lane still cover "
        "[0, 32 * K_GROUPS), so every output is written, some several times, always with the "
        "same in-order sum")),
    "fp16_matrix.METAL_SOURCE:constant:L2C23:8381a6": (
        "not equivalent", ("a zero-length threadgroup array: every wt[j][lane] store lands past "
        "it, in memory that `out` uses only after the loop, so every output is still right. "
        "The executor bounds threadgroup memory as one section, and clang's array-bounds check "
        "(which the emulator builds with since 6191360) takes a zero-length array for a "
        "flexible array member and does not check it. Killed by tests/test_metal_mutants.py::"
        "test_metal_source_is_clean_under_sanitizers, built with -fstrict-flex-arrays=3")),
    "fp16_matrix.METAL_SOURCE:constant:L2C23:a0121c": ("equivalent", _ROW),
    "fp16_matrix.METAL_SOURCE:barrier:L18C1:a8a6cf": (
        "equivalent", ("the loop's second barrier orders this iteration's reads of wt "
        "(simdgroup_load) before the next iteration's stores; the "
        "simdgroup_multiply_accumulate between them is a SIMD-group collective that consumes "
        "every lane's loaded fragment, so no lane reaches the next stores before every lane has "
        "loaded, and fp16_matrix's threadgroup is one SIMD group (32 threads, k_groups fixed at "
        "1): the barrier is redundant there (it would not be with two SIMD groups)")),
    "fp16_matrix.METAL_SOURCE:constant:L20C25:bcfe72": ("equivalent", _ROW),
    "scalar_kmajor.METAL_SOURCE:constant:L10C22:72d88f": (
        "equivalent", ("one column more of the thread-private xv, of which only [m][0..7] is "
        "written and read through the same array type")),
    "scalar_kmajor.METAL_SOURCE:operator:L23C16:a6c4ea": ("equivalent", _BROADCAST),
    "scalar_kmajor.METAL_SOURCE:constant:L23C19:725708": ("equivalent", _BROADCAST),
}

