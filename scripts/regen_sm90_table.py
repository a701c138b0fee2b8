"""Regenerate the sm_90 entries of the selection table from the H200's cold measurements.

    python scripts/regen_sm90_table.py [--results bench/results/h200/cuda_verify.json]
                                       [--table kernels/selection_table.json] [--out PATH]
                                       [--check]

The results file is what ``bench/cuda_verify.py --table-rows`` wrote on the H200: for every
sm_90 entry of the table, its custom candidate and stock as the runtime runs it, cold weights
(a different copy per launch, rotating over more than 2x L2), each timed over several batches
of launches. The figure compared is the wall time per launch as an eager caller sees it (the
batch's graph built and evaluated), median over the batches.

An entry is kept only where custom beats stock by more than the noise: the margin
(stock - custom, µs) must exceed the larger of the two spreads (max - min over the batches).
Those batches are of independent launches, which MLX lets overlap; where the bench's main rows
hold ncu's time of the same kernel and tile at that shape, dtype and M (each launch alone, cold:
``bench/cuda_verify.py --ncu``), an entry whose batched margin does not clear the noise is kept
if its one-launch margin clears both the ncu launches' spread and the batches' noise.
An entry kept so is still dropped where the bench's main row of its shape, dtype and M ran
its kernel and tile and every compiled batch (the weights the compiled function's inputs) took
over 1.10x the slowest eager one: issue 14 wants eager within 10% of compiled, and a launch
that is another kernel compiled was not measured by the eager figures.
Otherwise the entry selects stock (selection reason ``fallback:measured``), keeps its custom
``candidate`` (the next run measures it again and may restore it) and states the ``reason``
with the figures. An entry the results do not measure (or whose candidate failed there) is
dropped to stock the same way. An entry with a ``hold`` (why, by hand) selects stock whatever
its candidate measured, the figures in its ``reason``, until the hold is taken out: for what the
numbers cannot say, e.g. a suite that states the fallback and must first check the tuned kernel.
Every other device's entries are left exactly as they are.

Writes the table in place (or to ``--out``); ``--check`` writes nothing and exits 1 when the
table differs from what the results say it should be.

The TILE of the gate_up and down entries (at each M the profile holds) is chosen before that,
from each launch ALONE:

    python scripts/regen_sm90_table.py --choose-from-ncu ncu_cold.csv \
        --cold-sweep cuda_verify_cold_sweep.json [--table ...] [--out ...] [--choice-out J]

reads ncu's kernel time of every tile of the cold sweep's set (bench/cuda_verify_cold_sweep.py)
under ``h200.sh ncucold --points`` (each launch alone, caches flushed), keeps the tiles that
sweep ran and found bit-exact and close to stock (and the entry's own tile, known by its
kernel's name), and puts the fastest (median over its launches) into the entry (its
``candidate`` where the entry selects stock), with a ``chosen`` note, only where every launch of
it beat every launch of the entry's own tile in the same launches; else the entry is left as it
is, the figures in the record. The batched sweep's own ranking is not used (it lets
independent launches overlap). The full record (every tile's time, stock's, the previous
tile's) goes to ``--choice-out``. After a change, the reviewed record of selections (suites/expected_selections.json) must be reviewed and rewritten with
``python -m suites.expected_selections --write``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sm90_tile_choice import COMPILED_OVER_EAGER, choose_tiles

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "sm_90"
STOCK = "stock"


def _spread(batches: list[float]) -> float:
    return max(batches) - min(batches)


def _key(shape: str, dtype: str, m: int, gs: int) -> tuple:
    return (shape, dtype, int(m), int(gs))


def _ran(alone: dict | None, variant: str, params: dict) -> bool:
    """Whether the bench's main row ran this same kernel and tile (its figures then apply)."""
    return bool(alone and alone.get("kernel") == variant and alone.get("params") == params)


def compiled_gap(alone: dict | None, variant: str, params: dict) -> dict | None:
    """The figures where the bench's main row ran this kernel and tile and its cold compiled
    launch (the weights the compiled function's inputs) was over COMPILED_OVER_EAGER (the tile
    choice's: issue 14's eager within 10% of compiled) times its cold eager one in every batch,
    the fastest compiled batch against the slowest eager one, a gap no batch's noise explains;
    None otherwise or where not measured. Such a launch is not the kernel the eager figures
    measured (2026-12-05 16:22: a tile that packs w made the pack in the graph on every call,
    50.0 us against 23.6 eager)."""
    if not (_ran(alone, variant, params) and alone.get("cold_custom_compiled_batches_us")
            and alone.get("cold_custom_eager_batches_us")):
        return None
    comp_min = min(alone["cold_custom_compiled_batches_us"])
    eager_max = max(alone["cold_custom_eager_batches_us"])
    if comp_min <= COMPILED_OVER_EAGER * eager_max:
        return None
    eager, comp = alone["cold_custom_eager_us"], alone["cold_custom_compiled_us"]
    return {"eager_us": round(eager, 2), "compiled_us": round(comp, 2),
            "ratio": round(comp / eager, 2), "compiled_min_us": round(comp_min, 2),
            "eager_max_us": round(eager_max, 2)}


def verdict(row: dict | None, variant: str, params: dict,
            alone: dict | None = None) -> tuple[bool, dict]:
    """(keep?, figures) for one candidate from its measured row (None: not measured).
    ``alone``: the bench's main row of the same shape, dtype and M, whose ncu times (each
    launch alone, cold) are used where it ran this same kernel and tile, and whose compiled
    time must not be over its eager one (``compiled_gap``)."""
    keep, fig = _eager_verdict(row, variant, params, alone)
    gap = compiled_gap(alone, variant, params) if keep else None
    if gap:
        return False, {**fig, "compiled": gap, "why": (
            f"compiled with the weights as inputs {gap['compiled_us']} us against eager "
            f"{gap['eager_us']} us ({gap['ratio']}x; its fastest batch {gap['compiled_min_us']} "
            f"us over {COMPILED_OVER_EAGER}x eager's slowest, {gap['eager_max_us']} us), though "
            f"eager beat stock: wall {fig['custom_us']} us vs {fig['stock_us']} us")}
    return keep, fig


def _eager_verdict(row: dict | None, variant: str, params: dict,
                   alone: dict | None) -> tuple[bool, dict]:
    if row is None:
        return False, {"why": "not measured cold as a table row (bench --table-rows)"}
    if row.get("state_broken"):  # bench/device_state: nothing timed beside it is evidence
        return False, {"why": "the bench's run of it broke the device's state ("
                              f"{', '.join(row['state_broken'])} changed)"}
    if row.get("error") or row.get("variant") != variant or row.get("params") != params:
        what = row.get("error") or f"measured {row.get('variant')} {row.get('params')}"
        return False, {"why": f"no cold measurement of this candidate ({what[:120]})"}
    stock = row["cold_stock_eager_wall_us"]
    custom = row["cold_custom_eager_wall_us"]
    noise = max(_spread(row["cold_stock_eager_wall_batches_us"]),
                _spread(row["cold_custom_eager_wall_batches_us"]))
    margin = stock - custom
    fig = {"stock_us": round(stock, 2), "custom_us": round(custom, 2),
           "margin_us": round(margin, 2), "noise_us": round(noise, 2),
           "batches": len(row["cold_custom_eager_wall_batches_us"])}
    if margin > noise:
        return True, fig
    # The batched figures let independent launches overlap; one launch alone is what a decode
    # sees. Kept on it only where its margin clears both its own spread and the batches' noise.
    if (_ran(alone, variant, params) and alone.get("ncu_stock_all_us")
            and alone.get("ncu_custom_all_us")):
        a_noise = max(_spread(alone["ncu_stock_all_us"]), _spread(alone["ncu_custom_all_us"]))
        a_margin = alone["ncu_stock_us"] - alone["ncu_custom_us"]
        fig["alone"] = {"stock_us": round(alone["ncu_stock_us"], 2),
                        "custom_us": round(alone["ncu_custom_us"], 2),
                        "margin_us": round(a_margin, 2), "noise_us": round(a_noise, 2),
                        "launches": len(alone["ncu_custom_all_us"])}
        return a_margin > max(a_noise, noise), fig
    return False, fig


def held_reason(variant: str, hold: str, fig: dict, where: str) -> str:
    """Why an entry with ``hold`` selects stock: the hold, then what its candidate measured.
    A hold is for what the numbers cannot say, e.g. a suite that states the fallback and would
    have to check the tuned kernel first; the measurement stays on record for when it goes."""
    if "why" in fig:
        measured = fig["why"]
    else:
        measured = (f"measured wall {fig['custom_us']} us vs stock {fig['stock_us']} us per "
                    f"launch, margin {fig['margin_us']} us, noise {fig['noise_us']} us")
    return f"{variant}: held at stock ({hold}); {measured} ({where})"


def regenerate(table: dict, results: dict, results_name: str) -> tuple[dict, list[dict]]:
    """The table with its sm_90 entries regenerated, and one decision record per key."""
    rows = {_key(r["shape"], r["dtype"], r["M"], r.get("group_size", 64)): r
            for r in results.get("table_rows", [])}
    alone = {_key(r["shape"], r["dtype"], r["M"], 64): r for r in results.get("rows", [])
             if "kernel" in r}
    when = results.get("measured_at", "?")
    chip = results.get("device", {}).get("chip", "H200")
    where = f"{chip} {when}, cold, {results_name}"
    entries, decisions = [], []
    for e in table["entries"]:
        if DEVICE not in e["devices"]:
            entries.append(e)
            continue
        if e["devices"] != [DEVICE]:
            raise ValueError(f"an entry shares {DEVICE} with other devices ({e['devices']}): "
                             "split it by hand first")
        cand = e.get("candidate") or {"variant": e["variant"], "params": e.get("params", {})}
        if cand["variant"] == STOCK:
            entries.append(e)  # stock chosen by hand, with nothing to measure against
            continue
        for shape in e["shapes"]:
            for dtype in e["dtypes"]:
                for gs in e["group_sizes"]:
                    row = rows.get(_key(shape, dtype, e["M"], gs))
                    keep, fig = verdict(row, cand["variant"], cand["params"],
                                        alone.get(_key(shape, dtype, e["M"], gs)))
                    base = {"devices": [DEVICE], "dtypes": [dtype], "M": e["M"],
                            "bits": e["bits"], "group_sizes": [gs], "shapes": [shape]}
                    if e.get("chosen"):  # how the tile was chosen (choose_tiles), kept
                        base["chosen"] = e["chosen"]
                    if e.get("hold"):  # kept at stock by hand, the measurement recorded
                        base["hold"] = e["hold"]
                        new = {**base, "variant": STOCK, "params": {}, "candidate": cand,
                               "reason": held_reason(cand["variant"], e["hold"], fig, where)}
                    elif keep and "alone" in fig:
                        a = fig["alone"]
                        new = {**base, "variant": cand["variant"], "params": cand["params"],
                               "profiled": (f"{where}: one launch alone (ncu) {a['custom_us']} "
                                            f"us vs stock {a['stock_us']} us; margin "
                                            f"{a['margin_us']} us > noise {fig['noise_us']} us "
                                            f"(the batches' max-min, which the batched wall "
                                            f"margin {fig['margin_us']} us did not clear)")}
                    elif keep:
                        new = {**base, "variant": cand["variant"], "params": cand["params"],
                               "profiled": (f"{where}: wall {fig['custom_us']} us vs stock "
                                            f"{fig['stock_us']} us per launch; margin "
                                            f"{fig['margin_us']} us > noise {fig['noise_us']} us "
                                            f"(max-min over {fig['batches']} batches)")}
                    else:
                        if "why" in fig:
                            reason = f"{cand['variant']}: {fig['why']} ({where})"
                        else:
                            reason = (f"{cand['variant']} wall {fig['custom_us']} us vs stock "
                                      f"{fig['stock_us']} us per launch: margin "
                                      f"{fig['margin_us']} us is not above the noise "
                                      f"{fig['noise_us']} us (max-min over {fig['batches']} "
                                      f"batches) ({where})")
                        new = {**base, "variant": STOCK, "params": {}, "candidate": cand,
                               "reason": reason}
                    entries.append(new)
                    decisions.append({"shape": shape, "dtype": dtype, "M": e["M"],
                                      "candidate": cand["variant"],
                                      "kept": keep and not e.get("hold"),
                                      **({"held": e["hold"]} if e.get("hold") else {}), **fig})
    return {**table, "entries": entries}, decisions


def render(table: dict) -> str:
    return json.dumps(table, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", default=str(ROOT / "bench/results/h200/cuda_verify.json"))
    ap.add_argument("--table", default=str(ROOT / "kernels/selection_table.json"))
    ap.add_argument("--out", default=None, help="where to write (default: --table, in place)")
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the table is not what the results say")
    ap.add_argument("--choose-from-ncu", default=None, metavar="CSV",
                    help="choose the gate_up/down tiles (at each M the CSV holds) from ncu's time of each tile alone "
                         "(h200.sh ncucold --points) instead of regenerating from --results; "
                         "several CSVs (one ncu run a shape), comma-separated")
    ap.add_argument("--cold-sweep", default=None,
                    help="the cold sweep's JSON (with the CSV); several, comma-separated")
    ap.add_argument("--choice-out", default=None, help="where the choice record goes (JSON)")
    args = ap.parse_args(argv)
    if args.choose_from_ncu:
        return _choose(args)
    results_path = Path(args.results)
    try:
        results = json.loads(results_path.read_text())
        table = json.loads(Path(args.table).read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"regen_sm90_table: cannot read {e}", file=sys.stderr)
        return 2
    if not results.get("table_rows"):
        print(f"regen_sm90_table: {results_path} has no table_rows: run bench/cuda_verify.py "
              "--table-rows on the H200 first", file=sys.stderr)
        return 2
    name = (str(results_path.resolve().relative_to(ROOT))
            if results_path.resolve().is_relative_to(ROOT) else results_path.name)
    new, decisions = regenerate(table, results, name)
    for d in decisions:
        figs = (f"custom {d['custom_us']} vs stock {d['stock_us']} us, margin {d['margin_us']}"
                f" noise {d['noise_us']}" if "custom_us" in d else d["why"])
        if "alone" in d:
            a = d["alone"]
            figs += (f"; alone (ncu) custom {a['custom_us']} vs stock {a['stock_us']} us, "
                     f"margin {a['margin_us']}")
        print(f"{'keep' if d['kept'] else 'HOLD' if d.get('held') else 'DROP'} {d['shape']} "
              f"{d['dtype']} M={d['M']} "
              f"{d['candidate']}: {figs}")
    text = render(new)
    if args.check:
        same = Path(args.table).read_text() == text
        print("table matches the results" if same else "table differs from the results")
        return 0 if same else 1
    Path(args.out or args.table).write_text(text)
    kept = sum(d["kept"] for d in decisions)
    held = sum(bool(d.get("held")) for d in decisions)
    print(f"{kept} kept, {held} held at stock, {len(decisions) - kept - held} dropped to stock "
          f"-> {args.out or args.table}")
    return 0


def _choose(args) -> int:
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "bench"))
    import sweep_points
    from cuda_verify_ncu import duration_us, parse, read_csv

    from kernels.variants import VARIANTS
    try:
        csvs = [Path(f) for f in args.choose_from_ncu.split(",") if f]
        launches = [{**k, "us": duration_us(k)} for f in csvs for k in parse(read_csv(str(f)))]
        cold: dict = {"shapes": {}}
        for f in (args.cold_sweep or "").split(","):  # several sweeps: each shape's last one
            if f:
                for key, e in json.loads(Path(f).read_text()).get("shapes", {}).items():
                    m = int(e.get("point_m", 8))
                    cold["shapes"][key if m == 8 else f"{key}/{m}"] = e
        table = json.loads(Path(args.table).read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"regen_sm90_table: cannot read {e}", file=sys.stderr)
        return 2
    swept = {name: VARIANTS[name].DEFAULTS for name in sweep_points.SWEPT}
    new, record = choose_tiles(table, launches, cold, swept, ", ".join(f.name for f in csvs))
    for key, r in record.get("refused_packed", {}).items():
        for t in r["tiles"]:
            ratio = t["compiled_over_eager"]
            print(f"{key}: refused {t['params']} (packs w; compiled/eager "
                  f"{'untimed' if ratio is None else f'{ratio:.2f}'})")
    for key, c in record["choices"].items():
        if "skipped" in c or "kept" in c:
            print(f"{key}: unchanged ({c.get('skipped') or c['kept']})")
            continue
        prev = f"{c['previous_us']:.1f}" if c["previous_us"] else "-"
        print(f"{key}: {c['variant']} {c['chosen']} {c['us']:.1f} us alone (stock {c['stock_us']}, previous "
              f"tile {c['previous']} {prev} us; {len(c['tiles'])} tiles)")
    Path(args.out or args.table).write_text(render(new))
    if args.choice_out:
        Path(args.choice_out).write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
