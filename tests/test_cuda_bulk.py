"""mma_weights_a's bulk pipeline without a GPU: its launch configs (threads, dynamic shared
memory, packing), the packed weights' layout, and its machine code for sm_90 (nvcc and
nvdisasm): it compiles without spills, and each ablated leg drops what it says it drops.

Apart from tests/test_cuda_cpu_side.py: the bulk pipeline's configs and machine code. Its
kernel body runs on the CUDA emulator in tests/test_cuda_bulk_emulated.py."""

from __future__ import annotations

import collections

import mlx.core as mx
import numpy as np
import pytest

from kernels import cuda, cuda_offline
from kernels.qweights import QWeights


def test_bulk_pipeline_configs_are_checked_without_a_gpu():
    """``bulk`` = 1 adds the producer warp and sizes the ring in dynamic shared memory: gate/up
    with 32 columns and 4 K groups, 6 stages of 1 step: 128 B of barriers + 2 x 32 rows x 80
    groups x 2 B of scales and biases + 6 x 4 x 32 x 64 B of weights = 59520 B."""
    cfg = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                             {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 6, "bulk": 1})
    assert (cfg.threads, cfg.grid, cfg.shared_memory) == (160, 544 * 160, 59520)
    assert cfg.template["BULK"] is True and cfg.template["STAGES"] == 6
    # two steps a stage: rows padded to 192 B so that two rows sit 64 B apart modulo 128
    two = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                             {"n_tile": 32, "k_groups": 4, "unroll": 2, "stages": 3, "bulk": 1})
    assert two.shared_memory == 128 + 10240 + 3 * 4 * 32 * 192
    plain = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                               {"n_tile": 32, "k_groups": 4})
    assert (plain.threads, plain.shared_memory, plain.template["BULK"]) == (128, 0, False)
    for params, why in (({"stages": 0}, "stages >= 2"),
                        ({"stages": 8, "unroll": 4, "n_tile": 64, "k_groups": 8},
                         "shared memory exceed")):
        with pytest.raises(ValueError, match=why):
            cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                               {"n_tile": 32, "k_groups": 4, "bulk": 1, **params})
    with pytest.raises(ValueError, match="16-byte chunks"):  # 4224 / 64 = 66 groups a row
        cuda.launch_config("mma_weights_a", 8, 4224, 256, 64, "bfloat16",
                           {"n_tile": 32, "k_groups": 1, "stages": 2, "bulk": 1})


def test_packed_weights_put_each_blocks_stage_in_one_run_of_words():
    """``bulk`` = 2 fetches a block's stage in one copy, so ``pack_weights`` must lay out
    [block][stage][K group][row][unroll * 16 words] exactly as the source's address
    arithmetic reads it: every word checked against its place in MLX's layout."""
    from kernels.variants.mma_weights_a import pack_weights
    n, k, n_tile, k_groups, unroll = 64, 2048, 16, 2, 4
    wq = mx.arange(n * k // 8).astype(mx.uint32).reshape(n, k // 8)
    packed = np.array(pack_weights(wq, n_tile, k_groups, unroll)).reshape(-1)
    flat = np.array(wq)
    group_steps = k // 128 // k_groups
    stages = group_steps // unroll
    run = k_groups * n_tile * unroll * 16  # words a stage's one copy moves
    for b in range(n // n_tile):
        for s in range(stages):
            got = packed[(b * stages + s) * run:(b * stages + s + 1) * run]
            want = [flat[b * n_tile + r, (g * group_steps + s * unroll) * 16 + j]
                    for g in range(k_groups) for r in range(n_tile) for j in range(unroll * 16)]
            assert got.tolist() == want, (b, s)
    cfg = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                             {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 4, "bulk": 2})
    # rows back to back in the ring (no bank padding: one copy cannot skip bytes)
    assert cfg.packing == (32, 4, 1) and cfg.template["PACKED"] is True
    assert cfg.shared_memory == 128 + 10240 + 4 * 4 * 32 * 64
    two = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                             {"n_tile": 32, "k_groups": 4, "unroll": 2, "stages": 3, "bulk": 2})
    assert two.shared_memory == 128 + 10240 + 3 * 4 * 32 * 128
    rows = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                              {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 4, "bulk": 1})
    assert rows.packing == () and rows.template["PACKED"] is False


def test_a_launch_on_packed_weights_packs_them_once_per_weights():
    """The launch hands the kernel w in the layout its config names, made on first use and
    kept with the weights (never per launch); without a packing, w itself."""
    qw = QWeights.quantize(mx.random.normal((64, 1024), key=mx.random.key(3)), 64, 4,
                           mx.float16)
    cfg = cuda.launch_config("mma_weights_a", 8, 1024, 64, 64, "bfloat16",
                             {"n_tile": 16, "k_groups": 2, "unroll": 2, "stages": 2, "bulk": 2})
    w, s, b = cuda.weights_for("mma_weights_a", qw, mx.bfloat16, cfg.packing)
    assert w.shape == qw.wq.shape and not mx.array_equal(w, qw.wq).item()
    assert s.dtype == b.dtype == mx.bfloat16
    from kernels.variants.mma_weights_a import pack_weights
    assert mx.array_equal(w, pack_weights(qw.wq, *cfg.packing)).item()
    assert cuda.weights_for("mma_weights_a", qw, mx.bfloat16, cfg.packing)[0] is w
    plain, _, _ = cuda.weights_for("mma_weights_a", qw, mx.bfloat16, ())
    assert plain is qw.wq


@pytest.mark.skipif(cuda_offline.nvcc() is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("m", [8, 16])
def test_bulk_pipeline_compiles_for_sm90_without_spills(m):
    """The producer's bulk copies and mbarrier waits are PTX that only ptxas checks here (no
    device runs it on CI): it must assemble for sm_90, with no register spilled."""
    for bulk in (1, 2):  # one copy a row, one copy a stage of packed weights
        cfg = cuda.launch_config("mma_weights_a", m, 17408, 5120, 64, "float16",
                                 {"n_tile": 16, "k_groups": 8, "unroll": 1, "stages": 6,
                                  "bulk": bulk})
        rep = cuda_offline.compile_launch("mma_weights_a", cfg)
        assert rep.registers > 0 and rep.spill_bytes == 0, (bulk, rep)


@pytest.mark.skipif(cuda_offline.nvdisasm() is None, reason="nvdisasm is not found")
@pytest.mark.parametrize("bulk,threads,copies", [(2, 160, 3), (3, 128, 7)])
def test_the_bulk_pipeline_takes_each_leg_out_as_the_register_pipeline_does(
        bulk, threads, copies):
    """``ablate`` on the packed bulk pipeline (gate/up's 32 x 4, 4 stages, at denorm 2): 1
    keeps the copies and the computing warps' waits and reads, with no mma; 2 keeps the mma and
    the scales' one copy a block, with no weights copied (two bulk copies, the scales and
    biases, against the producer warp's three or, with ``bulk`` = 3 and no producer warp, the
    first warp's seven: the scales, the ring's four first stages, a refill). No register is
    spilled."""
    tile = {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 4, "bulk": bulk, "denorm": 2}
    ops = {}
    for ablate in (0, 1, 2):
        cfg = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                                 {**tile, "ablate": ablate})
        assert cfg.template["ABLATE"] == ablate and cfg.template["BULK"] is True
        assert cfg.threads == threads and cfg.template["LEADER"] == (bulk == 3)
        rep = cuda_offline.compile_launch("mma_weights_a", cfg)
        assert rep.registers > 0 and rep.spill_bytes == 0, (ablate, rep)
        sass = cuda_offline.sass_sm90("mma_weights_a", cfg.activation, cfg.template)
        ops[ablate] = collections.Counter(cuda_offline.sass_opcode(i) for i in sass)
    bulk_copies = {a: sum(n for op, n in c.items() if op.startswith("UBLKCP")) for a, c in
                   ops.items()}
    assert ops[0]["HMMA"] > 0 and ops[2]["HMMA"] == ops[0]["HMMA"] and ops[1]["HMMA"] == 0
    assert bulk_copies[0] == bulk_copies[1] == copies and bulk_copies[2] == 2, bulk_copies
    with pytest.raises(ValueError, match="not the cp.async ring"):
        cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                           {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 4,
                            "ablate": 1})


@pytest.mark.skipif(cuda_offline.nvdisasm() is None, reason="nvdisasm is not found")
@pytest.mark.parametrize("stages,smem", [(3, 51328), (2, 43136)])
def test_x_early_takes_the_bulk_pipelines_activations_through_a_ring_of_their_own(stages, smem):
    """``x_early`` with ``bulk`` (gate/up's 32 x 4 at denorm 2, bf16 M=8): each K step's
    activations go to shared memory by cp.async (LDGSTS, 4 of 16 B a lane and step, issued in
    the prologue and the loop) and no LDG of x is left; the ring adds BULK_X_DEPTH steps of
    64 B a lane to the block's shared memory (16 KiB: 3 stages then fit 4 blocks an SM, 2
    stages 5), and its loads alone (ablate 1) copy no x. The source's depth is the config's."""
    from kernels.cuda_config import BULK_X_DEPTH
    from kernels.variants._mma_weights_a_cuda import CUDA_SOURCE
    assert f"constexpr int X_DEPTH = {BULK_X_DEPTH};" in CUDA_SOURCE
    tile = {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": stages, "bulk": 3, "denorm": 2}
    ops = {}
    for x_early, ablate in ((0, 0), (1, 0), (1, 1)):
        cfg = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                                 {**tile, "x_early": x_early, "ablate": ablate})
        assert cfg.template["X_EARLY"] == bool(x_early)
        rep = cuda_offline.compile_launch("mma_weights_a", cfg)
        assert rep.registers > 0 and rep.spill_bytes == 0, rep
        sass = cuda_offline.sass_sm90("mma_weights_a", cfg.activation, cfg.template)
        ops[x_early, ablate] = collections.Counter(cuda_offline.sass_opcode(i) for i in sass)
        if x_early and not ablate:
            assert cfg.shared_memory == smem
            assert smem - cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                                             tile).shared_memory == 4 * 32 * BULK_X_DEPTH * 64

    def loads(c, op):
        return sum(n for o, n in c.items() if o.split(".")[0] == op)
    assert loads(ops[0, 0], "LDG") == 8 and loads(ops[0, 0], "LDGSTS") == 0
    assert loads(ops[1, 0], "LDG") == 0 and loads(ops[1, 0], "LDGSTS") == 8
    assert loads(ops[1, 1], "LDGSTS") == 0 and ops[1, 1]["HMMA"] == 0


def test_x_early_2_puts_the_activations_in_each_stage_of_the_ring():
    """``x_early`` = 2 (bulk 3 only): each stage holds its K steps' activations after the
    weights, a K group's row of M every unroll x 256 + 16 B (gate/up's 32 x 4 at M=8, 2
    stages: 2 x 4 x 8 x 272 = 17408 B more); refused where no leader copies stages."""
    base = {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 2, "bulk": 3, "denorm": 2}
    cfg = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                             {**base, "x_early": 2})
    assert cfg.template["X_EARLY"] == 2 and cfg.shared_memory == 128 + 10240 + 2 * (
        4 * 32 * 64 + 4 * 8 * 272)
    sixteen = cuda.launch_config("mma_weights_a", 16, 5120, 17408, 64, "bfloat16",
                                 {**base, "unroll": 2, "x_early": 2})
    assert sixteen.shared_memory == 128 + 10240 + 2 * (4 * 32 * 128 + 4 * 16 * 528)
    for params, why in (({"bulk": 2, "stages": 4}, "takes bulk=3"),
                        ({"bulk": 0, "stages": 0}, "takes bulk=3"),
                        ({"ablate": 2}, "no ablate=2")):
        with pytest.raises(ValueError, match=why) as e:
            cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "bfloat16",
                               {**base, "x_early": 2, **params})
        assert "\n" not in str(e.value)


@pytest.mark.skipif(cuda_offline.nvdisasm() is None, reason="nvdisasm is not found")
@pytest.mark.parametrize("m,x_loads", [(8, 4), (16, 8)])
def test_x_early_2_reads_x_from_the_ring_and_frees_registers(m, x_loads):
    """The lever's point, in nvcc's machine code for sm_90 (gate/up's bulk tile, 2 stages,
    denorm 2): the K loop loads no activations from global memory (the twin: 4 LDG a step at
    M=8, 8 at M=16, the loads 43% of the H100's stall samples waited on), and the registers
    the next step's activations took are free (nvcc 13: 92 -> 71 at M=8, 132 -> 81 at M=16).
    No register is spilled."""
    tile = {"n_tile": 32, "k_groups": 4, "unroll": 1, "stages": 2, "bulk": 3, "denorm": 2}
    regs, loops = {}, {}
    for x_early in (0, 2):
        cfg = cuda.launch_config("mma_weights_a", m, 5120, 17408, 64, "bfloat16",
                                 {**tile, "x_early": x_early})
        rep = cuda_offline.compile_launch("mma_weights_a", cfg)
        assert rep.spill_bytes == 0, rep
        regs[x_early] = rep.registers
        sass = cuda_offline.sass_sm90("mma_weights_a", cfg.activation, cfg.template)
        loops[x_early] = collections.Counter(
            cuda_offline.sass_opcode(i) for i in cuda_offline.hot_loop(sass))
    assert loops[0]["LDG"] == x_loads and loops[2]["LDG"] == 0, loops
    assert loops[2]["HMMA"] == loops[0]["HMMA"] > 0
    assert regs[2] < regs[0] - 16, regs
