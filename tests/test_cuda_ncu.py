"""ncu's kernel times in the H200 bench (issue 14): the CSV read back, merged into the bench's
rows, and the tiles chosen from each launch ALONE, per M. Pure Python on committed ncu output: no
GPU, no ncu."""

from __future__ import annotations

import collections
import itertools
import json
import re
import sys
from pathlib import Path

import mlx.core as mx
import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "bench" / "results" / "h200"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import cuda_verify as cv
import cuda_verify_ncu as cvn
import regen_sm90_table as regen
import sweep_points as sp
from cuda_verify_report import ncu_chain_lines

from kernels import cuda, cuda_offline
from kernels.qweights import QWeights
from kernels.variants import VARIANTS
from kernels.variants.mma_weights_a import DEFAULTS

# The first ncu run (2026-12-03 18:38 UTC): bf16 at M=8, per shape stock, the shipped tile and the
# cold sweep's best, one launch each, with the SpeedOfLight/Occupancy/WarpStateStats sections.
NCU_COLD = H200 / "previous_ncu_cold.csv"
# the chooser's defaults: each variant the sweep runs
SWEPT = {name: VARIANTS[name].DEFAULTS for name in sp.SWEPT}


def _as_rows_csv(text: str) -> str:
    """That CSV with its stock and shipped-tile launches labelled as bench rows are (the
    cold-best launches keep a label no row has)."""
    text = re.sub(r"NCU_ORDER (\w+) (\w+) M=8 stock x1", r"NCU_ORDER row \1 \2 M=8 stock x1", text)
    return re.sub(r"NCU_ORDER (\w+) (\w+) M=8 custom \{[^}]*\} x1",
                  r"NCU_ORDER row \1 \2 M=8 custom x1", text)


def _rows() -> list[dict]:
    return [{"shape": s, "dtype": "bfloat16", "M": 8, "floor_us": 12.5, "K": k, "N": n,
             "kernel": "mma_weights_a", "params": {}} for s, (k, n) in cv.SHAPES.items()]


def test_the_summary_of_an_ncu_csv_is_unchanged():
    """The parser the merge and the tile choice share gives the committed summary back."""
    md = NCU_COLD.with_suffix(".md")
    assert cvn.summarize(str(NCU_COLD)) == md.read_text()


def test_ncu_times_merge_into_the_bench_rows_with_what_limits_them():
    res = {"rows": _rows()}
    assert cvn.merge(res, _as_rows_csv(NCU_COLD.read_text()), "x.csv") == 2
    g, d = res["rows"]
    assert g["ncu_stock_us"] == pytest.approx(87.616) and g["ncu_custom_us"] == pytest.approx(50.56)
    assert g["ncu_custom_speedup_vs_stock"] == pytest.approx(87.616 / 50.56)
    assert g["ncu_custom_pct_ceiling"] == pytest.approx(12.5 / 50.56)
    assert d["ncu_stock_us"] == pytest.approx(224.896)
    assert g["ncu_custom_registers"] == 82 and g["ncu_custom_grid"] == "(544, 1, 1)"
    assert g["ncu_custom_achieved_occupancy_pct"] > 0
    assert any("Occupancy" in f for f in g["ncu_custom_findings"])
    assert res["ncu"]["rows_timed"] == 2
    md = ncu_chain_lines({"rows": res["rows"], "ncu": res["ncu"]})
    assert any(ln.startswith("| gate_up | bfloat16 | 8 | 12.5 | 87.6 | 50.6 |") for ln in md)


def _with_bare_reads(text: str) -> str:
    """The rows CSV, then for each of its two rows (gate/up and down) the two 50.2 MB launches
    of read_sizes.csv labelled as that row's bare read, renumbered after the rows' launches so
    that the launch order holds."""
    import csv
    import io

    def records(t: str) -> list[list[str]]:
        return [r for r in csv.reader(ln for ln in t.splitlines() if ln.startswith('"'))
                if r[0].isdigit()]
    reads = (H200 / "read_sizes.csv").read_text()
    ids = sorted({int(r[0]) for r in records(reads)})  # launch order; two per size
    order = [ln for ln in reads.splitlines() if ln.startswith("NCU_ORDER")]
    at = 2 * next(i for i, ln in enumerate(order) if ln.startswith("NCU_ORDER read 50.2 MB"))
    mb50 = ids[at:at + 2]
    next_id = max(int(r[0]) for r in records(text)) + 1
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    labels = []
    for shape in ("gate_up", "down"):
        labels.append(f"NCU_ORDER row {shape} bfloat16 M=8 read x2")
        for old in mb50:
            w.writerows([str(next_id), *r[1:]] for r in records(reads) if int(r[0]) == old)
            next_id += 1
    return "\n".join([text, *labels, buf.getvalue()])


def test_a_rows_bare_read_gives_the_share_of_what_a_read_of_its_size_reaches():
    """Each row's bare read (a kernel that only reads the row's bytes, alone under ncu) is
    merged as ``ncu_read_us``, and the custom kernel's share of that read's rate beside it."""
    res = {"rows": _rows()}
    assert cvn.merge(res, _with_bare_reads(_as_rows_csv(NCU_COLD.read_text())), "x.csv") == 2
    g, d = res["rows"]
    assert g["ncu_read_us"] == pytest.approx((13.6 + 14.56) / 2)  # read_sizes' 50.2 MB launches
    assert g["ncu_custom_pct_of_bare_read"] == pytest.approx(g["ncu_read_us"] / 50.56)
    assert d["ncu_read_us"] == pytest.approx(g["ncu_read_us"])
    assert g["ncu_custom_us"] == pytest.approx(50.56)  # the read is not taken for custom
    md = ncu_chain_lines({"rows": res["rows"], "ncu": res["ncu"]})
    assert any(ln.startswith("| gate_up | bfloat16 | 8 | 12.5 | 87.6 | 50.6 |")
               and "| 14.1 | 28% |" in ln for ln in md)


def test_a_launch_of_the_wrong_kernel_is_not_taken_for_the_path():
    """Labels and kernels out of step (a path that launched another kernel) leave the row
    without that time instead of giving it another launch's."""
    text = _as_rows_csv(NCU_COLD.read_text())
    swapped = (text.replace("M=8 stock x1", "M=8 TMP x1").replace("M=8 custom x1", "M=8 stock x1")
               .replace("M=8 TMP x1", "M=8 custom x1"))
    res = {"rows": _rows()}
    assert cvn.merge(res, swapped, "x.csv") == 0
    assert not any(k.startswith(("ncu_stock_us", "ncu_custom_us"))
                   for r in res["rows"] for k in r)


def _launches() -> list[dict]:
    return [{**k, "us": cvn.duration_us(k)} for k in cvn.parse(NCU_COLD.read_text())]


def test_the_m8_tile_is_the_fastest_alone_and_exact():
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    # the table as it was before the choice: the hot sweep's gate_up bf16 tile
    for e in table["entries"]:
        if e["devices"] == ["sm_90"] and e["shapes"] == ["gate_up"] and e["M"] == 8 and \
                e["dtypes"] == ["bfloat16"]:
            e.update(variant="mma_weights_a",
                     params={"n_tile": 32, "k_groups": 1, "unroll": 1, "prefetch": 1})
            e.pop("candidate", None)
    # the first cold sweep (2026-12-03 18:32 UTC) ran and checked the gate_up bf16 tiles
    cold = json.loads((H200 / "previous_cuda_verify_cold_sweep.json").read_text())
    new, rec = regen.choose_tiles(table, _launches(), cold, SWEPT, "ncu_cold.csv")
    c = rec["choices"]["gate_up/bfloat16/8"]
    assert c["chosen"] == {"n_tile": 32, "k_groups": 4, "unroll": 2, "prefetch": 0}
    assert c["us"] == pytest.approx(27.648) and c["previous_us"] == pytest.approx(50.56)
    e = next(e for e in new["entries"] if e["devices"] == ["sm_90"] and
             e["shapes"] == ["gate_up"] and e["M"] == 8 and e["dtypes"] == ["bfloat16"])
    assert (e.get("candidate") or e)["params"] == c["chosen"] and "ncu time alone" in e["chosen"]
    # a tile the cold sweep did not find bit-exact, or did not run, is never chosen
    for points in ([{**DEFAULTS, "n_tile": 32, "k_groups": 4, "unroll": 2, "prefetch": 0,
                     "ok": False}], [{**DEFAULTS, "n_tile": 32, "k_groups": 4, "unroll": 2,
                                      "prefetch": 0, "skipped": "time budget"}], []):
        bad = {"shapes": {"gate_up/bfloat16": {"points": points}}}
        new, rec = regen.choose_tiles(table, _launches(), bad, SWEPT, "ncu_cold.csv")
        assert "skipped" in rec["choices"]["gate_up/bfloat16/8"]
        assert new["entries"] == table["entries"]


def _gate_up_bf16(table: dict, m: int) -> dict:
    return next(e for e in table["entries"] if e["devices"] == ["sm_90"] and
                e["shapes"] == ["gate_up"] and e["M"] == m and e["dtypes"] == ["bfloat16"])


def test_an_fp16_tile_with_hi_in_place_can_be_chosen_and_launched_from_the_table():
    """A lever added after the chooser was written goes through it: the sweep's row keeps
    ``hi_in_place``, ncu's label carries it, the chosen params keep it (a default is left
    out), and the table's entry then launches with it."""
    from kernels import cuda

    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    e = next(e for e in table["entries"] if e["devices"] == ["sm_90"] and
             e["shapes"] == ["gate_up"] and e["M"] == 8 and e["dtypes"] == ["float16"])
    shipped = (e.get("candidate") or e)["params"]
    hi = {**shipped, "hi_in_place": 1}
    launches = [{"label": "gate_up float16 M=8 stock x2", "name": "qmm_sm80", "us": 82.0},
                {"label": f"gate_up float16 M=8 custom {shipped}", "name": "dflash2_x",
                 "us": 24.1},
                {"label": f"gate_up float16 M=8 tile {hi}", "name": "dflash2_x", "us": 22.5}]
    cold = {"shapes": {"gate_up/float16": {"points": [
        {**DEFAULTS, **hi, "ok": True, "exact_vs_register": True, "us": 22.0}]}}}
    new, rec = regen.choose_tiles(table, launches, cold, SWEPT, "synthetic")
    chosen = rec["choices"]["gate_up/float16/8"]["chosen"]
    assert chosen == {k: v for k, v in {**DEFAULTS, **hi}.items()
                      if k in regen.CORE_KEYS or v != DEFAULTS[k]}
    assert chosen["hi_in_place"] == 1
    ne = next(x for x in new["entries"] if x["devices"] == ["sm_90"] and
              x["shapes"] == ["gate_up"] and x["M"] == 8 and x["dtypes"] == ["float16"])
    params = (ne.get("candidate") or ne)["params"]
    cfg = cuda.launch_config("mma_weights_a", 8, 5120, 17408, 64, "float16", params)
    assert cfg.template["HI_IN_PLACE"] is True


def test_a_tile_of_another_variant_is_chosen_with_its_variant():
    """A point of ``mma_group_sums`` goes through the sweep's row, ncu's label and the choice
    with its variant: the entry then selects that variant with that variant's params (its
    defaults left out), and a tile of it the sweep did not find exact is never chosen."""
    from kernels import cuda

    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    e = _gate_up_bf16(table, 8)
    shipped = (e.get("candidate") or e)["params"]
    gs = sp.as_params(((32, 4, 1, 0, 0), {"variant": "mma_group_sums"}))
    launches = [{"label": "gate_up bfloat16 M=8 stock x2", "name": "qmm_sm80", "us": 88.0},
                {"label": f"gate_up bfloat16 M=8 custom {shipped}", "name": "dflash2_x",
                 "us": 24.0},
                {"label": f"gate_up bfloat16 M=8 tile {gs}", "name": "dflash2_x", "us": 19.0}]
    row = {**gs, "ok": True, "exact_vs_register": True}
    new, rec = regen.choose_tiles(table, launches, {"shapes": {"gate_up/bfloat16": {
        "points": [row]}}}, SWEPT, "synthetic")
    c = rec["choices"]["gate_up/bfloat16/8"]
    assert c["variant"] == "mma_group_sums" and c["previous_variant"] == "mma_weights_a"
    assert c["chosen"] == {"n_tile": 32, "k_groups": 4, "unroll": 1, "prefetch": 0}
    ne = _gate_up_bf16(new, 8)
    assert ne["variant"] == "mma_group_sums" and ne["params"] == c["chosen"]
    cfg = cuda.launch_config(ne["variant"], 8, 5120, 17408, 64, "bfloat16", ne["params"])
    assert cfg.template["UNROLL"] == 1 and "STAGES" not in cfg.template
    # the same tile of mma_weights_a checked is not this one: no choice
    other = {kk: v for kk, v in row.items() if kk != "variant"}
    new, rec = regen.choose_tiles(table, launches, {"shapes": {"gate_up/bfloat16": {
        "points": [other]}}}, SWEPT, "synthetic")
    assert "skipped" in rec["choices"]["gate_up/bfloat16/8"] and new["entries"] == table["entries"]


def test_the_choice_reads_one_ncu_csv_a_shape(tmp_path):
    """ncucold runs once a shape when the set outgrows a call (h200.sh: NCU_TAG, NCU_CSVS):
    ``--choose-from-ncu a.csv,b.csv`` takes both, and each shape's entry gets its fastest
    checked tile, here one of each variant."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())

    def entry(shape):
        return next(e for e in table["entries"] if e["devices"] == ["sm_90"] and
                    e["shapes"] == [shape] and e["M"] == 8 and e["dtypes"] == ["bfloat16"])
    gsums = sp.as_params(((16, 8, 1, 0, 0), sp.GSUMS))
    plain = sp.as_params((32, 4, 1, 1, 0))
    csvs, cold = [], {"shapes": {}}
    for shape, tile in (("gate_up", gsums), ("down", plain)):
        shipped = (entry(shape).get("candidate") or entry(shape))["params"]
        f = tmp_path / f"ncu_cold_{shape}.csv"
        f.write_text(cvn.csv_of([(f"{shape} bfloat16 M=8 stock", "qmm_sm80_kernel", 80.0),
                               (f"{shape} bfloat16 M=8 custom {shipped}", "dflash2_a", 25.0),
                               (f"{shape} bfloat16 M=8 tile {tile}", "dflash2_b", 20.0)]))
        csvs.append(str(f))
        cold["shapes"][f"{shape}/bfloat16"] = {"points": [{**tile, "ok": True}]}
    (tmp_path / "cold.json").write_text(json.dumps(cold))
    out, rec = tmp_path / "table.json", tmp_path / "choice.json"
    assert regen.main(["--choose-from-ncu", ",".join(csvs), "--cold-sweep",
                       str(tmp_path / "cold.json"), "--out", str(out),
                       "--choice-out", str(rec)]) == 0
    choices = json.loads(rec.read_text())["choices"]
    assert choices["gate_up/bfloat16/8"]["variant"] == "mma_group_sums"
    assert choices["down/bfloat16/8"]["variant"] == "mma_weights_a"
    assert choices["down/bfloat16/8"]["chosen"] == {"n_tile": 32, "k_groups": 4, "unroll": 1,
                                                    "prefetch": 1}
    new = json.loads(out.read_text())
    assert new["entries"] != table["entries"]


def test_an_m16_tile_is_chosen_only_from_tiles_checked_at_m16():
    """Each M's entry gets the tile fastest alone at that M; a sweep that checked the tiles at
    M=8 does not qualify them at M=16 (a tile's correctness and tiling depend on M)."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    m16 = {**_gate_up_bf16(table, 8), "M": 16, "variant": "stock", "params": {},
           "candidate": {"variant": "mma_weights_a",
                         "params": {"n_tile": 32, "k_groups": 1, "unroll": 1, "prefetch": 1}}}
    m16.pop("chosen", None)
    table["entries"] = [e for e in table["entries"] if not (
        e["devices"] == ["sm_90"] and e["shapes"] == ["gate_up"] and e["M"] == 16
        and e["dtypes"] == ["bfloat16"])] + [m16]
    at16 = [{**k, "label": k["label"].replace(" M=8 ", " M=16 ")} for k in _launches()]
    cold8 = json.loads((H200 / "previous_cuda_verify_cold_sweep.json").read_text())
    new, rec = regen.choose_tiles(table, at16, cold8, SWEPT, "ncu_cold.csv")
    assert "skipped" in rec["choices"]["gate_up/bfloat16/16"]
    assert new["entries"] == table["entries"]
    cold16 = {"shapes": {f"{k}/16": {**e, "point_m": 16} for k, e in cold8["shapes"].items()}}
    new, rec = regen.choose_tiles(table, at16, cold16, SWEPT, "ncu_cold.csv")
    c = rec["choices"]["gate_up/bfloat16/16"]
    assert c["chosen"] == {"n_tile": 32, "k_groups": 4, "unroll": 2, "prefetch": 0}
    e16 = _gate_up_bf16(new, 16)
    assert e16["variant"] == "stock" and e16["candidate"]["params"] == c["chosen"]
    assert _gate_up_bf16(new, 8) == _gate_up_bf16(table, 8)  # M=8 launches: none in the CSV


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
    from kernels import cuda

    k, n = cv.SHAPES[op]
    for pt in sp.POINTS[op]:
        name, p = sp.launch_of(sp.as_params(pt))
        for m in (8, 16):
            cfg = cuda.launch_config(name, m, k, n, 64, "float16", p)
            rep = cuda_offline.compile_launch(name, cfg)
            assert rep.registers > 0 and rep.spill_bytes == 0, (name, p, m, rep)
        if p.get("hi_in_place"):
            with pytest.raises(ValueError, match="float16 only"):
                cuda.launch_config(name, 8, k, n, 64, "bfloat16", p)


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


def test_the_read_sizes_summary_is_what_the_committed_ncu_csv_says():
    """bench/read_sizes_ncu.py's table (the rate a plain cold read of each size reaches alone)
    is made from ncu's CSV, labels from the script's NCU_ORDER lines: the committed table must
    be what its CSV gives, and the 50 MB row the median of its two launches (13.6, 14.56 us)."""
    import read_sizes_ncu as rs
    res = Path(__file__).resolve().parents[1] / "bench" / "results" / "h200"
    got = rs.summarize(str(res / "read_sizes.csv"))
    assert got.strip() == (res / "read_sizes.md").read_text().strip()
    row = next(ln for ln in got.splitlines() if ln.startswith("| read | 50.2 |"))
    assert row.split("|")[3].strip() == "14.1" and row.split("|")[5].strip() == "77%"


def test_the_committed_bench_json_renders_its_committed_markdown():
    """bench/cuda_verify_report renders a run from its JSON alone: the committed run and the
    one before give their committed markdown back line for line, and every row of the one-launch
    table of the newer run that had an ncu pass (the 04:23 UTC run of 2026-12-05 had none) holds
    the bare read of the row's bytes timed beside its kernels."""
    from cuda_verify_report import render
    rendered = {}
    for name in ("cuda_verify", "previous_run7_cuda_verify"):
        data = json.loads((H200 / f"{name}.json").read_text())
        got = render(data).splitlines()
        assert got == (H200 / f"{name}.md").read_text().splitlines(), name
        if any("ncu_custom_us" in r for r in data["rows"]):
            rendered.setdefault("ncu", got)
    got = rendered["ncu"]
    head = next(i for i, ln in enumerate(got) if "| ncu bare read µs |" in ln)
    rows = [ln.split("|") for ln in itertools.takewhile(lambda ln: ln.startswith("| "),
                                                         got[head + 2:])]
    col = got[head].split("|").index(" ncu bare read µs ")
    assert len(rows) == 18 and all(float(r[col]) > 0 for r in rows)


def test_a_denorm_row_that_ran_plain_says_so():
    """A table tile with ``denorm`` on weights whose scales are over its limit runs the plain
    path (the launch's fallback); the bench's row says so beside the tile, so its times are
    not read as the denorm tile's. A row that ran it, or a tile without it, reads as before."""
    from cuda_verify_report import render
    data = json.loads((H200 / "cuda_verify.json").read_text())
    first = data["rows"][0]
    before = render(data).splitlines()
    for runs, extra in ((True, False), (False, True)):
        rows = [{**first, "params": {**first["params"], "denorm": 2}, "denorm_runs": runs,
                 "scales_max_abs": 0.0085}] + data["rows"][1:]
        got = render({**data, "rows": rows}).splitlines()
        notes = [ln for ln in got if "ran plain: scales up to 0.0085, over denorm's limit" in ln]
        assert len(notes) == extra and len(got) == len(before)


def test_the_sms_imbalance_is_read_where_the_run_measured_it(tmp_path):
    """sm__cycles_active's max over its mean says how long the busiest SM ran past the mean
    one (544 blocks on 132 SMs leave 16 SMs a fifth block): a column of the summary and a
    key of the merged row where the CSV has both, and neither where it has not."""
    text = cvn.csv_of([("row gate_up bfloat16 M=8 custom", "dflash2_mma_weights_a", 22.5)])
    rows = text.splitlines()
    rows += [rows[-1].replace("gpu__time_duration.sum", name).replace('"usecond"', '"cycle"')
             .replace('"22.5"', f'"{v}"') for name, v in (("sm__cycles_active.max", "50,000"),
                                                           ("sm__cycles_active.avg", "40,000"))]
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text("\n".join(rows) + "\n")
    md = cvn.summarize(str(csv_path)).splitlines()
    assert md[0].endswith("| SM busy max/mean |") and md[2].endswith("| 1.25 |")
    plain = tmp_path / "plain.csv"
    plain.write_text(text)
    assert "SM busy" not in cvn.summarize(str(plain))
    (k,) = cvn.parse(csv_path.read_text())
    assert cvn.sm_imbalance(k) == 1.25 and cvn.sm_imbalance(cvn.parse(text)[0]) is None
    rows = [{"shape": "gate_up", "dtype": "bfloat16", "M": 8, "floor_us": 13.0}]
    cvn.merge({"rows": rows}, csv_path.read_text(), "ncu.csv")
    assert rows[0]["ncu_custom_sm_busy_max_over_mean"] == 1.25
    from cuda_verify_report import has_sm_busy
    assert has_sm_busy({"rows": rows}) and not has_sm_busy({"rows": [{}]})
    table = [ln for ln in ncu_chain_lines({"rows": rows, "ncu": {}}) if ln.startswith("| ")]
    assert table[0].endswith("| custom SM busy max/mean |") and table[1].endswith("| 1.25 |")


def test_the_diagnostic_tiles_are_the_tables_and_the_balanced_ones_and_all_launch():
    """h200.sh diagnose times the table's M=8 bf16 tiles ablated (1 and 2) and the BALANCED
    gate/up tiles: taken from the table and the set, so they follow whatever ships, and each
    one builds a launch at both shapes (a tile that cannot would cost the run an error)."""
    from kernels import cuda
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    ablate = sp.diagnostic_tiles("ablate", table)
    shipped = {(e["shapes"][0], e["variant"]) for e in table["entries"]
               if e["devices"] == ["sm_90"] and e["M"] == 8 and e["dtypes"] == ["bfloat16"]
               and e["shapes"][0] in ("gate_up", "down")}
    weights_a = sum(v == sp.NAME for _, v in shipped)  # whose math alone is also denormed
    assert sorted({t["ablate"] for t in ablate}) == [1, 2]
    assert len(ablate) == 4 + 2 * weights_a and weights_a >= 1
    assert sorted(t.get("denorm", 0) for t in ablate if t["ablate"] == 2) == \
        [0] * 2 + [1, 2] * weights_a
    assert {t.get("variant", sp.NAME) for t in ablate} == {v for _, v in shipped}
    balanced = sp.diagnostic_tiles("balanced", table)
    assert [t["n_tile"] for t in balanced] == [16] * 4 and {t["k_groups"] for t in balanced} == {2}
    for t in ablate + balanced:
        for op in ("gate_up", "down"):
            k, n = cv.SHAPES[op]
            name, p = sp.launch_of(t)
            assert cuda.launch_config(name, 8, k, n, 64, "bfloat16", p).grid > 0
    with pytest.raises(ValueError, match="no diagnostic tiles named 'hot'"):
        sp.diagnostic_tiles("hot", table)


def test_the_report_states_each_miss_of_the_goal_in_us():
    """The bench says by how much a row misses 70% of its run's ceiling (issue 14), from ncu's
    time alone where the run has one, else from the chain; a row at the goal is met."""
    from cuda_verify_report import goal_lines
    rows = [{"shape": "gate_up", "dtype": "bfloat16", "M": 8, "floor_us": 14.0,
             "ncu_custom_us": 20.0, "chain_custom_compiled_us": 30.0},
            {"shape": "down", "dtype": "float16", "M": 8, "floor_us": 14.0,
             "ncu_custom_us": 23.0, "chain_custom_compiled_us": 24.0},
            {"shape": "down", "dtype": "float16", "M": 16, "floor_us": 14.0,
             "chain_custom_compiled_us": 21.0},
            {"shape": "vocab", "dtype": "float16", "M": 16, "floor_us": 14.0}]
    got = [ln.split("|") for ln in goal_lines({"rows": rows}) if ln.startswith("| ")][1:]
    assert [c[10].strip() for c in got] == [
        "met", "missed by 3.0 µs (ncu)", "missed by 1.0 µs (chain)"]
    assert [c[5].strip() for c in got] == ["20.0"] * 3
    assert got[1][7].strip() == "+3.0 (+15%)" and got[0][9].strip() == "+10.0 (+50%)"
    assert goal_lines({"rows": rows[3:]}) == []
    # the committed run: gate/up and down miss at M=8, the vocab head meets it
    md = (H200 / "cuda_verify.md").read_text()
    verdict = {tuple(c.strip() for c in ln.split("|")[1:4]): ln.split("|")[10].strip()
               for ln in md[md.index("**Against the goal**"):].splitlines()
               if ln.startswith("| ") and ln.count("|") == 11 and "shape" not in ln}
    assert verdict[("vocab", "bfloat16", "8")] == "met"
    assert verdict[("gate_up", "bfloat16", "8")].startswith("missed by 3.9")


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
    import mlx.core as mx

    from kernels import cuda
    from kernels.qweights import QWeights

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


def test_the_issue_slots_use_is_read_where_the_run_measured_it(tmp_path):
    """The share of cycles a scheduler issued, and the warp instructions in all (millions):
    two columns of the summary where the CSV has them, none where it has not."""
    text = cvn.csv_of([("tile gate_up bfloat16 M=8 ablate 2", "dflash2_mma_weights_a", 18.6)])
    rows = text.splitlines()
    rows += [rows[-1].replace("gpu__time_duration.sum", name).replace('"usecond"', f'"{unit}"')
             .replace('"18.6"', f'"{v}"') for name, unit, v in (
                 (cvn.ISSUE_ACTIVE, "%", "91.37"), (cvn.WARP_INSTRUCTIONS, "inst", "12,345,678"))]
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text("\n".join(rows) + "\n")
    md = cvn.summarize(str(csv_path)).splitlines()
    assert md[0].endswith("| issue active % | warp inst (M) |")
    assert md[1].count("|---") == 12 and md[2].endswith("| 91.4 | 12.3 |")
    plain = tmp_path / "plain.csv"
    plain.write_text(text)
    assert "issue active" not in cvn.summarize(str(plain))


def test_the_m16_ablated_tiles_are_the_tables_m16_tiles_and_launch_at_m16():
    """``ablate16``: the table's M=16 gate/up and down bf16 tiles with a part taken out, each
    building a launch at M=16 on both shapes."""
    from kernels import cuda
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    tiles = sp.diagnostic_tiles("ablate16", table)
    shipped = [sp.point_of(e["variant"], e["params"]) for e in table["entries"]
               if e["devices"] == ["sm_90"] and e["M"] == 16 and e["dtypes"] == ["bfloat16"]
               and e["shapes"][0] in ("gate_up", "down")]
    assert len(shipped) == 2
    assert tiles == [x for t in shipped for x in [{**t, "ablate": a} for a in (1, 2)] + (
        [{**t, "denorm": d, "ablate": 2} for d in (1, 2)] if "variant" not in t else [])]
    for t in tiles:
        for op in ("gate_up", "down"):
            k, n = cv.SHAPES[op]
            name, p = sp.launch_of(t)
            assert cuda.launch_config(name, 16, k, n, 64, "bfloat16", p).grid > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_benchs_weights_allow_denorm_and_its_compiled_path_says_so(dtype, monkeypatch):
    """The bench's weights (its own quantization, gate/up's and down's K) have scales well
    inside ``denorm``'s limit, so its tiles run as such on the device; and the compiled path,
    whose launch sees only tracers, is told the copies' largest scale by the bench's own check
    of every copy, not left to time the plain path under a denorm tile's name. A copy with one
    scale at the limit turns it off, and the rows say which path a denorm tile ran."""
    dt = cv.DTYPES[dtype]
    limit = cuda.DENORM_SCALE_LIMIT[dtype, 1]
    for k in (5120, 17408):
        copies = cv.make_copies(k, 128, dt, 2)
        magnitude = cv.scale_magnitude(copies)
        worst = max(mx.abs(c.scales).max().item() for c in copies)
        assert magnitude == worst < limit / 2, (k, worst)  # room, not a near miss
        assert cuda.denorm_fits(magnitude, dtype, 1)
    s = copies[0].scales
    bad = QWeights(copies[0].wq, s.at[0, 0].add(limit - s[0, 0]), copies[0].biases,
                   cv.GS, cv.BITS)
    assert not cuda.denorm_fits(cv.scale_magnitude([copies[1], bad]), dtype, 1)
    seen = []
    monkeypatch.setattr(cv.cuda, "launch", lambda name, x, qw, params: seen.append(qw))
    for told in (magnitude, None):
        paths = cv.paths_for("mma_weights_a", {**DEFAULTS, "denorm": 1}, told)
        paths["custom_compiled"](mx.zeros((8, 5120), dt), copies[0])
        assert seen[-1].scales_max_abs == told
    # the record: fp16's denorm 2 (times 2^24) stops at 2^-8, bf16's at 2^-5, as at denorm 1
    two = {**DEFAULTS, "denorm": 2}
    assert cv.denorm_record(DEFAULTS, dtype, 0.005) == {}
    assert cv.denorm_record(two, dtype, 0.005) == {"denorm_runs": dtype == "bfloat16",
                                                   "scales_max_abs": 0.005}
    assert cv.denorm_record(two, dtype, 0.003)["denorm_runs"]
