"""The CUDA launch path's per-call cost: nothing is built, cast or traced again after the first
launch of a shape on a weights (issue 14, Deliver 2).

On a host without MLX's CUDA backend ``mx.fast.cuda_kernel`` raises as soon as it is called, so
the CPU tests put a stand-in kernel factory in its place: a real MLX function (the stock QMM in
float32) that counts how often the factory and the kernel are called. Everything else is the
real path: ``cuda.launch``, its per-weights memo, the ``mx.compile`` replay of the launch with
the weights captured, the scales conversion. The same checks run against the real factory and
kernel on an NVIDIA GPU (``test_real_cuda_launch_*``, skipped elsewhere; run on the H200 by
scripts/h200.sh). Host TIME is not asserted here (a timed assertion on a shared host is noise):
the bench measures it, paired against stock (bench/cuda_verify.py, scripts/cuda_host_cost.py).
"""

from __future__ import annotations

import io
import re

import mlx.core as mx
import pytest

from kernels import cuda
from kernels.qweights import QWeights

K, N, GS = 512, 256, 64
NAME = "mma_weights_a"
PARAMS = {"n_tile": 32, "k_groups": 1, "unroll": 1, "prefetch": 0}
HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()


class AstypeSpy:
    """Counts ``mx.array.astype`` calls while installed (a wrapper around the real method)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = mx.array.astype

        def counted(a, *args, **kwargs):
            self.calls += 1
            return real(a, *args, **kwargs)
        monkeypatch.setattr(mx.array, "astype", counted)


@pytest.fixture
def standin(monkeypatch):
    """Replace MLX's CUDA kernel factory by one that builds a real MLX computation; it keeps
    the headers it was given and the dtypes each kernel call was given."""
    counts = {"factory": 0, "kernel": 0, "headers": [], "inputs": [], "templates": []}

    def factory(name, input_names, output_names, source, header=""):
        counts["factory"] += 1
        counts["headers"].append(header)

        def kernel(*, inputs, template, grid, threadgroup, output_shapes, output_dtypes):
            counts["kernel"] += 1
            counts["inputs"].append([a.dtype for a in inputs])
            counts["templates"].append(dict(template))
            x, w, s, b = inputs
            f32 = mx.float32
            y = mx.quantized_matmul(mx.array.astype(x, f32), w, mx.array.astype(s, f32),
                                    mx.array.astype(b, f32), transpose=True,
                                    group_size=dict(template)["GS"], bits=4)
            return [mx.array.astype(y, output_dtypes[0])]
        return kernel

    monkeypatch.setattr(mx.fast, "cuda_kernel", factory)
    cuda.clear_caches()
    yield counts
    cuda.clear_caches()


def _weights(dtype=mx.bfloat16, seed=0):
    """Freshly quantized, so still lazy: as weights are until something evaluates them."""
    w = mx.random.normal((N, K), key=mx.random.key(seed)) / K ** 0.5
    return QWeights.quantize(w, GS, 4, dtype)


def _x(m=8, dtype=mx.bfloat16, seed=1):
    return (mx.random.normal((m, K), key=mx.random.key(seed))).astype(dtype)


def _entries(qw: QWeights) -> list:
    """The launches a weights keeps (the memo's short and full keys share them)."""
    return list({id(e): e for e in qw.kernel_memo.values()}.values())


def _graph_ops(y: mx.array) -> list[str]:
    """The operations of y's graph, as MLX's DOT export names them."""
    buf = io.StringIO()
    mx.export_to_dot(buf, y)
    return sorted(re.findall(r'label ="([^"]+)"', buf.getvalue()))


def test_launch_builds_and_traces_once_and_casts_nothing(standin, monkeypatch):
    qw, x = _weights(), _x()
    ref = mx.quantized_matmul(x.astype(mx.float32), qw.wq, qw.scales.astype(mx.float32),
                              qw.biases.astype(mx.float32), transpose=True, group_size=GS)
    y0 = cuda.launch(NAME, x, qw, PARAMS)
    assert mx.allclose(y0.astype(mx.float32), ref, atol=2e-2).item()
    spy = AstypeSpy(monkeypatch)
    for _ in range(50):  # the runtime's pattern: a fresh params dict per dispatch
        y = cuda.launch(NAME, x, qw, dict(PARAMS))
    mx.eval(y)
    (lx,) = cuda._LAUNCHERS.values()
    assert (standin["factory"], standin["kernel"], lx.traces) == (1, 1, 1)
    assert spy.calls == 0, "astype called per launch"
    assert len(_entries(qw)) == 1  # found, not re-made, per call
    assert mx.array_equal(y, y0).item()  # the replay computes what the traced call did


def test_each_new_shape_or_weights_costs_one_trace_not_one_per_call(standin):
    qa, qb = _weights(seed=0), _weights(seed=1)
    for m in (4, 8, 16):
        for qw in (qa, qb):
            for _ in range(5):
                mx.eval(cuda.launch(NAME, _x(m), qw, PARAMS))
    assert standin["factory"] == 1  # one kernel object per variant (per header)
    traces = {key[1]: lx.traces for key, lx in cuda._LAUNCHERS.items()}
    assert traces == {4: 2, 8: 2, 16: 2}  # one Launcher per M; one trace per weights
    # one captured launch per weights serves every M (MLX matches the shape, in C++)
    assert len(_entries(qa)) == len(_entries(qb)) == 1
    bounded = {**PARAMS, "min_blocks": 2}  # launch bounds: another header, another kernel
    for m in (4, 8):
        mx.eval(cuda.launch(NAME, _x(m), qa, bounded))
    assert standin["factory"] == 2
    assert "__launch_bounds__(32, 2)" in standin["headers"][1]
    assert standin["headers"][1] == cuda.kernel_header(
        NAME, cuda.launch_config(NAME, 8, K, N, GS, "bfloat16", bounded))


def test_scales_in_another_dtype_are_converted_once_per_weights(standin, monkeypatch):
    """mma_weights_a reads scales as 16-bit words of the activation type: bf16-stored scales
    under fp16 activations are converted the first time, kept with the weights, never again."""
    qw, x = _weights(mx.bfloat16), _x(dtype=mx.float16)
    spy = AstypeSpy(monkeypatch)
    first = cuda.launch(NAME, x, qw, PARAMS)
    after_first = spy.calls
    for _ in range(20):
        y = cuda.launch(NAME, x, qw, PARAMS)
    assert spy.calls == after_first
    assert standin["inputs"] == [[mx.float16, mx.uint32, mx.float16, mx.float16]]
    assert qw.in_dtype(mx.float16) is qw.in_dtype(mx.float16)
    assert qw.in_dtype(mx.float16).scales.dtype == mx.float16
    assert qw.in_dtype(mx.bfloat16) is qw
    assert mx.array_equal(y, first).item()
    # a variant that reads scales in their own dtype gets them as stored
    qw2 = _weights(mx.bfloat16, seed=2)
    cuda.launch("scalar_kmajor", _x(dtype=mx.float16), qw2, {"n_tile": 8, "k_groups": 1})
    assert not qw2._as
    assert standin["inputs"][-1] == [mx.float16, mx.uint32, mx.bfloat16, mx.bfloat16]


def test_w4a32_casts_x_to_float32_once_into_the_graph(standin, monkeypatch):
    """W4A32 reads x in float32: the cast is recorded by the trace, not made per launch."""
    qw, x = _weights(), _x()
    first = cuda.launch("w4a32", x, qw, {"k_groups": 1})
    spy = AstypeSpy(monkeypatch)
    for _ in range(20):
        y = cuda.launch("w4a32", x, qw, {"k_groups": 1})
    assert spy.calls == 0, "astype called per launch"
    assert standin["inputs"] == [[mx.float32, mx.uint32, mx.bfloat16, mx.bfloat16]]
    assert y.dtype == mx.float32 and mx.array_equal(y, first).item()


def test_params_changed_in_place_are_not_served_a_stale_launch(standin):
    qw, x = _weights(), _x()
    p = dict(PARAMS)
    mx.eval(cuda.launch(NAME, x, qw, p))
    p["n_tile"] = 64
    mx.eval(cuda.launch(NAME, x, qw, p))
    tiles = sorted(dict(key[6])["n_tile"] for key in cuda._LAUNCHERS)
    assert tiles == [32, 64]
    # going back and forth finds each params' own launch again: no new trace
    for _ in range(3):
        for params in (PARAMS, {**PARAMS, "n_tile": 64}):
            mx.eval(cuda.launch(NAME, x, qw, params))
    assert [lx.traces for lx in cuda._LAUNCHERS.values()] == [1, 1]
    assert len(_entries(qw)) == 2


def test_the_tables_read_only_params_are_kept_as_they_are_and_a_dict_is_copied(standin):
    """The selection table hands out one read-only mapping per entry key: the memo keeps that
    object itself, so a launch knows it by identity instead of comparing its items; a plain
    dict (which may change in place) is copied, and an equal copy of the mapping still hits."""
    from types import MappingProxyType

    from devices.identity import DeviceIdentity
    from kernels.selection import select
    dev = DeviceIdentity(arch="sm_90", generation=None, size=None, chip="NVIDIA H200",
                         backend="cuda", mlx_version=mx.__version__, emulated=False)
    a = select(dev, "bfloat16", 8, 5120, 17408, 4, 64)
    b = select(dev, "bfloat16", 8, 5120, 17408, 4, 64)
    assert a.variant == NAME and isinstance(a.params, MappingProxyType) and a.params is b.params
    frozen = MappingProxyType(dict(PARAMS))
    qw, x = _weights(), _x()
    mx.eval(cuda.launch(NAME, x, qw, frozen))
    assert qw.kernel_memo[NAME][0] is frozen
    mx.eval(cuda.launch(NAME, x, qw, dict(PARAMS)))  # equal: served the same entry
    plain = dict(PARAMS)
    qw2 = _weights(seed=5)
    mx.eval(cuda.launch(NAME, x, qw2, plain))
    kept = qw2.kernel_memo[NAME][0]
    assert kept == plain and kept is not plain
    assert [lx.traces for lx in cuda._LAUNCHERS.values()] == [2]  # one per weights


def test_another_dtype_at_the_same_shape_is_not_served_the_first_dtypes_launch(standin):
    """The memo's short key holds the variant, not x's dtype: the entry's dtype is compared."""
    qw, first = _weights(), {}
    for _ in range(3):
        for dtype in (mx.bfloat16, mx.float16):
            y = cuda.launch(NAME, _x(dtype=dtype), qw, PARAMS)
            assert y.dtype == dtype
            assert mx.array_equal(y, first.setdefault(dtype, y)).item()
    assert sorted(str(key[5]) for key in cuda._LAUNCHERS) == ["mlx.core.bfloat16",
                                                               "mlx.core.float16"]
    assert [lx.traces for lx in cuda._LAUNCHERS.values()] == [1, 1]
    assert len(_entries(qw)) == 2


@pytest.mark.parametrize("params", [PARAMS, {**PARAMS, "denorm": 1}])
def test_a_launch_inside_a_callers_compile_matches_the_eager_one(standin, params):
    """A caller's ``mx.compile`` gets the kernel call traced into its own graph (MLX calls the
    captured function's Python body for tracer inputs): same result as eager, for each x.
    With ``denorm``, the first launch checks the captured weights' scales inside that trace."""
    x1, x2 = _x(seed=1), _x(seed=2)
    for eager_first in (True, False):
        qw = _weights()
        outer = mx.compile(lambda x, qw=qw: cuda.launch(NAME, x, qw, params) * 2)
        eager = []
        if eager_first:
            eager = [cuda.launch(NAME, x, qw, params) for x in (x1, x2)]
        nested = [outer(x) for x in (x1, x2)]
        if not eager_first:
            eager = [cuda.launch(NAME, x, qw, params) for x in (x1, x2)]
        for y, z in zip(eager, nested, strict=True):
            assert mx.array_equal(y * 2, z).item()
        assert not mx.array_equal(nested[0], nested[1]).item()  # x2 is not served x1's graph
        assert {t["DENORM"] for t in standin["templates"]} == {params.get("denorm", 0)}
        cuda.clear_caches()


def test_traced_weights_are_launched_but_not_kept(standin):
    """bench/cuda_verify's compiled path: weights that are the caller's tracers (a QWeights
    made inside its trace) cannot be captured; the launch is traced into the caller's graph."""
    qw, x1, x2 = _weights(), _x(seed=1), _x(seed=2)
    made = []

    def f(x, w, s, b):
        made.append(QWeights(w, s, b, GS, 4))
        return cuda.launch(NAME, x, made[-1], PARAMS)
    outer = mx.compile(f)
    for x in (x1, x2):
        y = outer(x, qw.wq, qw.scales, qw.biases)
        assert mx.array_equal(y, cuda.launch(NAME, x, qw, PARAMS)).item()
    assert len(made) == 1 and not made[0].kernel_memo


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("dtype", [mx.bfloat16, mx.float16])
def test_denorm_runs_only_on_weights_whose_scaled_scales_stay_finite(standin, dtype, mode):
    """``denorm`` multiplies each scale by 2^133 (bf16) or 2^20 (fp16; 2^24 at ``denorm`` 2)
    in the kernel, which overflows for a scale at or above 2^-5 (2^-4, 2^-8): such weights,
    and weights the launch cannot see (a caller's tracers) unless the caller vouches with
    their largest scale, get the plain path, whose output is the same bit for bit where both
    may run; the entry still keeps the caller's params, so later calls hit it."""
    params = {**PARAMS, "denorm": mode}
    limit = cuda.DENORM_SCALE_LIMIT[cuda.dtype_name(dtype), mode]
    w = _weights(dtype)
    small = QWeights(w.wq, w.scales * (0.5 * limit / cuda.scale_magnitude(w.scales)), w.biases,
                     GS, 4)
    one_big = small.scales.at[3, 1].add(1.5 * limit - small.scales[3, 1])  # one group
    big = QWeights(small.wq, one_big, small.biases, GS, 4)
    for qw, runs in ((small, True), (big, False)):
        start = standin["kernel"]
        for _ in range(3):
            mx.eval(cuda.launch(NAME, _x(dtype=dtype), qw, params))
        assert standin["kernel"] == start + 1  # traced once, then replayed
        assert standin["templates"][-1]["DENORM"] == (mode if runs else 0)
    exact = QWeights(small.wq, mx.full(small.scales.shape, limit, dtype), small.biases, GS, 4)
    mx.eval(cuda.launch(NAME, _x(dtype=dtype), exact, params))
    assert standin["templates"][-1]["DENORM"] == 0  # the limit itself overflows

    # a caller's tracers: only a caller that measured them says so, and its figure is checked
    for vouched, runs in ((None, False), (0.5 * limit, True), (limit, False)):
        def f(x, w, s, b, vouched=vouched):
            return cuda.launch(NAME, x, QWeights(w, s, b, GS, 4, vouched), params)
        mx.eval(mx.compile(f)(_x(dtype=dtype), small.wq, small.scales, small.biases))
        assert standin["templates"][-1]["DENORM"] == (mode if runs else 0)


def test_scale_magnitude_is_the_largest_and_not_finite_is_infinite():
    """What the limit is checked against: the largest |scale|, negative ones included, and
    infinity for a NaN or an infinite scale (which no limit admits)."""
    s = mx.array([[0.001, -0.02], [0.003, 0.0]], dtype=mx.float16)
    assert cuda.scale_magnitude(s) == pytest.approx(0.02, rel=1e-3)
    for bad in (float("nan"), float("inf")):
        assert cuda.scale_magnitude(s.at[0, 0].add(bad)) == float("inf")
    assert not cuda.denorm_fits(float("inf"), "bfloat16", 1)
    assert not cuda.denorm_fits(0.0, "bfloat16", 3)  # no such mode: no limit, never fits


def test_lazy_weights_are_evaluated_before_they_are_captured(standin):
    """A captured array still lazy would have its graph (the quantization, or the scales
    conversion) replayed on every launch; evaluated first, the replay holds only the kernel:
    the same operations as on weights evaluated beforehand in the activation dtype."""
    graphs = {}
    for dtype in (mx.bfloat16, mx.float16):  # fp16: scales converted from bf16 at first launch
        x = _x(dtype=dtype)
        mx.eval(x)
        ready = _weights(mx.bfloat16)
        mx.eval(ready.wq, ready.scales, ready.biases)
        for label, qw in (("ready", ready), ("lazy", _weights(mx.bfloat16))):
            cuda.launch(NAME, x, qw, PARAMS)
            graphs[label, dtype] = _graph_ops(cuda.launch(NAME, x, qw, PARAMS))
    assert all(g == graphs["ready", mx.bfloat16] for g in graphs.values()), graphs


def test_a_shape_that_cannot_tile_is_refused_before_anything_is_built(standin):
    qw = _weights()
    with pytest.raises(ValueError, match="does not tile"):
        cuda.launch(NAME, _x(), qw, {**PARAMS, "k_groups": 3})
    with pytest.raises(ValueError, match="K=256"):
        cuda.launch(NAME, mx.zeros((8, 256), dtype=mx.bfloat16), qw, PARAMS)
    assert standin["factory"] == 0 and not qw.kernel_memo


@pytest.mark.skipif(not HAS_CUDA, reason="needs MLX's CUDA backend (an NVIDIA GPU)")
def test_real_cuda_launch_builds_once_and_casts_nothing(monkeypatch):
    real = mx.fast.cuda_kernel
    built = []

    def counting(*args, **kwargs):
        built.append(kwargs.get("name"))
        return real(*args, **kwargs)
    monkeypatch.setattr(mx.fast, "cuda_kernel", counting)
    cuda.clear_caches()
    k, n = 5120, 17408
    w = mx.random.normal((n, k), key=mx.random.key(0)) / k ** 0.5
    qw = QWeights.quantize(w, GS, 4, mx.bfloat16)
    x = (mx.random.normal((8, k), key=mx.random.key(1)) / k ** 0.25).astype(mx.bfloat16)
    params = {"n_tile": 32, "k_groups": 1, "unroll": 1, "prefetch": 1}
    y0 = cuda.launch(NAME, x, qw, params)
    stock = mx.quantized_matmul(x, qw.wq, qw.scales, qw.biases, transpose=True, group_size=GS)
    rel = (mx.abs(y0.astype(mx.float32) - stock.astype(mx.float32)).max()
           / mx.abs(stock.astype(mx.float32)).max()).item()
    assert rel < 1e-2
    spy = AstypeSpy(monkeypatch)
    outs = [cuda.launch(NAME, x, qw, dict(params)) for _ in range(100)]
    mx.eval(outs)
    (lx,) = cuda._LAUNCHERS.values()
    assert (len(built), lx.traces, spy.calls) == (1, 1, 0)
    assert all(mx.array_equal(y, y0).item() for y in outs[:3])
    monkeypatch.undo()
    cuda.clear_caches()


def test_one_captured_launch_serves_every_m_and_refuses_another_k(standin):
    """The weights' captured launch is one compiled function for every M (MLX traces it again
    for a new shape and picks that shape's launcher there): each M computes what a launch made
    fresh for it computes, and an x of another K, which now reaches the captured function
    itself, is refused with the same message, leaving the entry as it was."""
    qw = _weights()
    got = {m: cuda.launch(NAME, _x(m, seed=m), qw, PARAMS) for m in (8, 1, 16, 8)}
    for m, y in got.items():
        cuda.clear_caches()
        fresh = _weights()  # the same weights (same seed), nothing kept yet
        assert y.shape == (m, N) and mx.array_equal(y, cuda.launch(NAME, _x(m, seed=m), fresh,
                                                                   PARAMS)).item()
    (entry,) = _entries(qw)
    with pytest.raises(ValueError, match="x has K=256, the weights K=512"):
        mx.eval(cuda.launch(NAME, mx.zeros((8, 256), mx.bfloat16), qw, PARAMS))
    with pytest.raises(ValueError, match=r"x must be \(M, K\)"):
        mx.eval(cuda.launch(NAME, mx.zeros((2, 8, K), mx.bfloat16), qw, PARAMS))
    assert _entries(qw) == [entry]
    assert mx.array_equal(cuda.launch(NAME, _x(16, seed=16), qw, PARAMS), got[16]).item()


def test_the_captured_launch_does_not_keep_its_weights_alive(standin):
    """The weights' memo holds the captured launch, so the launch must not hold the weights
    object: a cycle would keep the weights (and their GPU memory) until a collection runs."""
    import gc
    import weakref
    qw = _weights()
    mx.eval(cuda.launch(NAME, _x(), qw, PARAMS))
    ref = weakref.ref(qw)
    gc.disable()
    try:
        del qw
        assert ref() is None
    finally:
        gc.enable()


def test_the_launch_python_bench_runs_and_its_committed_table_is_its_json():
    """bench/launch_python_cost.py (the launch's Python over its replay, where no GPU is):
    it runs with the real launch and memo, leaves no stand-in kernel behind, and its committed
    table is what its committed JSON renders. Its times are not asserted (a shared host)."""
    import json
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "bench"))
    import launch_python_cost as lpc
    real = mx.fast.cuda_kernel
    res = lpc.measure(reps=1, n=20)
    assert set(res["paths"]) == {"replay", "launch", "launch_shape_keyed", "stock"}
    assert mx.fast.cuda_kernel is real and not cuda._LAUNCHERS
    out = root / "bench" / "results" / "launch_python_cost"
    committed = json.loads(out.with_suffix(".json").read_text())
    assert lpc.render(committed) == out.with_suffix(".md").read_text()
