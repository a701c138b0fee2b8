"""The CPU side of the CUDA device: selection, identity matching, launch validation, and the
H200's real result file going into the history as a real (not emulated) device."""

import json
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import pytest

from dflash2.device import DeviceIdentity, parse_selectors
from kernels import cuda
from kernels.qweights import QWeights
from kernels.selection import select

ROOT = Path(__file__).resolve().parents[1]
H200_JSONL = ROOT / "bench" / "results" / "h200" / "h200_suites.jsonl"
H200 = DeviceIdentity("sm_90", None, None, "NVIDIA H200", "cuda", mx.__version__, False)


def test_cuda_selectors_match_the_h200_only():
    cuda_sel, sm90 = parse_selectors("cuda,sm90")
    assert cuda_sel.matches(H200) and sm90.matches(H200)
    g13 = DeviceIdentity("applegpu_g13s", 13, "s", "x", "cpu", mx.__version__, True)
    assert not cuda_sel.matches(g13) and not sm90.matches(g13)
    assert cuda_sel.emulation_target() is None  # an NVIDIA GPU is never emulated


def test_sm90_selects_what_beat_stock_on_the_h200():
    m4 = select(H200, "bfloat16", 4, 5120, 17408)
    assert (m4.variant, m4.reason, m4.params["k_groups"]) == ("mma_verify", "tuned", 4)
    m8 = select(H200, "bfloat16", 8, 5120, 17408)  # stock was faster at M=8 on the H200
    assert (m8.variant, m8.reason) == ("stock", "fallback:shape")
    assert select(H200, "bfloat16", 8, 5120, 48).variant == "mma_verify"


def test_cuda_launch_rejects_shapes_that_do_not_tile():
    qw = QWeights.quantize(mx.random.normal((24, 256)), 64, 4, mx.bfloat16)
    with pytest.raises(ValueError, match="does not tile"):
        cuda.launch("mma_verify", mx.zeros((4, 256), dtype=mx.bfloat16), qw, {"k_groups": 4})
    with pytest.raises(ValueError, match="does not tile"):
        cuda.launch("scalar_kmajor", mx.zeros((8, 256), dtype=mx.bfloat16), qw,
                    {"n_tile": 16})
    assert [cuda.vector_width(w) for w in (20, 6, 17)] == [4, 2, 1]
    assert not cuda.has_source("fp16_matrix") and cuda.has_source("w4a32")


def test_h200_result_file_ingests_as_a_real_device(tmp_path):
    db = tmp_path / "h.db"
    farm = Path(sys.executable).with_name("farm")
    r = subprocess.run([str(farm), "ingest", str(H200_JSONL), "--db", str(db)],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    shown = subprocess.run([str(farm), "show", "latest", "--db", str(db), "--json"],
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    data = json.loads(text)
    blob = json.dumps(data)
    assert "sm_90" in blob and "NVIDIA H200" in blob
    assert '"emulated": true' not in blob
