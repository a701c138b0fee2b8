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

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "sm_90"
STOCK = "stock"


def _spread(batches: list[float]) -> float:
    return max(batches) - min(batches)


def _key(shape: str, dtype: str, m: int, gs: int) -> tuple:
    return (shape, dtype, int(m), int(gs))


def verdict(row: dict | None, variant: str, params: dict,
            alone: dict | None = None) -> tuple[bool, dict]:
    """(keep?, figures) for one candidate from its measured row (None: not measured).
    ``alone``: the bench's main row of the same shape, dtype and M, whose ncu times (each
    launch alone, cold) are used where it ran this same kernel and tile."""
    if row is None:
        return False, {"why": "not measured cold as a table row (bench --table-rows)"}
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
    if (alone and alone.get("kernel") == variant and alone.get("params") == params
            and alone.get("ncu_stock_all_us") and alone.get("ncu_custom_all_us")):
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
             if "ncu_custom_us" in r}
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


# The tile keys written into an entry (the pipeline keys only when not default), and the key a
# launch label names another variant than the entry's default candidate with.
CORE_KEYS = ("n_tile", "k_groups", "unroll", "prefetch")
VARIANT_KEY = "variant"
UNNAMED = "mma_weights_a"  # the variant of a label or row without VARIANT_KEY


def _tile_from_label(label: str) -> dict | None:
    """The params dict at the end of an ncu launch label ("op dtype M=8 tile {...}")."""
    import ast
    at = label.find("{")
    if at < 0:
        return None
    try:
        p = ast.literal_eval(label[at:])
    except (ValueError, SyntaxError):
        return None
    return p if isinstance(p, dict) else None


def choose_tiles(table: dict, launches: list[dict], cold_sweep: dict,
                 defaults: dict[str, dict], source: str) -> tuple[dict, dict]:
    """(table with the gate_up/down sm_90 tiles chosen by ncu time alone, the record), at
    every M the launches were timed at (an entry per M: the tile that serves M=8 best need not
    serve M=16 best). A tile may be of any variant the sweep runs (its label's and its row's
    ``variant`` key, else mma_weights_a): the entry takes the fastest's variant.
    ``launches``: bench/cuda_verify_ncu.py's ``parse`` of the CSV (label, name), each with
    its kernel time ``us``;
    ``cold_sweep``: the cold sweeps' shapes, keyed "op/dtype" or, for a sweep at another M
    than 8, "op/dtype/M" (its tiles were checked at that M);
    ``defaults``: each swept variant's DEFAULTS (tiles are compared with them filled in)."""
    import statistics

    from sweep_points import variant_of

    def full(p: dict) -> tuple | None:
        name = p.get(VARIANT_KEY, UNNAMED)
        if name not in defaults:
            return None
        d = defaults[name]
        return tuple(sorted({**d, **{kk: v for kk, v in p.items() if kk in d},
                             VARIANT_KEY: name}.items()))

    times: dict[tuple, dict[tuple, list[float]]] = {}
    stock: dict[tuple, list[float]] = {}
    for k in launches:
        head = k["label"].split(" ", 3)
        us = k.get("us")
        if len(head) < 4 or not head[2].startswith("M=") or us is None:
            continue
        key = (head[0], head[1], int(head[2][2:]))
        if head[3] == "stock" and ("qmm" in k["name"] or "qmv" in k["name"]):
            stock.setdefault(key, []).append(us)
            continue
        p = _tile_from_label(head[3])
        if p is not None and head[3].startswith("custom") and VARIANT_KEY not in p:
            # the table's own tile, labelled by its params alone: its variant is the kernel's
            # (a group-sums tile keyed as mma_weights_a would never meet its entry)
            name = variant_of(k["name"], defaults)
            p = {**p, VARIANT_KEY: name} if name else None
        if p is not None and "dflash2" in k["name"] and full(p) is not None:
            times.setdefault(key, {}).setdefault(full(p), []).append(us)
    record: dict = {"source": source, "method": "ncu --cache-control all, each launch alone; "
                    "median over a tile's launches; only tiles the cold sweep ran at that M and "
                    "found bit-exact and within 2e-2 of stock (and the entry's own tile)",
                    "choices": {}}
    entries = []
    for e in table["entries"]:
        cand = e.get("candidate") or {"variant": e["variant"], "params": e.get("params", {})}
        key = ((e["shapes"][0], e["dtypes"][0], int(e["M"]))
               if len(e["shapes"]) == len(e["dtypes"]) == 1 else None)
        if DEVICE not in e["devices"] or key not in times or cand["variant"] not in defaults:
            entries.append(e)
            continue
        label = "/".join(map(str, key))
        swept = cold_sweep.get("shapes", {})
        sweep = (swept.get(label) or (swept.get(f"{key[0]}/{key[1]}") if key[2] == 8 else None)
                 or {}).get("points", [])
        # only a tile the cold sweep ran at this M and found exact (skipped: unchecked)
        good = {full(pt) for pt in sweep if pt.get("ok")} - {None}
        shipped = full({**cand["params"], VARIANT_KEY: cand["variant"]})
        tiles = {t: statistics.median(v) for t, v in times[key].items()
                 if t in good or t == shipped}
        if not set(tiles) - {shipped}:  # nothing checked to choose from: left as it is
            entries.append(e)
            record["choices"][label] = {
                "skipped": "the cold sweep checked none of the tiles ncu timed"}
            continue
        if shipped not in tiles:  # a tile beats the entry's own only when timed beside it
            entries.append(e)
            record["choices"][label] = {
                "skipped": "the entry's own tile was not timed in these launches: no choice "
                           "without it beside the others"}
            continue
        best = min(tiles, key=tiles.get)
        own = {"previous": dict(cand["params"]), "previous_variant": cand["variant"],
               "previous_us": tiles[shipped]}  # what a kept entry keeps
        if best == shipped:  # the entry's tile holds: its note stays the run that chose it
            entries.append(e)
            record["choices"][label] = {
                "kept": f"the entry's own tile is the fastest alone ({tiles[best]:.1f} us)",
                "us": tiles[best], **own}
            continue
        if max(times[key][best]) >= min(times[key][shipped]):
            # beating the entry's own tile means beating it at every launch: a median ahead
            # inside the launches' spread is noise, and a table that follows it churns
            entries.append(e)
            record["choices"][label] = {
                "kept": f"the fastest tile alone ({tiles[best]:.1f} us, launches "
                        f"{min(times[key][best]):.1f}-{max(times[key][best]):.1f}) is not faster "
                        f"than the entry's own ({tiles[shipped]:.1f} us, "
                        f"{min(times[key][shipped]):.1f}-{max(times[key][shipped]):.1f}) at "
                        f"every launch",
                "fastest": dict(best), "us": tiles[best], **own}
            continue
        bp = dict(best)
        variant = bp.pop(VARIANT_KEY)
        params = {kk: bp[kk] for kk in CORE_KEYS}
        params.update({kk: v for kk, v in bp.items()
                       if kk not in CORE_KEYS and v != defaults[variant][kk]})
        stock_us = statistics.median(stock[key]) if key in stock else None
        note = (f"tile chosen by ncu time alone ({source}): {tiles[best]:.1f} us"
                + (f" vs stock {stock_us:.1f} us" if stock_us else "")
                + (f"; previous tile {tiles[shipped]:.1f} us" if shipped in tiles else ""))
        new = dict(e)
        if e["variant"] == "stock":
            new["candidate"] = {"variant": variant, "params": params}
        else:
            new["variant"], new["params"] = variant, params
        new["chosen"] = note
        entries.append(new)
        record["choices"][label] = {
            "chosen": params, "variant": variant, "us": tiles[best], "stock_us": stock_us,
            "previous": dict(cand["params"]), "previous_variant": cand["variant"],
            "previous_us": tiles.get(shipped),
            "tiles": sorted(({"params": dict(t), "us": u} for t, u in tiles.items()),
                            key=lambda r: r["us"]),
            "excluded_unchecked": [dict(t) for t in times[key] if t not in tiles]}
    return {**table, "entries": entries}, record


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
    from cuda_verify_ncu import duration_us, parse

    from kernels.variants import VARIANTS
    try:
        csvs = [Path(f) for f in args.choose_from_ncu.split(",") if f]
        launches = [{**k, "us": duration_us(k)} for f in csvs for k in parse(f.read_text())]
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
