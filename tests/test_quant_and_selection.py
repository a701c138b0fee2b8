import pytest

from devices.errors import Dflash2Error
from devices.identity import current_device
from dflash2.quant import QuantSpec, parse_quant_spec, resolve_draft_spec
from kernels.selection import (
    FALLBACK_DEVICE,
    FALLBACK_DISABLED,
    FALLBACK_DTYPE,
    FALLBACK_SHAPE,
    TUNED,
    build_table,
    load_table,
    select,
)


@pytest.mark.parametrize("text,spec", [
    ("w4", QuantSpec(4, 16, 64)), ("W4A32", QuantSpec(4, 32, 64)),
    ("w8a16:gs128", QuantSpec(8, 16, 128)), ("w2:GS32", QuantSpec(2, 16, 32)),
])
def test_quant_specs(text, spec):
    assert parse_quant_spec(text) == spec


@pytest.mark.parametrize("bad", ["w3", "w4a8", "w4:gs16", "4a16", "w4a16gs64", ""])
def test_bad_quant_spec(bad):
    with pytest.raises(Dflash2Error, match="bad quantization spec"):
        parse_quant_spec(bad)


def test_w4a16_draft_resolves_to_w4a32_on_g13_only():
    g13 = resolve_draft_spec("w4a16", current_device("applegpu_g13s"))
    g15 = resolve_draft_spec("w4a16", current_device("applegpu_g15s"))
    assert str(g13.effective) == "w4a32:gs64" and g13.to_json()["activation_dtype"] == "float32"
    assert str(g15.effective) == "w4a16:gs64" and g15.to_json()["activation_dtype"] == "bfloat16"
    assert str(resolve_draft_spec("w8a16", current_device("applegpu_g13g")).effective) == \
        "w8a16:gs64"


def test_gate_up_m8_bf16_selection_per_device():
    shape = (8, 5120, 17408)
    g13 = select(current_device("applegpu_g13s"), "bfloat16", *shape)
    assert (g13.variant, g13.reason) == ("scalar_kmajor", TUNED)
    g15 = select(current_device("applegpu_g15s"), "bfloat16", *shape)
    assert (g15.variant, g15.reason) == ("stock", FALLBACK_DEVICE)
    cpu = select(current_device(""), "bfloat16", *shape)
    assert cpu.variant == "stock" and cpu.reason.startswith("fallback:")


def test_fallback_reasons():
    g14 = current_device("applegpu_g14g")
    assert select(g14, "float16", 8, 5120, 17408).variant == "fp16_matrix"
    assert select(g14, "bfloat16", 8, 5120, 248320).reason == FALLBACK_SHAPE  # vocabulary
    assert select(g14, "bfloat16", 2, 5120, 17408).reason == FALLBACK_SHAPE
    assert select(g14, "bfloat16", 8, 5120, 17408, bits=8).reason == FALLBACK_SHAPE
    assert select(current_device("applegpu_g13s"), "float64", 8, 5120, 17408).reason == \
        FALLBACK_DTYPE
    assert select(g14, "bfloat16", 8, 5120, 17408, disabled=True).reason == FALLBACK_DISABLED
    assert select(g14, "bfloat16", 8, 5120, 48).variant == "narrow_output"


def test_table_covers_production_shapes():
    t = load_table()
    production = {(5120, 17408), (17408, 5120), (6144, 5120), (5120, 2048), (5120, 1024),
                  (5120, 48), (4096, 5120), (5120, 4096), (25600, 5120), (5120, 1280),
                  (5120, 248320)}
    assert production <= set(t.shapes.values())
    gens = {k[0][:3] for k in t.index if k[0].startswith("g")}
    assert gens == {"g13", "g14"}  # tuned Apple entries for G13 and G14 only
    cuda = {(k[1], k[2]) for k in t.index if k[0] == "sm_90"}
    assert ("bfloat16", 4) in cuda and ("bfloat16", 8) in cuda  # measured on the H200


def test_table_rejects_bad_data():
    base = {"shapes": {"a": [256, 256]}, "entries": [
        {"devices": ["g13s"], "dtypes": ["bfloat16"], "M": 8, "bits": 4, "group_sizes": [64],
         "shapes": ["a"], "variant": "nope"}]}
    with pytest.raises(ValueError, match="unknown variant"):
        build_table(base)
    base["entries"][0]["variant"] = "scalar_kmajor"
    base["entries"].append(dict(base["entries"][0]))
    with pytest.raises(ValueError, match="duplicate"):
        build_table(base)
