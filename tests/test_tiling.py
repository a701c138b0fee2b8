"""Each variant's tiling constraints, declared once (kernels/tiling.py), refuse the shapes its
source cannot compute -- at table load, at a Metal launch and at a CUDA launch -- and let the
shipped table through. No GPU needed: the checks and the launch specs are plain data."""

import json
from pathlib import Path

import mlx.core as mx
import pytest

from kernels import cuda, metal, tiling
from kernels.qweights import QWeights
from kernels.selection import backend_of, build_table
from kernels.variants import VARIANTS

ROOT = Path(__file__).resolve().parents[1]
TABLE = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
TEMPLATE_ORDER = ["T", "M_ROWS", "N_TILE", "K_GROUPS", "K", "N", "GS", "LAYOUT_CONTIGUOUS"]


def _keys(entry: dict):
    for dev in entry["devices"]:
        for dtype in entry["dtypes"]:
            for gs in entry["group_sizes"]:
                for shape in entry["shapes"]:
                    k, n = TABLE["shapes"][shape]
                    yield dev, dtype, entry["M"], k, n, gs


@pytest.mark.parametrize("i", range(len(TABLE["entries"])))
def test_every_shipped_entry_tiles_on_its_back_end(i):
    e = TABLE["entries"][i]
    for dev, dtype, m, k, n, gs in _keys(e):
        tiling.check(e["variant"], backend_of(dev), m, k, n, dtype, gs, e.get("params", {}))


def test_the_shipped_table_loads():
    assert len(build_table(TABLE).index) > 0


def _one_entry(variant: str, shape: list[int], m: int, params: dict, devices=("g13s",),
               dtypes=("bfloat16",)) -> dict:
    return {"shapes": {"s": shape}, "entries": [
        {"devices": list(devices), "dtypes": list(dtypes), "M": m, "bits": 4,
         "group_sizes": [64], "shapes": ["s"], "variant": variant, "params": params}]}


def test_verify_m16_split_in_two_at_k256_is_refused_at_load():
    """The defect the table shipped with: two K groups at K=256 leave each lane 4 values."""
    bad = _one_entry("verify_m16", [256, 256], 16, {"n_tile": 4, "k_groups": 2})
    with pytest.raises(ValueError, match=r"entry 0 \(g13s\): verify_m16 \(metal\) does not tile "
                                         r"M=16, K=256, N=256, bfloat16.*K=256 is not a "
                                         r"multiple of 256\*k_groups=512"):
        build_table(bad)
    bad["entries"][0]["params"]["k_groups"] = 1
    assert len(build_table(bad).index) == 1


def test_the_tiny_shapes_keep_verify_m16_at_one_k_group():
    t = build_table(TABLE)
    for k, n in ((256, 256), (768, 256)):
        assert t.index[("g13s", "bfloat16", 16, k, n, 4, 64)] == (
            "verify_m16", {"n_tile": 4, "k_groups": 1})


def test_a_variant_without_a_source_for_the_device_is_refused_at_load():
    with pytest.raises(ValueError, match=r"entry 0 \(g14s\): mma_verify has no Metal source"):
        build_table(_one_entry("mma_verify", [256, 256], 8, {}, devices=("g14s",)))
    with pytest.raises(ValueError, match="neither an Apple GPU"):
        build_table(_one_entry("scalar_kmajor", [256, 256], 8, {}, devices=("cpu",)))
    build_table(_one_entry("stock", [100, 7], 3, {}, devices=("sm_90",)))  # MLX's own: any


def test_fp16_matrix_on_metal_takes_fp16_at_eight_rows_only():
    tiling.check("fp16_matrix", "metal", 8, 256, 256, "float16", 64, {})
    with pytest.raises(tiling.TilingError, match="activation dtype bfloat16 is not float16"):
        tiling.check("fp16_matrix", "metal", 8, 256, 256, "bfloat16", 64, {})
    with pytest.raises(tiling.TilingError, match="M=4 is not 8"):
        tiling.check("fp16_matrix", "metal", 4, 256, 256, "float16", 64, {})


def test_threadgroup_memory_and_threads_are_limited():
    tiling.check("verify_m16", "metal", 16, 8192, 64, "bfloat16", 64,
                 {"n_tile": 64, "k_groups": 8})  # 8 * 16 * 64 floats: exactly 32 KiB
    with pytest.raises(tiling.TilingError, match="exceed the 32 KiB of threadgroup memory"):
        tiling.check("verify_m16", "metal", 16, 8192, 128, "bfloat16", 64,
                     {"n_tile": 128, "k_groups": 8})
    with pytest.raises(tiling.TilingError, match="1056 threads exceed 1024"):
        tiling.check("narrow_output", "metal", 1, 256 * 33, 48, "bfloat16", 64,
                     {"n_tile": 1, "k_groups": 33})


def test_metal_launch_spec_is_plain_data_and_checked():
    spec = metal.launch_spec(VARIANTS["verify_m16"], 16, 5120, 17408, 64, "bfloat16",
                             {"k_groups": 2})
    assert [name for name, _ in spec.template] == TEMPLATE_ORDER
    assert dict(spec.template) == {"T": "bfloat16", "M_ROWS": 16, "N_TILE": 4, "K_GROUPS": 2,
                                   "K": 5120, "N": 17408, "GS": 64, "LAYOUT_CONTIGUOUS": True}
    assert spec.grid == (17408 // 4 * 64, 1, 1) and spec.threadgroup == (64, 1, 1)
    assert spec.inputs == ("x", "w", "scales", "biases") and spec.output_shape == (16, 17408)
    w4a32 = metal.launch_spec(VARIANTS["w4a32"], 8, 5120, 1280, 64, "bfloat16", {})
    assert dict(w4a32.template)["T"] == "float32" == w4a32.activation
    narrow = metal.launch_spec(VARIANTS["narrow_output"], 8, 5120, 48, 64, "float16", {})
    assert dict(narrow.template)["LAYOUT_CONTIGUOUS"] is False
    with pytest.raises(tiling.TilingError, match=r"verify_m16 \(metal\).*K=256 is not a "
                                                 r"multiple of 256\*k_groups=512"):
        metal.launch_spec(VARIANTS["verify_m16"], 16, 256, 256, 64, "bfloat16", {})
    with pytest.raises(tiling.TilingError, match="N=50 is not a multiple of n_tile=4"):
        metal.launch_spec(VARIANTS["verify_m16"], 16, 5120, 50, 64, "bfloat16", {})


def test_metal_launch_passes_scales_and_biases_as_stored(monkeypatch):
    """bf16 scales under fp16 activations reach the kernel as bf16 (the portable forms use
    them as stored too); only x is cast, to the activation dtype."""
    seen = {}

    def fake_kernel(**kw):
        seen.update(kw)
        return [mx.zeros(kw["output_shapes"][0], kw["output_dtypes"][0])]

    monkeypatch.setattr(metal, "_build", lambda *a: fake_kernel)
    qw = QWeights.quantize(mx.ones((256, 512)), 64, 4, mx.bfloat16)
    metal.launch(VARIANTS["scalar_kmajor"], mx.ones((8, 512), mx.float16), qw, {})
    x, w, scales, biases = seen["inputs"]
    assert (x.dtype, w.dtype) == (mx.float16, mx.uint32)
    assert (scales.dtype, biases.dtype) == (mx.bfloat16, mx.bfloat16)
    assert seen["template"][0] == ("T", mx.float16)
    assert [name for name, _ in seen["template"]] == TEMPLATE_ORDER
    with pytest.raises(tiling.TilingError):
        metal.launch(VARIANTS["scalar_kmajor"], mx.ones((8, 512), mx.float16), qw,
                     {"n_tile": 3})


def test_cuda_split_k_at_k256_in_two_groups_is_refused():
    """The split-K body would compute nothing: a lane's share of K is half a word."""
    with pytest.raises(tiling.TilingError, match=r"scalar_kmajor \(cuda\).*K=256 is not a "
                                                 r"multiple of 256\*k_groups=512"):
        cuda.launch_config("scalar_kmajor", 8, 256, 256, 64, "bfloat16", {"k_groups": 2})
    assert cuda.launch_config("scalar_kmajor", 8, 512, 256, 64, "bfloat16",
                              {"k_groups": 2}).template["VEC"] == 1


def test_fp16_matrix_on_cuda_keeps_its_fp16_contract():
    with pytest.raises(tiling.TilingError, match="bfloat16 is not float16"):
        cuda.launch_config("fp16_matrix", 8, 5120, 1280, 64, "bfloat16", {})


@pytest.mark.parametrize("backend", tiling.BACKENDS)
def test_every_source_declares_its_tiling(backend):
    for name, v in VARIANTS.items():
        has_source = getattr(v, tiling.SOURCE_ATTR[backend], None) is not None
        declared = getattr(v, tiling.TILING_ATTR[backend], None)
        assert has_source == isinstance(declared, tiling.Tiling), (name, backend)


def test_params_are_merged_one_way():
    fp16 = VARIANTS["fp16_matrix"]
    assert tiling.merged_params(fp16, {"k_groups": 4, "n_tile": 2}) == {"n_tile": 8,
                                                                         "k_groups": 1}


def test_a_custom_variant_at_another_bit_width_is_refused_at_load():
    data = json.loads(json.dumps(TABLE))
    entry = next(e for e in data["entries"] if e["variant"] == "scalar_kmajor")
    entry["bits"] = 8
    with pytest.raises(ValueError, match=r"scalar_kmajor unpacks 4-bit weights, not 8-bit"):
        build_table(data)
