"""What the machine code of each tile asks of an SM (bench/sass_static.py, bench/sass_stalls.py),
read with nvcc and nvdisasm or from ncu's source pages: no GPU."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "bench" / "results" / "h200"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))


from kernels import cuda_offline


def test_the_sass_summaries_are_what_ncus_source_pages_say():
    """bench/sass_stalls.py sums ncu's per-instruction source page by opcode: the committed
    summaries are what their committed pages give, and they show what the one-LOP3 change
    did: before it, two LOP3s a nibble pair (134 against 64 HADD2s, one a pair); after it,
    one (139 against 128: the rest are the kernel's other logic)."""
    import sass_stalls as ss
    static = {}
    for name in ("sass_before_lop3_k1u1p1", "sass_shipped_tiles"):
        kernels = ss.parse(ss.read(str(H200 / f"{name}.csv.gz")))
        assert ss.summarize(kernels) == (H200 / f"{name}.md").read_text()
        ops = collections.Counter(ss.opcode(r["Source"]) for r in kernels[0].rows)  # gate/up M=8
        static[name] = (ops["LOP3"], ops["HADD2"])
    assert static == {"sass_before_lop3_k1u1p1": (134, 64), "sass_shipped_tiles": (139, 128)}
    assert ss.opcode("@P0 BRA 0x7f77097b4e40") == "BRA" and ss.opcode("") == ""


def test_blocks_an_sm_follow_sm90s_limits():
    """Registers are allocated per warp in units of 256: gate/up's shipped tile at 115
    registers (128 threads) fits 4 blocks an SM, as ncu's theoretical occupancy said (25%); 68
    registers fit 7; 4 warps a block stop at 16 blocks by warps; shared memory can bound it."""
    import sass_static as ss

    assert ss.blocks_per_sm(115, 128, 0) == 4
    assert ss.blocks_per_sm(68, 128, 0) == 7
    assert ss.blocks_per_sm(36, 128, 0) == 12  # 1152 registers a warp take 1280: 51 warps
    assert ss.blocks_per_sm(16, 128, 0) == 16  # 64 warps an SM
    assert ss.blocks_per_sm(52, 256, 4096) == 4  # 8 warps a block, 52 registers: 64 / 16 = 4
    assert ss.blocks_per_sm(32, 128, 60 * 1024) == 3  # 228 KiB / (60 + 1) KiB


@pytest.mark.skipif(cuda_offline.nvcc() is None or cuda_offline.nvdisasm() is None,
                    reason="nvcc or nvdisasm is not on PATH")
def test_the_static_sass_report_counts_the_loop_and_its_table_is_its_json():
    """bench/sass_static.py on three tiles, and the committed report rendered from its JSON: the
    shipped gate/up tile issues 240 dequantization instructions a K step (64 pairs x 3.75) in
    bf16, 208 with fp16's ``hi_in_place``, and 16 mma; bf16 refuses ``hi_in_place``; the
    prefetched tile issues no more than the plain one but a few loop instructions; ``denorm``
    takes the HADD2 out (64 a K step) and adds two HMUL2 a row's scale (8); ``denorm`` 2 takes
    two shifts of three a word out (32) and adds one HMUL2 a row's scale (4)."""
    import sass_static as ss

    gu, pf = (32, 4, 2, 0, 0, 128, 1), (32, 4, 1, 1, 0, 128, 1)
    data = ss.run([8], points={"gate_up": [gu, (gu, {"hi_in_place": 1}), pf,
                                           (gu, {"denorm": 1}), (gu, {"denorm": 2})],
                               "down": []})
    rows = {(r["dtype"], bool(r["params"].get("hi_in_place"))): r for r in data["rows"]
            if not r["params"]["prefetch"] and not r["params"].get("denorm")}
    # denorm: no HADD2 (64 a K step), two HMUL2 a row's scale (8), the rest as it was
    dn, dn2 = (r for r in data["rows"] if r["params"].get("denorm") and r["dtype"] == "bfloat16")
    assert dn["per_k_step"]["dequant"] == rows[("bfloat16", False)]["per_k_step"]["dequant"] - 56
    assert dn["per_k_step"]["mma"] == 16
    # denorm 2: one shift a word, not three (32 a K step), and an HMUL2 a row's scale (4)
    assert dn2["per_k_step"]["dequant"] == dn["per_k_step"]["dequant"] - 28
    assert dn2["per_k_step"]["mma"] == 16
    # the prefetched batches take turns: copying the next into the current was ~37 moves more
    prefetched = next(r for r in data["rows"] if r["params"]["prefetch"])
    assert prefetched["per_k_step"]["other"] < rows[("bfloat16", False)]["per_k_step"]["other"] + 8
    assert rows[("bfloat16", False)]["per_k_step"]["dequant"] == 240
    assert rows[("bfloat16", False)]["per_k_step"]["mma"] == 16
    assert rows[("bfloat16", False)]["blocks_per_sm"] == 4
    assert rows[("float16", True)]["per_k_step"]["dequant"] == 208
    assert "float16 only" in rows[("bfloat16", True)]["refused"]
    committed = ROOT / "bench" / "results" / "sass_static"
    got = ss.render(json.loads(committed.with_suffix(".json").read_text()))
    assert got == committed.with_suffix(".md").read_text()
