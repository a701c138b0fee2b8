"""The cold sweep's points (bench/sweep_points.py) and its checks: every point against its plain
register twin, the tiles h200.sh's diagnose and denorm runs launch, each compiling for sm_90."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import mlx.core as mx
import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "bench" / "results" / "h200"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import cuda_verify as cv
import diagnostic_tiles as dt
import sweep_points as sp

from kernels import cuda, cuda_offline
from kernels.qweights import QWeights
from kernels.variants import VARIANTS

# the chooser's defaults: each variant the sweep runs
SWEPT = {name: VARIANTS[name].DEFAULTS for name in sp.SWEPT}


def test_the_sweep_and_the_ncu_run_drop_the_same_points():
    """``--no-ring`` drops the cp.async ring's tiles but not the bulk pipeline's (which also has
    stages); ``--no-bulk`` (a failed bulk smoke test) drops the bulk pipeline's."""
    ring, bulk, plain = (32, 4, 1, 0, 3), ((32, 4, 1, 0, 6), {"bulk": 1}), (32, 4, 2, 0, 0)
    gsums = ((32, 4, 1, 0, 0), sp.GSUMS)  # a variant with neither stages nor bulk: kept
    pts = [ring, bulk, plain, gsums]
    assert sp.selected(pts) == pts
    assert sp.selected(pts, no_ring=True) == [bulk, plain, gsums]
    assert sp.selected(pts, no_bulk=True) == [ring, plain, gsums]
    assert sp.selected(pts, True, True) == [plain, gsums]


def test_the_reference_of_every_sweep_point_is_the_plain_register_pipeline():
    """A point must equal the plain register pipeline at its (n_tile, k_groups) bit for bit;
    the reference takes every other key from the variant's defaults, so a lever added later
    (``hi_in_place``) is never in both sides of the check."""
    variants = set()
    for op in sp.POINTS:
        for pt in sp.POINTS[op]:
            p = sp.as_params(pt)
            name = p.get("variant", "mma_weights_a")
            variants.add(name)
            twin = {**SWEPT[name], "n_tile": p["n_tile"], "k_groups": p["k_groups"],
                    "unroll": 1}
            assert sp.register_twin(p) == (twin if name == "mma_weights_a"
                                           else {"variant": name, **twin})
    assert any(sp.as_params(pt).get("hi_in_place") for pt in sp.POINTS["gate_up"])
    assert variants == set(SWEPT)  # each variant its own twin, never the other's


@pytest.mark.skipif(cuda_offline.nvcc() is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("op", ["gate_up", "down"])
def test_every_tile_of_the_next_sweep_compiles_for_sm90_without_spills(op):
    """The next device session runs these blind of any compiler but NVRTC's: each tile of
    ``POINTS`` must assemble for sm_90 in fp16 at M=8 and 16 with no register spilled (a
    spill would be timed, not found), and bf16 refuses ``hi_in_place`` before any launch."""

    from concurrent.futures import ThreadPoolExecutor

    k, n = cv.SHAPES[op]
    launches = []
    for pt in sp.POINTS[op]:
        name, p = sp.launch_of(sp.as_params(pt))
        launches += [(name, p, m, cuda.launch_config(name, m, k, n, 64, "float16", p))
                     for m in (8, 16)]
        if p.get("hi_in_place"):
            with pytest.raises(ValueError, match="float16 only"):
                cuda.launch_config(name, 8, k, n, 64, "bfloat16", p)
    # nvcc processes side by side (each is one thread): the same compiles in less of CI's time
    with ThreadPoolExecutor(max_workers=4) as pool:
        reps = list(pool.map(lambda job: cuda_offline.compile_launch(job[0], job[3]), launches))
    for (name, p, m, _), rep in zip(launches, reps, strict=True):
        assert rep.registers > 0 and rep.spill_bytes == 0, (name, p, m, rep)


def test_the_cold_sweeps_best_row_is_launched_with_every_lever_it_was_timed_with():
    """ncu's cold-best path and the sweep's final timings launch a row's tile through
    ``tile_of``: every key the variant takes, ``hi_in_place`` included, no timing."""
    row = {"n_tile": 32, "k_groups": 4, "unroll": 1, "prefetch": 1, "x_early": 0,
           "hi_in_place": 1, "us": 21.0, "ok": True, "exact_vs_register": True}
    assert sp.tile_of(row) == {"n_tile": 32, "k_groups": 4, "unroll": 1, "prefetch": 1,
                                "x_early": 0, "hi_in_place": 1}


def test_the_sweeps_tables_have_a_column_for_every_key_they_print():
    """Rows printed every key while the headers named the first seven (min_blocks, bulk and
    hi_in_place came later): each table's rows now have exactly its header's cells, and a
    ``hi_in_place`` point is told apart from its twin."""
    import cuda_verify_cold_sweep as cs

    res = json.loads((H200 / "bulk_packed_cold_sweep.json").read_text())
    e = next(iter(res["shapes"].values()))
    e["points"].append({**e["points"][0], "hi_in_place": 1})
    tables, cur = [], None
    for ln in cs.render(res).splitlines():
        if ln.startswith("| shape"):
            cur = [ln.count("|")]
            tables.append(cur)
        elif cur and ln.startswith(("| gate_up", "| down")):
            cur.append(ln.count("|"))
    assert len(tables) == 2 and all(len(set(t)) == 1 and len(t) > 1 for t in tables)
    assert "hi_in_place" in cs.render(res)


def test_the_diagnostic_tiles_are_the_tables_and_the_balanced_ones_and_all_launch():
    """h200.sh diagnose times the table's M=8 bf16 tiles ablated (1 and 2) and the BALANCED
    gate/up tiles: taken from the table and the set, so they follow whatever ships, and each
    one builds a launch at both shapes (a tile that cannot would cost the run an error)."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    ablate = dt.diagnostic_tiles("ablate", table)
    shipped = {(e["shapes"][0], e["variant"]) for e in table["entries"]
               if e["devices"] == ["sm_90"] and e["M"] == 8 and e["dtypes"] == ["bfloat16"]
               and e["shapes"][0] in ("gate_up", "down")}
    weights_a = sum(v == sp.NAME for _, v in shipped)  # whose math alone and whole are denormed
    assert sorted({t.get("ablate", 0) for t in ablate}) == [0, 1, 2]
    assert len(ablate) == 4 + 4 * weights_a and weights_a >= 1
    assert sorted(t.get("denorm", 0) for t in ablate if t.get("ablate") == 2) == \
        [0] * 2 + [1, 2] * weights_a
    own = [e["params"].get("denorm", 0) for e in table["entries"]
           if e["devices"] == ["sm_90"] and e["M"] == 8 and e["dtypes"] == ["bfloat16"]
           and e["shapes"][0] in ("gate_up", "down") and e["variant"] == sp.NAME]
    assert sorted(t.get("denorm", 0) for t in ablate if "ablate" not in t) == sorted(
        d for o in own for d in (0, 1, 2) if d != o)
    assert {t.get("variant", sp.NAME) for t in ablate} == {v for _, v in shipped}
    balanced = dt.diagnostic_tiles("balanced", table)
    assert [t["n_tile"] for t in balanced] == [16] * 4 and {t["k_groups"] for t in balanced} == {2}
    for t in ablate + balanced:
        for op in ("gate_up", "down"):
            k, n = cv.SHAPES[op]
            name, p = sp.launch_of(t)
            assert cuda.launch_config(name, 8, k, n, 64, "bfloat16", p).grid > 0
    with pytest.raises(ValueError, match="no diagnostic tiles named 'hot'"):
        dt.diagnostic_tiles("hot", table)


def test_check_only_flags_a_lever_that_changes_the_output_and_renders_without_timings(
        monkeypatch):
    """``--check-only``'s per-point check on a stand-in kernel (MLX's CUDA factory replaced by
    an MLX computation, as tests/test_cuda_launch_cache.py does) whose output moves by 2^-7
    under ``hi_in_place``: that point is not bit-exact against its register twin and not ok,
    the twin and a faithful lever are; a tile that does not tile is an error row. A point of
    ``mma_group_sums`` (whose stand-in rounds otherwise, as its contract does) at the same
    (n_tile, k_groups) is checked against its own twin, not mma_weights_a's. The check-only
    report renders with no ceiling and no timings."""
    import cuda_verify_cold_sweep as cs

    from kernels import cuda

    def factory(name, input_names, output_names, source, header=""):
        def kernel(*, inputs, template, grid, threadgroup, output_shapes, output_dtypes):
            x, w, s, b = (mx.array.astype(a, mx.float32) if a.dtype != mx.uint32 else a
                          for a in inputs)
            y = mx.quantized_matmul(x, w, s, b, transpose=True,
                                    group_size=dict(template)["GS"], bits=4)
            if dict(template).get("HI_IN_PLACE"):
                y = y * (1 + 2.0 ** -7)  # a lever that is not faithful
            if "group_sums" in name:
                y = y * (1 - 2.0 ** -9)  # another contract: other roundings
            return [mx.array.astype(y, output_dtypes[0])]
        return kernel

    monkeypatch.setattr(mx.fast, "cuda_kernel", factory)
    cuda.clear_caches()
    try:
        k, n = 256, 64
        qw = QWeights.quantize(mx.random.normal((n, k), key=mx.random.key(0)) / 16, 64, 4,
                               mx.float16)
        x = mx.random.normal((8, k), key=mx.random.key(1)).astype(mx.float16)
        ys = mx.quantized_matmul(x, qw.wq, qw.scales, qw.biases, transpose=True,
                                 group_size=64, bits=4)
        twins: dict = {}
        base = sp.as_params((32, 1, 1, 0, 0))
        top = cuda.scale_magnitude(qw.scales)
        assert cuda.denorm_fits(top, "float16", 1) and not cuda.denorm_fits(top, "float16", 2)
        rows = [cs.check_point({**base, **extra}, x, qw, ys, twins, top)
                for extra in ({}, {"prefetch": 1}, {"hi_in_place": 1}, {"k_groups": 3},
                              {"denorm": 1}, {"denorm": 2})]
        gsums = cs.check_point(sp.as_params(((32, 1, 1, 1, 0), sp.GSUMS)), x, qw, ys, twins,
                               top)
    finally:
        cuda.clear_caches()
    plain, prefetched, hi, bad, dn1, dn2 = rows
    rows = rows[:4]
    # denorm where the scales allow it is checked as any lever; where they do not, the tile
    # would run plain, so it is no candidate and is not launched
    assert dn1["ok"] and dn1["denorm_runs"] and dn1["scales_max_abs"] == top
    assert dn2["ok"] is False and "over its limit" in dn2["error"]
    assert dn2["denorm_runs"] is False and "exact_vs_register" not in dn2
    assert plain["ok"] and plain["exact_vs_register"] and prefetched["ok"]
    assert gsums["ok"] and gsums["exact_vs_register"] and gsums["variant"] == "mma_group_sums"
    assert hi["exact_vs_register"] is False and hi["ok"] is False
    assert "error" in bad and "ok" not in bad
    res = {"device": {"chip": "stand-in", "arch": "sm_90", "mlx_version": mx.__version__},
           "measured_at": "now", "method": {"batch": 0, "reps": 0},
           "shapes": {"gate_up/float16": {"dtype": "float16", "point_m": 8, "points": rows,
                                          "final": []}}}
    md = cs.render(res)
    assert "**Check only**" in md and "TB/s" not in md
    hi_line = next(ln for ln in md.splitlines() if "| False |" in ln)
    assert "| - | - | False |" in hi_line  # no time, no % of ceiling


def test_the_m16_ablated_tiles_are_the_tables_m16_tiles_and_launch_at_m16():
    """``ablate16``: the table's M=16 gate/up and down bf16 tiles with a part taken out, each
    building a launch at M=16 on both shapes."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    tiles = dt.diagnostic_tiles("ablate16", table)
    shipped = [sp.point_of(e["variant"], e["params"]) for e in table["entries"]
               if e["devices"] == ["sm_90"] and e["M"] == 16 and e["dtypes"] == ["bfloat16"]
               and e["shapes"][0] in ("gate_up", "down")]
    assert len(shipped) == 2
    # loads alone, math alone at each denorm mode, whole at each mode but the tile's own (the
    # M=16 tiles ship plain); a group-sums tile has no denorm
    assert all(t.get("denorm", 0) == 0 for t in shipped)
    assert tiles == [x for t in shipped for x in [{**t, "ablate": a} for a in (1, 2)] + (
        [{**t, "denorm": d, "ablate": 2} for d in (1, 2)] + [{**t, "denorm": d} for d in (1, 2)]
        if "variant" not in t else [])]
    for t in tiles:
        for op in ("gate_up", "down"):
            k, n = cv.SHAPES[op]
            name, p = sp.launch_of(t)
            assert cuda.launch_config(name, 16, k, n, 64, "bfloat16", p).grid > 0


@pytest.mark.parametrize("table_file", ["kernels/selection_table.json",
                                        "bench/results/h200/layouts_1853/chosen_table.json"])
def test_the_xcost_tiles_are_the_tables_register_tiles_with_each_part_out_and_launch(table_file):
    """``xcost_<shape>``: the table's bf16 mma_weights_a tiles of the shape at M=8 and 16 (the
    register pipeline's, and the bulk pipeline's without x_early: the chosen table's gate/up
    M=8 tile), each once (whole, then ablate 1-4), every one a launch on its shape at both Ms
    (the run times each at both: the same tile's x cost at M=8 against M=16); a cp.async ring
    tile would be refused there, so none is taken."""
    table = json.loads((ROOT / table_file).read_text())
    for shape in ("gate_up", "down"):
        tiles = dt.diagnostic_tiles(f"xcost_{shape}", table)
        shipped = [sp.point_of(e["variant"], e["params"]) for e in table["entries"]
                   if e["devices"] == ["sm_90"] and e["M"] in (8, 16)
                   and e["dtypes"] == ["bfloat16"] and e["shapes"][0] == shape
                   and e["variant"] == sp.NAME]
        assert shipped and all(not t.get("stages") or t.get("bulk") for t in shipped)
        once = [t for i, t in enumerate(shipped) if t not in shipped[:i]]
        assert tiles == [{**t, "ablate": a} for t in once for a in range(5)]
        k, n = cv.SHAPES[shape]
        for t in tiles:
            for m in (8, 16):
                cfg = cuda.launch_config(sp.NAME, m, k, n, 64, "bfloat16", t)
                assert cfg.template["ABLATE"] == t["ablate"] and cfg.grid > 0
    ring = {"devices": ["sm_90"], "dtypes": ["bfloat16"], "M": 8, "shapes": ["down"],
            "variant": sp.NAME, "params": {"n_tile": 16, "k_groups": 8, "unroll": 1,
                                            "stages": 4}}
    assert dt.diagnostic_tiles("xcost_down", {"entries": [ring]}) == []
    bulk_x = {**ring, "params": {**ring["params"], "bulk": 3, "x_early": 2}}
    assert dt.diagnostic_tiles("xcost_down", {"entries": [bulk_x]}) == []
    bulk = {**ring, "params": {**ring["params"], "bulk": 3}}
    assert [t["ablate"] for t in dt.diagnostic_tiles("xcost_down", {"entries": [bulk]})] == [
        0, 1, 2, 3, 4]
    # xl1_<shape>: the same tiles, whole, without x's loads and with x's loads from L1 (5)
    assert [t["ablate"] for t in dt.diagnostic_tiles("xl1_down", {"entries": [bulk]})] == [
        0, 3, 5]
    for shape in ("gate_up", "down"):
        xl1 = dt.diagnostic_tiles(f"xl1_{shape}", table)
        assert [t for t in xl1 if t["ablate"] != 5] == [
            t for t in dt.diagnostic_tiles(f"xcost_{shape}", table) if t["ablate"] in (0, 3)]
        assert [t["ablate"] for t in xl1].count(5) == len(xl1) // 3 > 0
        k, n = cv.SHAPES[shape]
        for t in xl1:
            assert cuda.launch_config(sp.NAME, 16, k, n, 64, "bfloat16", t).template[
                "ABLATE"] == t["ablate"]
    with pytest.raises(ValueError, match="xcost_gate_up"):
        dt.diagnostic_tiles("xcost_vocab", table)
    with pytest.raises(ValueError, match="xl1_gate_up"):
        dt.diagnostic_tiles("xl1_vocab", table)


def test_a_sweep_sets_points_are_tiles_for_ncu_alone_and_a_bad_name_is_one_error():
    """``set:<name>:<shape>``: a sweep set's points of one shape as ncu's --tiles take them
    (an M=16 set is timed alone at M=16, where its batched sweep was never run)."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    tiles = dt.diagnostic_tiles("set:xshare-m16:gate_up", table)
    assert tiles == [sp.as_params(pt) for pt in sp.SETS["xshare-m16"]["gate_up"]]
    assert any(t.get("col_warps", 1) > 1 for t in tiles) and tiles[-1].get("col_warps", 1) == 1
    for bad in ("set:nonesuch:gate_up", "set:xshare-m16:vocab", "set:xshare-m16"):
        with pytest.raises(ValueError, match="no sweep set"):
            dt.diagnostic_tiles(bad, table)


def test_the_loads_tiles_are_loads_alone_in_bounds_and_launch_where_they_tile():
    """``loads``: every LOADS tile with its math taken out (ablate 1), so the run times the
    load leg alone. Each runs on the CUDA emulator, bounds checked, at a K that gives a warp
    two batches (prefetch's turns included), and writes zeros; each builds a launch on both
    shapes but 17 K groups on gate/up (5120 is no multiple of 17 x 128), which the ncu run
    skips by name."""
    from kernels.cuda_emu import launch as emu
    from kernels.tiling import TilingError

    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    tiles = dt.diagnostic_tiles("loads", table)
    assert len(tiles) == len(dt.LOADS) and all(t["ablate"] == 1 for t in tiles)
    for t in tiles:
        k = 128 * t["k_groups"] * t["unroll"] * 2 * (1 + t["prefetch"])
        w = mx.random.normal((64, k), key=mx.random.key(k)) / k ** 0.5
        x = (mx.random.normal((8, k), key=mx.random.key(1)) / k ** 0.25).astype(mx.bfloat16)
        y = emu.launch(sp.NAME, x, QWeights.quantize(w, 64, 4, mx.bfloat16), t)
        assert not mx.any(y).item(), t
        for op in ("gate_up", "down"):
            k, n = cv.SHAPES[op]
            if op == "gate_up" and t["k_groups"] == 17:
                with pytest.raises(TilingError, match="not a multiple"):
                    cuda.launch_config(sp.NAME, 8, k, n, 64, "bfloat16", t)
                continue
            assert cuda.launch_config(sp.NAME, 8, k, n, 64, "bfloat16", t).grid > 0


def test_the_bulk_tiles_legs_are_each_tile_whole_loads_alone_and_math_alone_and_launch():
    """``bulk_<shape>``: each packed bulk tile whole (plain, denorm 2), loads alone, math
    alone, whole without x's loads and math without them at denorm 2, every one a launch on
    its shape at M=8 (a tile that did not tile would
    be skipped on the device, and its legs lost); the check's set is the same tiles' whole at
    denorm 2, each against its plain register twin."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    for shape, pts in sp.BULK_TILES.items():
        tiles = dt.diagnostic_tiles(f"bulk_{shape}", table)
        assert len(tiles) == 6 * len(pts) and all(t["bulk"] == 3 for t in tiles)
        legs = [(t.get("ablate", 0), t.get("denorm", 0)) for t in tiles]
        assert legs == [(0, 0), (0, 2), (1, 0), (2, 2), (3, 2), (4, 2)] * len(pts)
        k, n = cv.SHAPES[shape]
        for t in tiles:
            cfg = cuda.launch_config(sp.NAME, 8, k, n, 64, "bfloat16", t)
            assert cfg.template["ABLATE"] == t.get("ablate", 0) and cfg.shared_memory > 0
        checked = [sp.as_params(pt) for pt in sp.SETS["bulk-denorm"][shape]]
        assert [p["denorm"] for p in checked] == [2] * len(pts)
        for p in checked:
            twin = sp.register_twin(p)
            assert (twin["stages"], twin["bulk"], twin["denorm"], twin["unroll"]) == (0, 0, 0, 1)


def test_the_bulk_against_table_set_holds_the_tables_own_bf16_m8_tile_and_renders_each():
    """``bulk-vs-table`` times the bulk tiles beside the table's own bf16 M=8 tile in one run
    (the 16:22 comparison was across runs and hosts); with ``--time-each`` the report has
    every candidate's eager, compiled and chained time, the best's from its own row."""
    from cold_sweep_report import render

    from devices.identity import DeviceIdentity
    from kernels.selection import select
    h200 = DeviceIdentity("sm_90", None, None, "NVIDIA H200", "cuda", mx.__version__, False)
    for shape, pts in sp.SETS["bulk-vs-table"].items():
        got = [sp.as_params(pt) for pt in pts]
        c = select(h200, "bfloat16", 8, *cv.SHAPES[shape])
        own = {**dict(c.params), **({sp.VARIANT: c.variant} if c.variant != sp.NAME else {})}
        assert any(all(p.get(k) == v for k, v in own.items()) for p in got), (shape, own)
        assert sum(p.get("bulk") == 3 for p in got) == len(got) - 1
    best = {**sp.as_params(((32, 4, 2, 0, 0), sp.DENORM_2))}
    bulk = {**sp.as_params(((32, 4, 1, 0, 2), {"bulk": 3, **sp.DENORM_2}))}
    res = {"device": {"chip": "x", "arch": "sm_90", "mlx_version": "0"}, "measured_at": "now",
           "method": {"batch": 1, "reps": 1}, "read_ceiling_Bps": 4e12, "shapes": {
               "gate_up/bfloat16": {"dtype": "bfloat16", "points": [], "final": [{
                   "M": 8, "floor_us": 12.0, "stock_us": 40.0, "params": best,
                   "custom_eager_us": 22.0, "custom_compiled_us": 22.5, "alone_custom_us": 24.0,
                   "stock_pct_ceiling": 0.3, "pct_ceiling_eager": 0.5,
                   "pct_ceiling_compiled": 0.5, "compiled_speedup_vs_stock": 1.8,
                   "candidates": [{"us": 22.0, **best},
                                  {"us": 23.0, "timed": {"compiled_us": 25.3,
                                                         "alone_us": 26.0}, **bulk}]}]}}}
    rows = [ln for ln in render(res).splitlines() if ln.startswith("| gate_up")][1:3]
    assert rows[0].endswith("| 22.0 | 22.5 | 1.02 | 24.0 |")
    assert rows[1].endswith("| 23.0 | 25.3 | 1.10 | 26.0 |") and ", 3, -, 2," in rows[1]


def test_the_diagnostic_tiles_cli_prints_json_and_a_bad_kind_is_one_line():
    """h200_recipes.sh's ``tiles`` calls the script: its JSON is the function's, and a bad kind is
    one line on stderr and exit 2, so the diagnose run names what went wrong."""
    import subprocess
    script = [sys.executable, str(ROOT / "bench" / "diagnostic_tiles.py")]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    r = subprocess.run([*script, "xcost_gate_up"], capture_output=True, text=True, env=env,
                       check=False)
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    assert r.returncode == 0 and json.loads(r.stdout) == dt.diagnostic_tiles("xcost_gate_up", table)
    for bad in (["nonesuch"], []):
        r = subprocess.run([*script, *bad], capture_output=True, text=True, env=env, check=False)
        assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
