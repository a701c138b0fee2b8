"""The tiles chosen from ncu's time of each launch ALONE, per shape, dtype and M (issue 14):
scripts/regen_sm90_table.py --choose-from-ncu on committed ncu output and cold sweeps, and the
chosen table's launches. Pure Python: no GPU, no ncu."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "bench" / "results" / "h200"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import cuda_verify_ncu as cvn
import regen_sm90_table as regen
import sm90_tile_choice as choice
import sweep_points as sp
import sweep_records as sr

from kernels import cuda
from kernels.variants import VARIANTS
from kernels.variants.mma_weights_a import DEFAULTS

# The first ncu run (2026-12-03 18:38 UTC): bf16 at M=8, per shape stock, the shipped tile and the
# cold sweep's best, one launch each, with the SpeedOfLight/Occupancy/WarpStateStats sections.
NCU_COLD = H200 / "previous_ncu_cold.csv"
# the chooser's defaults: each variant the sweep runs
SWEPT = {name: VARIANTS[name].DEFAULTS for name in sp.SWEPT}


def _kernel(variant: str) -> str:
    """A custom launch's kernel name as ncu reports it: the variant is in it (the ``custom``
    label, the table's own tile, names only the params)."""
    return f"mlx::core::cu::custom_kernel_dflash2_{variant}_bfloat16_t_8_2_4"


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
    new, rec = choice.choose_tiles(table, _launches(), cold, SWEPT, "ncu_cold.csv")
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
        new, rec = choice.choose_tiles(table, _launches(), bad, SWEPT, "ncu_cold.csv")
        assert "skipped" in rec["choices"]["gate_up/bfloat16/8"]
        assert new["entries"] == table["entries"]


def _gate_up_bf16(table: dict, m: int) -> dict:
    return next(e for e in table["entries"] if e["devices"] == ["sm_90"] and
                e["shapes"] == ["gate_up"] and e["M"] == m and e["dtypes"] == ["bfloat16"])


def test_an_fp16_tile_with_hi_in_place_can_be_chosen_and_launched_from_the_table():
    """A lever added after the chooser was written goes through it: the sweep's row keeps
    ``hi_in_place``, ncu's label carries it, the chosen params keep it (a default is left
    out), and the table's entry then launches with it."""

    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    e = next(e for e in table["entries"] if e["devices"] == ["sm_90"] and
             e["shapes"] == ["gate_up"] and e["M"] == 8 and e["dtypes"] == ["float16"])
    # the entry as a register-pipeline tile (the table ships a bulk tile with denorm 1 since the
    # 2026-12-07 20:07 UTC bench; denorm and hi_in_place are two ways to take the nibbles)
    e.pop("candidate", None)
    e["variant"], e["params"] = "mma_weights_a", {"n_tile": 32, "k_groups": 4, "unroll": 1,
                                                  "prefetch": 0, "x_early": 1}
    shipped = e["params"]
    hi = {**shipped, "hi_in_place": 1}
    launches = [{"label": "gate_up float16 M=8 stock x2", "name": "qmm_sm80", "us": 82.0},
                {"label": f"gate_up float16 M=8 custom {shipped}",
                 "name": _kernel((e.get("candidate") or e)["variant"]), "us": 24.1},
                {"label": f"gate_up float16 M=8 tile {hi}", "name": _kernel(sp.NAME),
                 "us": 22.5}]
    cold = {"shapes": {"gate_up/float16": {"points": [
        {**DEFAULTS, **hi, "ok": True, "exact_vs_register": True, "us": 22.0}]}}}
    new, rec = choice.choose_tiles(table, launches, cold, SWEPT, "synthetic")
    chosen = rec["choices"]["gate_up/float16/8"]["chosen"]
    assert chosen == {k: v for k, v in {**DEFAULTS, **hi}.items()
                      if k in choice.CORE_KEYS or v != DEFAULTS[k]}
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

    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    e = _gate_up_bf16(table, 8)
    shipped = (e.get("candidate") or e)["params"]
    gs = sp.as_params(((32, 4, 1, 0, 0), {"variant": "mma_group_sums"}))
    launches = [{"label": "gate_up bfloat16 M=8 stock x2", "name": "qmm_sm80", "us": 88.0},
                {"label": f"gate_up bfloat16 M=8 custom {shipped}",
                 "name": _kernel((e.get("candidate") or e)["variant"]), "us": 24.0},
                {"label": f"gate_up bfloat16 M=8 tile {gs}", "name": _kernel("mma_group_sums"),
                 "us": 19.0}]
    row = {**gs, "ok": True, "exact_vs_register": True}
    new, rec = choice.choose_tiles(table, launches, {"shapes": {"gate_up/bfloat16": {
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
    new, rec = choice.choose_tiles(table, launches, {"shapes": {"gate_up/bfloat16": {
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
        own = entry(shape).get("candidate") or entry(shape)
        f = tmp_path / f"ncu_cold_{shape}.csv"
        f.write_text(cvn.csv_of([
            (f"{shape} bfloat16 M=8 stock", "qmm_sm80_kernel", 80.0),
            (f"{shape} bfloat16 M=8 custom {own['params']}", _kernel(own["variant"]), 25.0),
            (f"{shape} bfloat16 M=8 tile {tile}",
             _kernel(tile.get("variant", sp.NAME)), 20.0)]))
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
    new, rec = choice.choose_tiles(table, at16, cold8, SWEPT, "ncu_cold.csv")
    assert "skipped" in rec["choices"]["gate_up/bfloat16/16"]
    assert new["entries"] == table["entries"]
    cold16 = {"shapes": {f"{k}/16": {**e, "point_m": 16} for k, e in cold8["shapes"].items()}}
    new, rec = choice.choose_tiles(table, at16, cold16, SWEPT, "ncu_cold.csv")
    c = rec["choices"]["gate_up/bfloat16/16"]
    assert c["chosen"] == {"n_tile": 32, "k_groups": 4, "unroll": 2, "prefetch": 0}
    e16 = _gate_up_bf16(new, 16)
    assert e16["variant"] == "stock" and e16["candidate"]["params"] == c["chosen"]
    assert _gate_up_bf16(new, 8) == _gate_up_bf16(table, 8)  # M=8 launches: none in the CSV


def test_the_entrys_own_tile_is_known_by_its_kernel_and_no_choice_is_made_without_it():
    """The table's own tile runs labelled ``custom {params}`` (no variant): its variant is the
    kernel's. Keyed as mma_weights_a, a group-sums entry's own launch never met its entry, and
    a slower tile of another variant replaced it (2026-12-05 12:50 UTC, gate/up fp16 M=8:
    chosen at 22.5 us with the entry's own time '-'). Without the entry's own tile among the
    launches nothing is chosen. (Played on down fp16 M=8, a group-sums entry today: gate/up
    fp16 M=8 runs mma_weights_a's bulk tile since the 2026-12-07 20:07 UTC bench.)"""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    e = next(e for e in table["entries"] if e["devices"] == ["sm_90"] and
             e["shapes"] == ["down"] and e["M"] == 8 and e["dtypes"] == ["float16"])
    own = e.get("candidate") or e
    assert own["variant"] == "mma_group_sums"  # the case: the entry's variant is not the default
    other = sp.as_params((32, 4, 1, 0, 0))
    cold = {"shapes": {"down/float16": {"points": [{**other, "ok": True}]}}}
    stock = {"label": "down float16 M=8 stock x2", "name": "qmm_sm80", "us": 82.0}
    mine = {"label": f"down float16 M=8 custom {own['params']}",
            "name": _kernel("mma_group_sums"), "us": 20.0}
    theirs = {"label": f"down float16 M=8 tile {other}", "name": _kernel(sp.NAME),
              "us": 22.5}
    new, rec = choice.choose_tiles(table, [stock, mine, theirs], cold, SWEPT, "synthetic")
    c = rec["choices"]["down/float16/8"]  # its own launch found: it is the fastest
    assert "own tile is the fastest" in c["kept"] and c["previous_us"] == pytest.approx(20.0)
    assert new["entries"] == table["entries"]  # kept as it is, its note included
    for without in ([stock, theirs], [stock, {**mine, "name": "dflash2_unknown"}, theirs]):
        new, rec = choice.choose_tiles(table, without, cold, SWEPT, "synthetic")
        assert "not timed" in rec["choices"]["down/float16/8"]["skipped"]
        assert new["entries"] == table["entries"]


def test_a_tile_replaces_the_entrys_own_only_when_faster_at_every_launch():
    """Medians 22.1 against 23.0 us replace the entry's tile when every launch of the new one
    is faster (22.4 < 22.6, gate/up bf16 M=8 on the H200, 12:47 UTC); launches that overlap
    (22.2-22.8 against 22.7-23.2) keep it, the figures in the record."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    entry = _gate_up_bf16(table, 8)
    # the entry as it was before that choice: its tile plain (the table now ships denorm 2)
    entry["params"] = {k: v for k, v in entry["params"].items() if k != "denorm"}
    own = entry.get("candidate") or entry
    assert entry["variant"] == "mma_weights_a"
    dn2 = {**sp.as_params(tuple(own["params"][k] for k in ("n_tile", "k_groups", "unroll",
                                                            "prefetch")) + (0,)), "denorm": 2}
    cold = {"shapes": {"gate_up/bfloat16": {"points": [{**dn2, "ok": True}]}}}

    def run(mine: tuple, theirs: tuple):
        launches = [{"label": "gate_up bfloat16 M=8 stock", "name": "qmm_sm80", "us": 88.0}]
        launches += [{"label": f"gate_up bfloat16 M=8 custom {own['params']}",
                      "name": _kernel(own["variant"]), "us": us} for us in mine]
        launches += [{"label": f"gate_up bfloat16 M=8 tile {dn2}", "name": _kernel(sp.NAME),
                      "us": us} for us in theirs]
        return choice.choose_tiles(table, launches, cold, SWEPT, "synthetic")

    new, rec = run((22.6, 23.4), (21.7, 22.4))
    assert rec["choices"]["gate_up/bfloat16/8"]["chosen"]["denorm"] == 2
    assert _gate_up_bf16(new, 8)["params"]["denorm"] == 2
    new, rec = run((22.7, 23.2), (22.2, 22.8))
    c = rec["choices"]["gate_up/bfloat16/8"]
    assert "every launch" in c["kept"] and c["us"] < c["previous_us"]
    assert new["entries"] == table["entries"]


def _bulk3_choice(final: list[dict]):
    """gate/up bf16 M=8: a bulk = 3 tile at denorm 2, checked by its sweep (with ``final``: its
    times eager and compiled), faster alone at every launch than the entry's own."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    own = _gate_up_bf16(table, 8)
    pt = {**sp.as_params(sr.BULK3_TILES_2026_12_05["gate_up"][0]), **sp.DENORM_2}
    cold = {"shapes": {"gate_up/bfloat16": {"points": [{**pt, "ok": True}], "final": [
        {**f, "params": pt} for f in final]}}}
    launches = [{"label": "gate_up bfloat16 M=8 stock", "name": "qmm_sm80", "us": 88.0}]
    launches += [{"label": f"gate_up bfloat16 M=8 custom {own['params']}",
                  "name": _kernel(own["variant"]), "us": us} for us in (22.2, 22.5)]
    launches += [{"label": f"gate_up bfloat16 M=8 tile {pt}", "name": _kernel(sp.NAME),
                  "us": us} for us in (18.0, 18.4)]
    return table, choice.choose_tiles(table, launches, cold, SWEPT, "synthetic")


def test_a_bulk_3_tile_can_be_chosen_and_its_entry_launches_packed():
    """A bulk = 3 tile timed compiled within 10% of eager by its sweep: its check-sweep row
    and ncu label carry ``bulk`` 3, ``stages`` and ``denorm``, the chosen params keep them,
    and the entry then builds a launch on packed weights (one copy a stage) at gate/up M=8."""
    _, (new, rec) = _bulk3_choice([{"M": 8, "custom_eager_us": 23.0, "custom_compiled_us": 24.5}])
    chosen = rec["choices"]["gate_up/bfloat16/8"]["chosen"]
    assert (chosen["bulk"], chosen["stages"], chosen["denorm"]) == (3, 4, 2)
    assert "refused_packed" not in rec
    entry = _gate_up_bf16(new, 8)
    assert entry["params"] == chosen and entry["variant"] == sp.NAME
    cfg = cuda.launch_config(sp.NAME, 8, 5120, 17408, 64, "bfloat16", entry["params"])
    assert cfg.threads == 128 and cfg.packing == (32, 4, 1) and cfg.template["LEADER"]
    from kernels.selection import build_table
    build_table(new)  # the table's loader takes it (bulk 3 is a choice the tiling allows)


@pytest.mark.parametrize("final, ratio", [
    ([], None),  # never timed compiled (a --check-only sweep, as at 16:16 UTC)
    ([{"M": 8, "custom_eager_us": 23.6, "custom_compiled_us": 50.0}], 50.0 / 23.6),  # 16:22's
    ([{"M": 8, "custom_eager_us": 23.0, "custom_compiled_us": 25.4}], 25.4 / 23.0),  # 1.104
    ([{"M": 16, "custom_eager_us": 23.0, "custom_compiled_us": 23.0}], None)])  # another M's
def test_a_packed_tile_is_not_chosen_without_its_compiled_time_near_eager(final, ratio):
    """The H200's 16:16 choice took a bulk = 3 tile by its time alone (20.8 against 22.0 us);
    the bench that then ran the chosen table found it 23.6 us eager and 50.0 compiled, the
    pack of w made in the compiled graph on every call (bench/results/h200/bulk3_1616). A tile
    that packs w is now refused unless its sweep timed it compiled, at that M, within 1.10x of
    its eager time; the refusal is in the record with the ratio (None: untimed)."""
    table, (new, rec) = _bulk3_choice(final)
    c = rec["choices"]["gate_up/bfloat16/8"]
    assert "skipped" in c and "refused" in c["skipped"] and new["entries"] == table["entries"]
    (r,) = rec["refused_packed"]["gate_up/bfloat16/8"]["tiles"]
    assert r["params"]["bulk"] == 3
    assert r["compiled_over_eager"] == (ratio and pytest.approx(ratio))


@pytest.mark.parametrize("compiled, chosen", [(24.0, True), (30.0, False), (None, False)])
def test_a_packed_candidate_is_judged_by_its_own_compiled_time(compiled, chosen):
    """With ``--time-each`` the sweep times every final candidate compiled, not only its best:
    a packing tile that was not the sweep's best is judged by its own candidate's compiled
    time over its eager (24.0 / 23.0 chosen, 30.0 / 23.0 refused, untimed refused)."""
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    own = _gate_up_bf16(table, 8)
    pt = {**sp.as_params(sr.BULK3_TILES_2026_12_05["gate_up"][0]), **sp.DENORM_2}
    other = {**sp.as_params((32, 4, 2, 0, 0)), **sp.DENORM_2}
    cand = ({"us": 23.0, **pt} if compiled is None
            else {"us": 23.0, "timed": {"compiled_us": compiled, "alone_us": 25.0}, **pt})
    final = {"M": 8, "params": other, "custom_eager_us": 22.0, "custom_compiled_us": 22.5,
             "candidates": [{"us": 22.0, **other}, cand]}
    cold = {"shapes": {"gate_up/bfloat16": {"points": [{**pt, "ok": True}], "final": [final]}}}
    launches = [{"label": "gate_up bfloat16 M=8 stock", "name": "qmm_sm80", "us": 88.0}]
    launches += [{"label": f"gate_up bfloat16 M=8 custom {own['params']}",
                  "name": _kernel(own["variant"]), "us": us} for us in (22.2, 22.5)]
    launches += [{"label": f"gate_up bfloat16 M=8 tile {pt}", "name": _kernel(sp.NAME),
                  "us": us} for us in (18.0, 18.4)]
    new, rec = choice.choose_tiles(table, launches, cold, SWEPT, "synthetic")
    got = rec["choices"]["gate_up/bfloat16/8"]
    if chosen:
        assert got["chosen"]["bulk"] == 3 and "refused_packed" not in rec
    else:
        (r,) = rec["refused_packed"]["gate_up/bfloat16/8"]["tiles"]
        assert r["compiled_over_eager"] == (compiled and pytest.approx(compiled / 23.0))
        assert new["entries"] == table["entries"]


def test_the_16_16_choice_on_its_own_records_keeps_the_entry(tmp_path):
    """The 16:16 UTC inputs as committed (the bulk tiles alone under ncu, their --check-only
    sweep): the CLI refuses both bulk = 3 tiles, prints why, and writes the table unchanged."""
    rec = H200 / "bulk3_1616"
    out, choice_out = tmp_path / "table.json", tmp_path / "choice.json"
    table = ROOT / "kernels" / "selection_table.json"
    csvs = ",".join(str(rec / f"bulk_{shape}_ncu_cold.csv") for shape in ("gate_up", "down"))
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "regen_sm90_table.py"),
                        "--choose-from-ncu", csvs,
                        "--cold-sweep", str(rec / "bulk_check_cold_sweep.json"),
                        "--table", str(table), "--out", str(out),
                        "--choice-out", str(choice_out)],
                       check=False, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "refused" in r.stdout and "untimed" in r.stdout
    assert json.loads(out.read_text())["entries"] == json.loads(table.read_text())["entries"]
    refused = json.loads(choice_out.read_text())["refused_packed"]["gate_up/bfloat16/8"]
    assert sorted(t["params"]["stages"] for t in refused["tiles"]) == [3, 4]


def test_the_h100_18_30_choice_on_its_own_records_takes_the_2_stage_bulk_tile(tmp_path):
    """The H100's 18:30 UTC choice from its committed inputs (bench/results/h100/layouts_1826:
    gate/up's tiles alone under ncu, the timed 18:27 sweep whose candidates were each timed
    compiled with w's layout made at load): bulk 3 with 2 stages, compiled 1.00x its eager,
    is taken (23.4 against 25.2 us alone); the 3-stage tile (1.07x) is not refused either."""
    rec = ROOT / "bench" / "results" / "h100" / "layouts_1826"
    out, choice_out = tmp_path / "table.json", tmp_path / "choice.json"
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "regen_sm90_table.py"),
                        "--choose-from-ncu",
                        str(rec / "diagnose_1828" / "bulk_gate_up_ncu_cold.csv.gz"),
                        "--cold-sweep", str(rec / "sweep_1827" / "cuda_verify_cold_sweep.json"),
                        # the table in effect then (the 2026-12-05 14:17 bench's): the shipped
                        # one has held the tile this choice took since 2026-12-07
                        "--table", str(ROOT / "bench/results/h200/bench_1417/candidate_table.json"),
                        "--out", str(out), "--choice-out", str(choice_out)],
                       check=False, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    got = json.loads(choice_out.read_text())
    c = got["choices"]["gate_up/bfloat16/8"]
    assert (c["chosen"]["bulk"], c["chosen"]["stages"], c["chosen"]["unroll"]) == (3, 2, 1)
    assert round(c["us"], 1) == 23.4 and round(c["previous_us"], 1) == 25.2
    assert "refused_packed" not in got
    def tiles(table):  # the note names the CSV, whose name the device gave it differently
        return [(e["variant"], e.get("params")) for e in table["entries"]]
    assert tiles(json.loads(out.read_text())) == tiles(json.loads(
        (rec / "choice_1830" / "chosen_table.json").read_text()))


def test_a_clustered_tile_is_never_chosen_even_when_fastest_alone():
    """kernels.cuda.refuse_cluster_under_graphs: a clustered tile runs only with MLX's CUDA
    graphs off. The H100's ncu run of the x-sharing points (2026-12-07 08:42, graphs off), with
    the clustered gate_up tile made the fastest by hand: the plain tile is still chosen."""
    run = ROOT / "bench" / "results" / "h100" / "xshare_0830" / "graphs_off_0840"
    launches = [{**k, "us": cvn.duration_us(k)} for k in cvn.parse(
        (run / "ncu_cold.csv").read_text())]
    clustered = [k for k in launches if k["label"].startswith("gate_up bfloat16 M=8 tile")
                 and "'cluster': 4" in k["label"]]
    assert clustered and all(k["us"] > 24 for k in clustered)  # as measured: all slower
    for k in clustered:
        k["us"] = 1.0
    cold = json.loads((run / "cuda_verify_cold_sweep.json").read_text())
    table = json.loads((ROOT / "kernels" / "selection_table.json").read_text())
    new, rec = choice.choose_tiles(table, launches, cold, SWEPT, "ncu_cold.csv")
    c = rec["choices"]["gate_up/bfloat16/8"]
    assert "cluster" not in c.get("chosen", {}), c
    assert all(p["cluster"] == 4 for p in rec["refused_clustered"]["gate_up/bfloat16/8"])
    from kernels.selection import build_table
    build_table(new)  # the chosen table loads: no clustered entry
