"""The emulated Apple GPU: MLX's exact source, compiled by real clang, run by the SIMT executor.

Nothing is mocked: each kernel here is an ``mx.fast.metal_kernel`` whose source MLX generates,
prefixed with MLX's own utils preamble, compiled against the shim and executed.
"""

from __future__ import annotations

import types

import mlx.core as mx
import numpy as np
import pytest

from devices.identity import current_device
from kernels import dispatch
from kernels.metal_emu import executor, mlx_metal, oracle, source, toolchain
from kernels.metal_emu import run as emu
from kernels.metal_emu import variant as emulated
from kernels.qweights import QWeights
from kernels.recorder import IMPL_METAL_EMULATED, IMPL_PORTABLE, recording
from kernels.variants import VARIANTS


def launch(src: str, *, n: int = 32, threads: int = 32, x=None, name: str = "probe",
           out: int | None = None) -> np.ndarray:
    x = mx.arange(n, dtype=mx.float32) if x is None else x
    k = mx.fast.metal_kernel(name=name, input_names=["x"], output_names=["y"], source=src)
    (y,) = emu.run(k, name, ["x"], ["y"], [x], template=[("T", mx.float32)],
                   grid=(threads, 1, 1), threadgroup=(min(threads, 64), 1, 1),
                   output_shapes=[(out or threads,)], output_dtypes=[mx.float32])
    return np.array(y)


# -- the exact source ---------------------------------------------------------------------------

def test_source_is_mlx_generated_with_mlx_preamble():
    v = VARIANTS["scalar_kmajor"]
    qw = QWeights.quantize(mx.ones((16, 256)))
    kernel = emulated.metal._build(v.NAME, v.METAL_SOURCE, v.HEADER)
    inputs = [mx.ones((8, 256), dtype=mx.bfloat16), qw.wq, qw.scales, qw.biases]
    tmpl = [("T", mx.bfloat16), ("M_ROWS", 8), ("N_TILE", 8), ("K_GROUPS", 1), ("K", 256),
            ("N", 16), ("GS", 64), ("LAYOUT_CONTIGUOUS", True)]
    gen = source.generated_source(kernel, inputs, template=tmpl, grid=(64, 1, 1),
                                  threadgroup=(32, 1, 1), output_shapes=[(8, 16)],
                                  output_dtypes=[mx.bfloat16])
    # MLX's signature: the header first, then the template, device buffers, attributes found
    # in the source, the body, and the explicit instantiation with the template arguments.
    assert gen.startswith(v.HEADER)
    assert "template <typename T, int M_ROWS, int N_TILE, int K_GROUPS, int K, int N, int GS, " \
           "bool LAYOUT_CONTIGUOUS>\n[[kernel]] void custom_kernel_dflash2_scalar_kmajor_" in gen
    assert "  const device bfloat16_t* x [[buffer(0)]],\n" in gen
    assert "  uint thread_index_in_simdgroup [[thread_index_in_simdgroup]]" in gen
    assert v.METAL_SOURCE in gen
    assert "<bfloat16_t, 8, 8, 1, 256, 16, 64, 1>;" in gen
    full = source.full_source(gen)
    assert full.startswith(mlx_metal.utils_preamble()) and full.endswith(gen)
    assert "typedef bfloat bfloat16_t;" in mlx_metal.utils_preamble()


def test_small_inputs_become_constant_buffers_as_in_mlx():
    k = mx.fast.metal_kernel(name="small", input_names=["x"], output_names=["y"],
                             source="y[0] = x[0];")
    gen = source.generated_source(k, [mx.zeros((4,))], template=[("T", mx.float32)],
                                  grid=(1, 1, 1), threadgroup=(1, 1, 1), output_shapes=[(1,)],
                                  output_dtypes=[mx.float32])
    assert "const constant float* x [[buffer(0)]]" in gen
    assert launch("y[0] = x[3] + 1.0f;", n=4, threads=1, out=1, name="small_run")[0] == 4.0


# -- faults are named ----------------------------------------------------------------------------

@pytest.mark.parametrize(("src", "expected"), [
    ("uint i = thread_position_in_grid.x; y[i] = x[i + 1];",
     "probe: out-of-bounds read of buffer 'x' at element index 32 (valid 0..31)"),
    ("uint i = thread_position_in_grid.x; y[i] = x[i + 100000000u];",
     "out-of-bounds read of buffer 'x' at element index 100000031 (valid 0..31) by thread 31"),
    ("uint i = thread_position_in_grid.x; y[i + 1] = x[i];",
     "out-of-bounds write of buffer 'y' at element index 32 (valid 0..31)"),
    ("uint i = thread_position_in_grid.x; if (i != 5) y[i] = x[i];",
     "probe: output 'y' has 1 element(s) never written (first at index 5)"),
    (("uint i = thread_position_in_grid.x;\n"
     "if (i < 16) threadgroup_barrier(mem_flags::mem_threadgroup);\n"
     "else simdgroup_barrier(mem_flags::mem_none);\ny[i] = x[i];"),
     "deadlock in threadgroup (0,0,0): 16 threads at threadgroup_barrier, 16 at simdgroup_barrier"),
])
def test_faults_name_kernel_buffer_and_index(src, expected):
    with pytest.raises(executor.EmulatorError) as e:
        launch(src)
    assert expected in str(e.value)
    assert "\n" not in str(e.value)


def test_endless_loop_stops_at_the_time_limit(monkeypatch):
    monkeypatch.setenv(executor.ENV_TIME_LIMIT, "1")
    # (A loop with no way out at all is undefined behaviour in C++, and in MSL: clang may
    # delete it. This one ends, after hours.)
    src = ("uint i = thread_position_in_grid.x; float a = x[i];\n"
           "for (uint j = 0; j < 4000000000u; ++j) a = a * 1.0000001f + x[j % 32u];\n"
           "y[i] = a;")
    with pytest.raises(executor.EmulatorError, match="time limit exceeded"):
        launch(src, name="spin")


def test_a_thread_or_threadgroup_array_overrun_is_caught():
    src = """
      threadgroup float shared[32];
      float local[4];
      uint l = thread_index_in_simdgroup;
      for (uint j = 0; j < 4; ++j) local[j] = x[l] + float(j);
      shared[l] = local[{i}];
      threadgroup_barrier(mem_flags::mem_threadgroup);
      y[l] = shared[{s}];
    """
    assert launch(src.replace("{i}", "l % 4").replace("{s}", "31 - l"), name="arr_ok")[0] == 34
    with pytest.raises(executor.EmulatorError, match="an index past the end of a thread"):
        launch(src.replace("{i}", "l % 5").replace("{s}", "31 - l"), name="arr_local")
    with pytest.raises(executor.EmulatorError, match="an index past the end of a thread"):
        launch(src.replace("{i}", "l % 4").replace("{s}", "32 - l"), name="arr_shared")


def test_a_trap_is_reported_not_fatal():
    with pytest.raises(executor.EmulatorError, match="trap in thread"):
        launch("if (x[0] == 0.0f) __builtin_trap(); y[thread_position_in_grid.x] = 1.0f;",
               name="trap")


def test_buffers_are_usable_after_a_fault():
    with pytest.raises(executor.EmulatorError):
        launch("y[thread_position_in_grid.x] = x[thread_position_in_grid.x + 64];", name="f1")
    assert launch("y[thread_position_in_grid.x] = 2.0f * x[thread_position_in_grid.x];",
                  name="f2")[5] == 10.0


# -- SIMD groups, threadgroups, barriers ----------------------------------------------------------

def test_simd_functions_as_on_hardware():
    src = """
      uint l = thread_index_in_simdgroup;
      float v = float(l);
      float s = simd_sum(v);
      float d = simd_shuffle_down(v, ushort(3));
      float u = simd_shuffle_up(v, ushort(1));
      float xr = simd_shuffle_xor(v, ushort(5));
      float b = simd_broadcast(v, ushort(7));
      y[l * 5 + 0] = s; y[l * 5 + 1] = d; y[l * 5 + 2] = u; y[l * 5 + 3] = xr;
      y[l * 5 + 4] = b;
    """
    y = launch(src, out=160, name="simd").reshape(32, 5)
    lanes = np.arange(32)
    assert (y[:, 0] == 496).all()
    assert (y[:, 1] == np.where(lanes + 3 < 32, lanes + 3, lanes)).all()  # top lanes keep theirs
    assert (y[:, 2] == np.where(lanes >= 1, lanes - 1, lanes)).all()
    assert (y[:, 3] == lanes ^ 5).all()
    assert (y[:, 4] == 7).all()


def test_divergent_collectives_form_their_own_groups():
    src = """
      uint l = thread_index_in_simdgroup;
      float s = 0.0f;
      if (l < 12) s = simd_sum(1.0f); else s = simd_sum(2.0f);
      y[l] = s;
    """
    y = launch(src, name="diverge")
    assert (y[:12] == 12).all() and (y[12:] == 40).all()


def test_a_collective_after_a_divergent_one_runs_with_every_lane():
    src = """
      uint l = thread_index_in_simdgroup;
      float s = 0.0f;
      if (l % 2 == 1) s = simd_sum(1.0f);
      float q = simd_sum(2.0f);
      y[l] = s + 100.0f * q;
    """
    y = launch(src, name="reconverge")
    assert (y[1::2] == 16 + 6400).all() and (y[0::2] == 6400).all()


def test_collectives_in_unswitched_loops_stay_together():
    # clang unswitches this loop on `l == 0`: the executor must still group by source call.
    src = """
      uint l = thread_index_in_simdgroup;
      for (uint m = 0; m < 4; ++m) {
        const float v = simd_sum(float(l) * float(m + 1));
        if (l == 0) y[m] = v;
        if (l == 1) y[4 + m] = v;
      }
    """
    y = launch(src, out=8, name="unswitch")
    assert y.tolist() == [496, 992, 1488, 1984] * 2


def test_threadgroup_memory_is_shared_and_barriers_order_it():
    body = """
      threadgroup float shared[64];
      uint t = thread_index_in_threadgroup;
      shared[t] = x[t];
      {barrier}
      y[t] = shared[63 - t];
    """
    ok = launch(body.replace("{barrier}", "threadgroup_barrier(mem_flags::mem_threadgroup);"),
                n=64, threads=64, name="tg_ok")
    assert (ok == np.arange(64)[::-1]).all()
    # Without the barrier, a thread reads memory another simdgroup has not written yet: on
    # hardware a race, here deterministically garbage (NaN), so the result cannot pass.
    racy = launch(body.replace("{barrier}", ""), n=64, threads=64, name="tg_racy")
    assert np.isnan(racy).any()


def test_simdgroup_matrix_multiply_accumulate():
    src = """
      uint l = thread_index_in_simdgroup;
      threadgroup float a[64];
      threadgroup float b[64];
      for (uint i = l; i < 64; i += 32) { a[i] = x[i]; b[i] = (i % 9 == 0) ? 1.0f : 0.0f; }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      simdgroup_matrix<float, 8, 8> ma, mb;
      simdgroup_matrix<float, 8, 8> acc = make_filled_simdgroup_matrix<float, 8, 8>(1.0f);
      simdgroup_load(ma, &a[0], 8);
      simdgroup_load(mb, &b[0], 8);
      simdgroup_multiply_accumulate(acc, ma, mb, acc);
      simdgroup_store(acc, y, 8);
    """
    y = launch(src, n=64, out=64, name="mma")
    assert (y == np.arange(64) + 1).all()  # A @ I + 1


# -- compiling ----------------------------------------------------------------------------------

def test_compile_error_carries_clang_message():
    with pytest.raises(toolchain.CompileError) as e:
        launch("y[0] = undeclared_thing;", name="broken")
    assert "broken does not compile" in str(e.value)
    assert "use of undeclared identifier 'undeclared_thing'" in str(e.value)


def test_second_build_compiles_nothing(monkeypatch):
    src = "y[thread_position_in_grid.x] = x[thread_position_in_grid.x] + 7.0f;"
    launch(src, name="cached")
    emu._prepared.cache_clear()
    calls = []
    monkeypatch.setattr(toolchain, "_run", lambda *a: calls.append(a))
    assert launch(src, name="cached")[2] == 9.0
    assert calls == []


# -- variants against the oracle ------------------------------------------------------------------

G13 = current_device("applegpu_g13s")
G14 = current_device("applegpu_g14s")


def _case(m: int, k: int, n: int, dtype, scales_dtype=mx.bfloat16, seed: int = 3):
    mx.random.seed(seed)
    qw = QWeights.quantize(mx.random.normal((n, k)) * 0.05, dtype=scales_dtype)
    return mx.random.normal((m, k)).astype(dtype), qw


@pytest.mark.parametrize(("name", "m", "dtype", "params"), [
    ("scalar_kmajor", 8, mx.bfloat16, {"n_tile": 8}),
    ("scalar_kmajor", 8, mx.float16, {"n_tile": 4}),
    ("verify_m4", 4, mx.bfloat16, {"n_tile": 16}),
    ("verify_m16", 16, mx.float16, {"n_tile": 4, "k_groups": 2}),
    ("narrow_output", 8, mx.bfloat16, {"n_tile": 2, "k_groups": 4}),
    ("fp16_matrix", 8, mx.float16, {}),
    ("w4a32", 8, mx.bfloat16, {"n_tile": 8}),
])
def test_each_variant_matches_its_portable_form(name, m, dtype, params):
    v = VARIANTS[name]
    x, qw = _case(m, 1024, 32, dtype)
    y = emulated.launch(v, x, qw, params)
    ref = v.portable(x, qw, {**v.DEFAULTS, **params})
    bound = getattr(v, "ORACLE_ULPS", oracle.DEFAULT_BOUND)
    assert oracle.check(name, y, ref, x, qw, dispatch.dtype_name(y.dtype), bound) <= bound
    if y.dtype != mx.float32:  # one rounding of identical float32 sums: bit for bit
        assert mx.array_equal(y, ref).item()


def test_bf16_scales_under_fp16_activations_are_read_as_stored():
    v = VARIANTS["scalar_kmajor"]
    x, qw = _case(8, 512, 16, mx.float16, scales_dtype=mx.bfloat16)
    assert qw.scales.dtype == mx.bfloat16
    y = emulated.launch(v, x, qw, {"n_tile": 8})
    assert mx.array_equal(y, v.portable(x, qw, {"n_tile": 8})).item()


def _mutant(name: str, old: str, new: str):
    v = VARIANTS[name]
    assert v.METAL_SOURCE.count(old) >= 1
    attrs = {a: getattr(v, a) for a in dir(v) if not a.startswith("__")}
    return types.SimpleNamespace(**{**attrs, "METAL_SOURCE": v.METAL_SOURCE.replace(old, new, 1)})


def test_an_index_mutant_is_caught_and_named(monkeypatch):
    x, qw = _case(8, 1024, 32, mx.bfloat16)
    mutant = _mutant("scalar_kmajor", "xv[m][j] = float(x[m * K + k + j]);",
                     "xv[m][j] = float(x[m * K + k + j + 1]);")
    monkeypatch.setitem(VARIANTS, "scalar_kmajor", mutant)
    with pytest.raises((oracle.KernelMismatch, executor.EmulatorError)) as e:
        dispatch.run_variant("scalar_kmajor", x, qw, {"n_tile": 8}, G13)
    assert "scalar_kmajor" in str(e.value)


def test_a_value_mutant_is_a_named_mismatch(monkeypatch):
    x, qw = _case(8, 1024, 32, mx.bfloat16)
    mutant = _mutant("scalar_kmajor", "acc[m][t] = 0.0f;", "acc[m][t] = 1.0f;")
    monkeypatch.setitem(VARIANTS, "scalar_kmajor", mutant)
    with pytest.raises(oracle.KernelMismatch, match=r"scalar_kmajor bfloat16 \(8, 1024\) x "
                       r"\(1024, 32\): metal-emulated differs from its portable form at y\["):
        dispatch.run_variant("scalar_kmajor", x, qw, {"n_tile": 8}, G13)


def test_dispatch_records_the_implementation(monkeypatch):
    x, qw = _case(8, 256, 256, mx.bfloat16)
    with recording() as seen:
        dispatch.quantized_matmul(x, qw, G14, op="tiny_attn")
    assert [(s.variant, s.impl) for s in seen] == [("scalar_kmajor", IMPL_METAL_EMULATED)]
    monkeypatch.setenv(dispatch.ENV_EMULATE_METAL, "0")
    with recording() as seen:
        dispatch.quantized_matmul(x, qw, G14, op="tiny_attn")
    assert [(s.variant, s.impl) for s in seen] == [("scalar_kmajor", IMPL_PORTABLE)]
