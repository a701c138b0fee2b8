"""The tile of each sm_90 gate_up/down entry, chosen by ncu's time of each launch alone.

``scripts/regen_sm90_table.py --choose-from-ncu`` (its docstring says how a run gets there)
calls ``choose_tiles``; kept apart from the regeneration (which keeps or drops an entry from the
bench's batched table rows) because the two read different measurements by different rules.
"""

from __future__ import annotations

import ast
import statistics

DEVICE = "sm_90"
# The tile keys written into an entry (the pipeline keys only when not default), and the key a
# launch label names another variant than the entry's default candidate with.
CORE_KEYS = ("n_tile", "k_groups", "unroll", "prefetch")
VARIANT_KEY = "variant"
UNNAMED = "mma_weights_a"  # the variant of a label or row without VARIANT_KEY
# Issue 14: eager within 10% of compiled. A tile that packs w (kernels.cuda_config.packs_weights)
# is chosen only where the sweep timed it compiled, weights as the compiled function's inputs,
# within this factor of its eager time: a compiled call that lacks the layout made at load
# (QWeights.layouts, which the sweep passes since 2026-12-05 18:45) packs w on every call.
COMPILED_OVER_EAGER = 1.10


def _tile_from_label(label: str) -> dict | None:
    """The params dict at the end of an ncu launch label ("op dtype M=8 tile {...}")."""
    at = label.find("{")
    if at < 0:
        return None
    try:
        p = ast.literal_eval(label[at:])
    except (ValueError, SyntaxError):
        return None
    return p if isinstance(p, dict) else None


def _compiled_over_eager(shape_sweep: dict, m: int, full, t: tuple) -> float | None:
    """A shape's cold sweep's compiled time over eager for tile ``t`` at M (its ``final``: the
    best tile timed both ways, and with ``--time-each`` every candidate), None where the sweep
    did not time it compiled."""
    from sweep_points import candidate_tile, candidate_timed

    for f in shape_sweep.get("final", []):
        if int(f.get("M", 8)) != m:
            continue
        if (f.get("custom_compiled_us") and f.get("custom_eager_us")
                and full(f.get("params") or {}) == t):
            return f["custom_compiled_us"] / f["custom_eager_us"]
        for c in f.get("candidates", []):
            compiled = candidate_timed(c).get("compiled_us")
            if compiled and c.get("us") and full(candidate_tile(c)) == t:
                return compiled / c["us"]
    return None


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
    from sweep_points import variant_of

    from kernels.cuda_config import packs_weights

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
        shape_sweep = (swept.get(label) or (swept.get(f"{key[0]}/{key[1]}") if key[2] == 8
                                            else None) or {})
        sweep = shape_sweep.get("points", [])
        if shape_sweep.get("state_broken"):  # bench/device_state: no point of it is evidence
            entries.append(e)
            record["choices"][label] = {"skipped": "the cold sweep broke the device's state "
                                        f"({shape_sweep['state_broken'].get('when')})"}
            continue
        # only a tile the cold sweep ran at this M and found exact (skipped: unchecked)
        good = {full(pt) for pt in sweep if pt.get("ok")} - {None}
        shipped = full({**cand["params"], VARIANT_KEY: cand["variant"]})
        repacked = {t: _compiled_over_eager(shape_sweep, key[2], full, t) for t in good
                    if packs_weights(dict(t))}
        good -= {t for t, r in repacked.items() if r is None or r > COMPILED_OVER_EAGER}
        clustered = {t for t in good if int(dict(t).get("cluster", 1)) > 1}
        good -= clustered  # kernels.cuda.refuse_cluster_under_graphs: never selectable
        if clustered & set(times[key]):
            record.setdefault("refused_clustered", {})[label] = sorted(
                (dict(t) for t in clustered & set(times[key])), key=str)
        tiles = {t: statistics.median(v) for t, v in times[key].items()
                 if t in good or t == shipped}
        refused = [{"params": dict(t), "compiled_over_eager": r} for t, r in repacked.items()
                   if t in times[key] and t not in good]
        if refused:
            record.setdefault("refused_packed", {})[label] = {
                "reason": f"packs w: compiled with the weights as inputs it must read the "
                          f"layout made at load, not pack w on every call; chosen only where "
                          f"the sweep's compiled time is within {COMPILED_OVER_EAGER:.2f}x its "
                          f"eager (null: not timed compiled)",
                "tiles": refused}
        if not set(tiles) - {shipped}:  # nothing checked to choose from: left as it is
            entries.append(e)
            record["choices"][label] = {
                "skipped": "the cold sweep checked none of the tiles ncu timed"
                           + (" but packed ones, refused (refused_packed)" if refused else "")}
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
