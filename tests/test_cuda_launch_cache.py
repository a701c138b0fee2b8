"""The CUDA launch path's per-call cost: nothing is built, cast or traced again after the first
launch of a shape (issue 14, Deliver 2).

On a host without MLX's CUDA backend ``mx.fast.cuda_kernel`` raises as soon as it is called, so
the CPU tests put a stand-in kernel factory in its place: a real MLX function (the stock QMM in
float32) that counts how often the factory and the kernel are called. Everything else is the
real path: ``cuda.launch``, its per-weights memo, the ``mx.compile`` replay, the scales
conversion. The same checks run against the real factory and kernel on an NVIDIA GPU
(``test_real_cuda_launch_*``, skipped elsewhere; run on the H200 by scripts/h200.sh).
Host TIME is not asserted here (a timed assertion on a shared host is noise): the bench measures
it, paired against stock (bench/cuda_verify.py, scripts/cuda_host_cost.py).
"""

from __future__ import annotations

import mlx.core as mx
import pytest

from kernels import cuda
from kernels.qweights import QWeights

K, N, GS = 512, 256, 64
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
    """Replace MLX's CUDA kernel factory by one that builds a real MLX computation."""
    counts = {"factory": 0, "kernel": 0}

    def factory(name, input_names, output_names, source, header=""):
        counts["factory"] += 1

        def kernel(*, inputs, template, grid, threadgroup, output_shapes, output_dtypes):
            counts["kernel"] += 1
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
    w = mx.random.normal((N, K), key=mx.random.key(seed)) / K ** 0.5
    return QWeights.quantize(w, GS, 4, dtype)


def _x(m=8, dtype=mx.bfloat16):
    return (mx.random.normal((m, K), key=mx.random.key(1))).astype(dtype)


def test_launch_builds_and_traces_once_per_shape_and_casts_nothing(standin, monkeypatch):
    qw, x = _weights(), _x()
    ref = mx.quantized_matmul(x.astype(mx.float32), qw.wq, qw.scales.astype(mx.float32),
                              qw.biases.astype(mx.float32), transpose=True, group_size=GS)
    y0 = cuda.launch("mma_weights_a", x, qw, PARAMS)
    assert mx.allclose(y0.astype(mx.float32), ref, atol=2e-2).item()
    spy = AstypeSpy(monkeypatch)
    for _ in range(50):  # the runtime's pattern: a fresh params dict per dispatch
        y = cuda.launch("mma_weights_a", x, qw, dict(PARAMS))
    mx.eval(y)
    (lx,) = cuda._LAUNCHERS.values()
    assert (standin["factory"], standin["kernel"], lx.traces) == (1, 1, 1)
    assert spy.calls == 0, "astype called per launch"
    assert [len(v) for v in qw.kernel_memo.values()] == [1]  # found, not re-made, per call
    assert mx.array_equal(y, y0).item()  # the replay computes what the traced call did


def test_each_new_shape_or_weights_costs_one_trace_not_one_per_call(standin):
    qa, qb = _weights(seed=0), _weights(seed=1)
    for m in (4, 8, 16):
        for qw in (qa, qb):
            for _ in range(5):
                mx.eval(cuda.launch("mma_weights_a", _x(m), qw, PARAMS))
    assert standin["factory"] == 1  # one kernel object per variant
    traces = {key[1]: lx.traces for key, lx in cuda._LAUNCHERS.items()}
    assert traces == {4: 1, 8: 1, 16: 1}  # one trace per M, shared by both weights


def test_scales_in_another_dtype_are_converted_once_per_weights(standin, monkeypatch):
    """mma_weights_a reads scales as 16-bit words of the activation type: bf16-stored scales
    under fp16 activations are converted the first time, kept with the weights, never again."""
    qw, x = _weights(mx.bfloat16), _x(dtype=mx.float16)
    spy = AstypeSpy(monkeypatch)
    first = cuda.launch("mma_weights_a", x, qw, PARAMS)
    after_first = spy.calls
    for _ in range(20):
        y = cuda.launch("mma_weights_a", x, qw, PARAMS)
    assert spy.calls == after_first
    ((_, _, _, scales, biases),) = qw.kernel_memo[("mma_weights_a", x.shape, x.dtype)]
    assert scales.dtype == biases.dtype == mx.float16  # what the source reads
    assert qw.in_dtype(mx.float16) is qw.in_dtype(mx.float16)
    assert qw.in_dtype(mx.float16).scales.dtype == mx.float16
    assert qw.in_dtype(mx.bfloat16) is qw
    assert mx.array_equal(y, first).item()
    # a variant that reads scales in their own dtype gets them as stored
    qw2 = _weights(mx.bfloat16, seed=2)
    cuda.launch("scalar_kmajor", _x(dtype=mx.float16), qw2, {"n_tile": 8, "k_groups": 1})
    assert not qw2._as


def test_params_changed_in_place_are_not_served_a_stale_launch(standin):
    qw, x = _weights(), _x()
    p = dict(PARAMS)
    mx.eval(cuda.launch("mma_weights_a", x, qw, p))
    p["n_tile"] = 64
    mx.eval(cuda.launch("mma_weights_a", x, qw, p))
    tiles = sorted(dict(key[6])["n_tile"] for key in cuda._LAUNCHERS)
    assert tiles == [32, 64]


def test_a_shape_that_cannot_tile_is_refused_before_anything_is_built(standin):
    qw = _weights()
    with pytest.raises(ValueError, match="does not tile"):
        cuda.launch("mma_weights_a", _x(), qw, {**PARAMS, "k_groups": 3})
    with pytest.raises(ValueError, match="K=256"):
        cuda.launch("mma_weights_a", mx.zeros((8, 256), dtype=mx.bfloat16), qw, PARAMS)
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
    y0 = cuda.launch("mma_weights_a", x, qw, params)
    stock = mx.quantized_matmul(x, qw.wq, qw.scales, qw.biases, transpose=True, group_size=GS)
    rel = (mx.abs(y0.astype(mx.float32) - stock.astype(mx.float32)).max()
           / mx.abs(stock.astype(mx.float32)).max()).item()
    assert rel < 1e-2
    spy = AstypeSpy(monkeypatch)
    outs = [cuda.launch("mma_weights_a", x, qw, dict(params)) for _ in range(100)]
    mx.eval(outs)
    (lx,) = cuda._LAUNCHERS.values()
    assert (len(built), lx.traces, spy.calls) == (1, 1, 0)
    assert all(mx.array_equal(y, y0).item() for y in outs[:3])
    monkeypatch.undo()
    cuda.clear_caches()
