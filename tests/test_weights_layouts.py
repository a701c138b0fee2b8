"""A tile that reads w in a layout of its own (mma_weights_a's ``bulk`` 2 and 3) is given that
layout from load (``QWeights.layouts``), so a caller's ``mx.compile`` with the weights as inputs
reads it as an input instead of tracing the copy into its graph and running it on every call
(gate/up bf16 M=8 on the H200, 2026-12-05 16:22: 50.0 us compiled against 23.6 eager).

No CUDA here: MLX's kernel factory is replaced by a stand-in whose output is each row's sum of
the words of the w it was handed (so a test sees WHICH w the launch read); everything else is
the real path: ``cuda.launch``, ``weights_for``, the bench's compiled function, the selection
table and the layer's load."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from devices.identity import DeviceIdentity
from kernels import cuda, dispatch, selection
from kernels.qweights import QWeights
from kernels.variants.mma_weights_a import pack_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import cuda_verify as cv  # bench/ is a folder of scripts, on the path above

NAME = "mma_weights_a"
BULK = {"n_tile": 32, "k_groups": 4, "unroll": 1, "prefetch": 0, "bulk": 3, "stages": 3}
REGISTER = {"n_tile": 32, "k_groups": 4, "unroll": 1, "prefetch": 0}
K, N = 5120, 64
H200 = DeviceIdentity("sm_90", None, None, "NVIDIA H200", "cuda", mx.__version__, False)


@pytest.fixture
def standin(monkeypatch):
    """The kernel factory's stand-in: y[m, n] = the sum of row n's words of the w handed in."""
    handed: list = []

    def factory(name, input_names, output_names, source, header="", **_):
        def kernel(*, inputs, template, grid, threadgroup, output_shapes, output_dtypes):
            _x, w, _s, _b = inputs
            handed.append(w)
            rows = (w.astype(mx.float32) / 2 ** 20).sum(axis=1)
            return [mx.broadcast_to(rows, output_shapes[0]).astype(output_dtypes[0])]
        return kernel
    monkeypatch.setattr(mx.fast, "cuda_kernel", factory, raising=False)
    cuda.clear_caches()
    yield handed
    cuda.clear_caches()


def _weights(seed: int = 0) -> QWeights:
    return QWeights.quantize(mx.random.normal((N, K), key=mx.random.key(seed)))


def _rows(w: mx.array) -> mx.array:
    return (w.astype(mx.float32) / 2 ** 20).sum(axis=1)


def test_a_layout_made_at_load_is_kept_with_the_weights_and_made_once():
    qw = _weights()
    lay = cuda.layouts_for(NAME, qw, 8, mx.bfloat16, BULK)
    key = (NAME, 32, 4, 1)
    assert list(lay) == [key] and qw.layouts[key] is lay[key]
    assert mx.array_equal(lay[key], pack_weights(qw.wq, 32, 4, 1)).item()
    assert cuda.layouts_for(NAME, qw, 8, mx.bfloat16, BULK)[key] is lay[key]  # once
    assert cuda.layouts_for(NAME, qw, 1, mx.float16, BULK)[key] is lay[key]  # M, dtype: same w
    assert cuda.layouts_for(NAME, qw, 8, mx.bfloat16, REGISTER) == {}  # reads w as MLX does
    # the scales' dtype copy reads the same layouts
    half = qw.in_dtype(mx.float16)
    assert half is not qw and half.layouts is qw.layouts
    assert cuda.weights_for(NAME, half, mx.float16, (32, 4, 1))[0] is lay[key]


def test_a_launch_reads_the_layout_it_is_given_eager_and_inside_a_callers_compile(standin):
    """The layout is read as given, never made again: a made-up layout (zeros) is what the
    kernel is handed, eagerly and with the weights as inputs of ``mx.compile``."""
    qw = _weights()
    x = mx.zeros((8, K), mx.bfloat16)
    marker = mx.zeros_like(qw.wq)
    given = QWeights(qw.wq, qw.scales, qw.biases, 64, 4, layouts={(NAME, 32, 4, 1): marker})
    assert mx.all(cuda.launch(NAME, x, given, BULK) == 0).item()

    def f(x, wq, s, b, packed):
        return cuda.launch(NAME, x, QWeights(wq, s, b, 64, 4,
                                             layouts={(NAME, 32, 4, 1): packed}), BULK)
    y = mx.compile(f)(x, qw.wq, qw.scales, qw.biases, marker)
    assert mx.all(y == 0).item()
    # without one, the launch packs w itself: the stand-in then sums the packed rows
    plain = mx.compile(lambda x, wq, s, b: cuda.launch(NAME, x, QWeights(wq, s, b, 64, 4),
                                                       BULK))
    y = plain(x, qw.wq, qw.scales, qw.biases)
    want = _rows(pack_weights(qw.wq, 32, 4, 1))
    assert mx.allclose(y[0].astype(mx.float32), want, rtol=1e-2).item()
    assert mx.any(want != 0).item() and not mx.allclose(want, _rows(qw.wq)).item()


def test_the_benchs_compiled_path_passes_each_copys_layout_as_an_input(standin):
    """bench/cuda_verify's compiled custom path for a packing tile: each copy's layout, made at
    load (``load_layouts``), is an input of the compiled function; two copies give two results,
    each its own layout's (a layout traced from w would be the same for a marker)."""
    copies = [_weights(1), _weights(2)]
    keys = cv.load_layouts(NAME, BULK, 8, mx.bfloat16, copies)
    assert keys == ((NAME, 32, 4, 1),)
    assert all(keys[0] in q.layouts for q in copies)
    copies[1].layouts[keys[0]] = mx.zeros_like(copies[1].wq)  # what the compiled path reads
    paths = cv.paths_for(NAME, BULK, None, keys)
    x = mx.zeros((8, K), mx.bfloat16)
    first = paths["custom_compiled"](x, copies[0])
    assert mx.allclose(first[0].astype(mx.float32), _rows(copies[0].layouts[keys[0]]),
                       rtol=1e-2).item()
    assert mx.all(paths["custom_compiled"](x, copies[1]) == 0).item()
    # a register tile reads w as MLX stores it: nothing to pass
    assert cv.load_layouts(NAME, REGISTER, 8, mx.bfloat16, copies) == ()


def test_a_layer_loaded_for_an_nvidia_device_has_its_tiles_layouts(tmp_path, monkeypatch):
    """``dispatch.at_load`` (what VerifyQuantizedLinear calls) makes the layout of every tuned
    sm_90 entry of the shape that packs, and nothing for another device or a register tile."""
    table = json.loads(selection.table_path().read_text())
    table["shapes"]["tiny"] = [K, N]
    table["entries"] += [
        {"devices": ["sm_90"], "dtypes": ["bfloat16"], "M": 8, "bits": 4, "group_sizes": [64],
         "shapes": ["tiny"], "variant": NAME, "params": BULK},
        {"devices": ["sm_90"], "dtypes": ["float16"], "M": 16, "bits": 4, "group_sizes": [64],
         "shapes": ["tiny"], "variant": NAME, "params": REGISTER}]
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    monkeypatch.setenv(selection.ENV_TABLE, str(path))
    keys = selection.tuned_keys(H200, K, N)
    assert [(dt, m, c.variant) for dt, m, c in keys] == [("bfloat16", 8, NAME),
                                                         ("float16", 16, NAME)]
    qw = dispatch.at_load(_weights(), H200)
    assert list(qw.layouts) == [(NAME, 32, 4, 1)]
    g13 = DeviceIdentity("applegpu_g13s", 13, "s", "x", "cpu", mx.__version__, True)
    assert dispatch.at_load(_weights(), g13).layouts == {}
    emulated = DeviceIdentity("sm_90", None, None, "NVIDIA H200", "cuda", mx.__version__, True)
    assert dispatch.at_load(_weights(), emulated).layouts == {}
