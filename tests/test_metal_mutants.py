"""The mutant generator of bench/mutation_score.py, and a check that kills what m8-parity
cannot see in the Metal sources.

The generator tests are fast: no suite runs and no compiles (the bench measures what the suites
kill). The sanitizer test runs each Metal variant, in every tiling the selection table uses
(M = 16 included, which m8-parity never runs), built with clang's array-bounds and shift
sanitizers in trap mode: the executor guards device and threadgroup buffers, but an index past a
thread-private array (``acc[M_ROWS][t]``, ``wv[8]``) or a 32-bit shift by 32 is undefined
behaviour that it cannot see, and that the optimiser is free to make harmless on the CPU and
harmful on a GPU. bench/results/mutation_score.md lists the mutants this kills.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    """The generator's module (bench/mutation/generate.py), which bench/mutation_score.py runs."""
    bench = str(ROOT / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    from mutation import generate
    return generate


TINY = r"""
#include <metal_stdlib>
// a comment: a + b < c [i] 0x3 simd_sum(x) threadgroup_barrier(mem_flags::mem_threadgroup);
/* and a block comment: i * 2 */
threadgroup float buf[4];
const uint i = lane + 1;
if (i < 4 && lane >= 2) buf[i] = float((x[i * 2] >> 1) & 0xFu);
threadgroup_barrier(mem_flags::mem_threadgroup);
if (lane == 0) y[i] = static_cast<T>(simd_sum(buf[i]));
"""


def _one_place(bench, original: str, mutated: str) -> None:
    diffs = bench.differing_tokens(original, mutated)
    assert len(diffs) == 1, diffs


def test_every_kind_on_a_tiny_source_each_in_one_place():
    bench = _bench()
    edits = bench.mutants_of(TINY)
    assert {e.kind for e in edits} == set(bench.KINDS)
    mutated = [e.apply(TINY) for e in edits]
    assert len(set(mutated)) == len(mutated) and TINY not in mutated
    for e, text in zip(edits, mutated):
        _one_place(bench, TINY, text)
        # Only code changes: never the comment lines or the #include line.
        assert text.splitlines()[:4] == TINY.splitlines()[:4], e
    whats = {(e.kind, e.old.strip(), e.new.strip()) for e in edits}
    for want in [("operator", "+", "-"), ("operator", "<", "<="), ("operator", ">=", ">"),
                 ("operator", "&&", "||"), ("operator", ">>", "<<"), ("operator", "&", "|"),
                 ("operator", "==", "!="), ("operator", "*", "/"),
                 ("constant", "0xFu", "0x7u"), ("constant", "0xFu", "0x10u"),
                 ("constant", "4", "5"), ("constant", "4", "0"), ("constant", "0", "1"),
                 ("index", "]", "+ 1]"), ("simd_sum", "simd_sum", "")]:
        assert want in whats, want
    barrier = [e for e in edits if e.kind == "barrier"]
    assert len(barrier) == 1 and barrier[0].old.strip() == \
        "threadgroup_barrier(mem_flags::mem_threadgroup);"
    # static_cast<T>: template brackets are not comparisons.
    assert not any(e.kind == "operator" and e.old in "<>" and
                   TINY[e.offset - 1] == "t" for e in edits)
    # buf[4] declares storage: no `+ 1` index there (its 4 is still a constant).
    decl = TINY.index("buf[4]") + 3
    assert not any(e.kind == "index" and e.offset == decl + 1 for e in edits)


def test_unary_operators_and_pointers_are_not_swapped():
    bench = _bench()
    src = "simdgroup_load(b, &wt[0][0], 8);\nv = (const device half*)x + k;\nz = -q;\n"
    ops = [(e.old, e.new) for e in bench.mutants_of(src) if e.kind == "operator"]
    assert ops == [("+", "-")]


@pytest.fixture(scope="module")
def real_mutants():
    bench = _bench()
    sources = bench.metal_sources(ROOT)
    return bench, sources, bench.build_mutants(ROOT, sources)


def test_the_real_sources_are_the_four_distinct_metal_texts(real_mutants):
    _, sources, mutants = real_mutants
    keys = {s.key: set(s.variants) for s in sources}
    assert keys == {
        "_metal_common.DEQUANT_HEADER": {"scalar_kmajor", "narrow_output", "fp16_matrix",
                                         "verify_m4", "verify_m16", "w4a32"},
        "_metal_common.SPLIT_K_BODY": {"narrow_output", "verify_m16"},
        "scalar_kmajor.METAL_SOURCE": {"scalar_kmajor", "verify_m4", "w4a32"},
        "fp16_matrix.METAL_SOURCE": {"fp16_matrix"},
    }
    kinds = {(m["source"], m["kind"]) for m in mutants}
    for s in keys:
        assert {(s, k) for k in ("operator", "index", "constant")} <= kinds
    assert ("_metal_common.SPLIT_K_BODY", "barrier") in kinds
    assert ("fp16_matrix.METAL_SOURCE", "barrier") in kinds
    assert ("scalar_kmajor.METAL_SOURCE", "simd_sum") in kinds


def test_every_real_mutant_changes_one_place_inside_its_literal(real_mutants):
    bench, sources, mutants = real_mutants
    by_key = {s.key: s for s in sources}
    ids = [m["id"] for m in mutants]
    assert len(set(ids)) == len(ids)
    assert ids == [m["id"] for m in bench.build_mutants(ROOT, sources)]  # stable
    for m in mutants:
        src = by_key[m["source"]]
        original = (ROOT / src.path).read_text(encoding="utf-8")
        new = m["_file"]
        end = src.body_offset + len(src.text)
        tail = len(original) - end
        assert new[:src.body_offset] == original[:src.body_offset], m["id"]
        assert new[len(new) - tail:] == original[end:], m["id"]
        _one_place(bench, src.text, new[src.body_offset:len(new) - tail])
        assert m["diff"].startswith(f"--- a/{src.path}\n+++ b/{src.path}\n"), m["id"]


# -- the Metal sources under clang's sanitizers ------------------------------------------------

# Trap mode: no runtime library, a failed check is a trap the executor reports by thread.
# strict-flex-arrays=3: a zero-length array is not a flexible array member, so it is checked too.
SANITIZERS = ["-fsanitize=array-bounds,shift-exponent",
              "-fsanitize-trap=array-bounds,shift-exponent", "-fstrict-flex-arrays=3"]
# (variant, M, K, N, dtype, params): every tiling the selection table selects for an Apple GPU
# (kernels/selection_table.json), at small K and N.
SANITIZED = [
    ("scalar_kmajor", 8, 1024, 32, "bfloat16", {"n_tile": 8}),
    ("scalar_kmajor", 8, 1024, 32, "float16", {"n_tile": 4}),
    ("verify_m4", 4, 1024, 32, "bfloat16", {"n_tile": 16}),
    ("w4a32", 8, 1024, 32, "bfloat16", {"n_tile": 8}),
    ("narrow_output", 8, 1024, 8, "bfloat16", {"n_tile": 2, "k_groups": 4}),
    ("narrow_output", 8, 1024, 8, "float16", {"n_tile": 1, "k_groups": 4}),
    ("verify_m16", 16, 1024, 32, "bfloat16", {"n_tile": 4, "k_groups": 2}),
    ("verify_m16", 16, 256, 32, "float16", {"n_tile": 4, "k_groups": 1}),
    ("fp16_matrix", 8, 1024, 32, "float16", {"n_tile": 8}),
]
# A fresh interpreter: the toolchain caches builds (and its precompiled preamble) per process.
_SANITIZED_RUN = """
import json, sys
import mlx.core as mx
from kernels.metal_emu import toolchain
toolchain.KERNEL_FLAGS = [*toolchain.KERNEL_FLAGS, *json.loads(sys.argv[1])]
from devices.identity import current_device
from kernels import dispatch
from kernels.qweights import QWeights
device = current_device("applegpu_g14s")
for name, m, k, n, dtype, params in json.loads(sys.argv[2]):
    mx.random.seed(m + k + n)
    qw = QWeights.quantize(mx.random.normal((n, k)) * 0.05)
    x = mx.random.normal((m, k)).astype(getattr(mx, dtype))
    assert dispatch.implementation(name, device) == "metal-emulated"
    try:
        dispatch.run_variant(name, x, qw, params, device)  # held against the oracle
        print(json.dumps([name, m, dtype, params, ""]), flush=True)
    except Exception as e:
        print(json.dumps([name, m, dtype, params, f"{type(e).__name__}: {e}"]), flush=True)
"""


@pytest.fixture(scope="module")
def sanitized_runs():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, "-c", _SANITIZED_RUN, json.dumps(SANITIZERS),
                        json.dumps(SANITIZED)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return {(v, m, dt, json.dumps(p)): err for v, m, dt, p, err in
            (json.loads(line) for line in r.stdout.splitlines() if line.startswith("["))}


@pytest.mark.parametrize("case", SANITIZED, ids=lambda c: f"{c[0]}-m{c[1]}-{c[4]}-" + "-".join(
    f"{k}{v}" for k, v in c[5].items()))
def test_metal_source_is_clean_under_sanitizers(case, sanitized_runs):
    name, m, _k, _n, dtype, params = case
    err = sanitized_runs[(name, m, dtype, json.dumps(params))]
    assert not err, err
