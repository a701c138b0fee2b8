"""A tile's legs, each launch alone: the whole kernel, its loads alone, its math alone.

    python bench/ablate_legs.py CSV [CSV ...] [--out PATH]

The CSVs are ncu runs of bench/cuda_verify_ncu.py (h200.sh's ``diagnose``, ``denorm``,
``ncucold``): every launch alone, caches flushed. A tile's launches are grouped by its shape,
dtype, M, variant and every key but ``ablate`` and ``denorm`` (each at its variant's default
where a label leaves it out, so the table's ``custom`` launch is its tile's whole). Prints one
markdown row per tile that has a leg measured and writes PATH.json and PATH.md.

Why a table of its own: a lever that cuts one leg reaches the whole only when that leg is the
longer one, and whether it is differs between cards (an H100's loads are slower than an
H200's). The decisive figures of a device run are then one row, derived the same way every
time rather than picked out of a launch list by hand. Times are the minimum over a tile's
launches (the least disturbed), with the largest beside it where they differ (``us_max``), so
the spread that a difference between legs must clear is in the table too; ``launches`` says
how many there were.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import sweep_points as sp
from cuda_verify_ncu import DRAM_PCT, ISSUE_ACTIVE, duration_us, metric, parse, read_csv

# "gate_up bfloat16 M=8 tile {...}" or "... custom {...}" (the table's tile, by the runtime)
LABEL = re.compile(r"^(\S+) (\S+) M=(\d+) (tile|custom) (\{.*\})$")
MODES = (0, *sp.DENORM_MODES)
ISSUE_PCT = (ISSUE_ACTIVE, "Issue Slots Busy")
SHOWN = ("n_tile", "k_groups", "unroll")  # a tile's name even where they are the defaults
# ablate's parts: 3 and 4 (mma_weights_a's register pipeline, and its bulk pipeline without
# x_early) take the activation loads out of
# the whole and of the math alone, so x's share of each is the difference; 5 keeps x's loads
# and points each at its K group's first step (L1 hits): what is left of x's share off L2
LEGS = {0: "whole", 1: "loads", 2: "math", 3: "no_x", 4: "pure", 5: "x_l1"}


def leg_of(label: str, kernel: str) -> tuple[tuple, str, int] | None:
    """(the tile's key, which leg, its denorm mode) of one launch, or None for stock and any
    launch that is not a swept variant's tile."""
    m = LABEL.match(label)
    name = sp.variant_of(kernel)
    if m is None or name is None:
        return None
    shape, dtype, ms, _, params = m.groups()
    given = sp.launch_of(ast.literal_eval(params))[1]
    p = {**sp.VARIANTS[name].DEFAULTS, **given}
    p = {k: p[k] for k in (*SHOWN, *sorted(set(p) - set(SHOWN)))}
    ablate, mode = p.pop("ablate", 0), p.pop("denorm", 0)
    leg = LEGS[ablate]
    if leg == "loads":
        mode = 0  # the loads alone take no math, so no denorm mode: a denorm tile's are its own
    return (shape, dtype, int(ms), name, tuple(p.items())), leg, mode


def legs(paths: list[str]) -> list[dict]:
    """One record a tile: the least time of each leg at each denorm mode, with the DRAM share
    of its loads alone and the issue slots' use of its math alone, where measured."""
    tiles: dict[tuple, dict] = {}
    for path in paths:
        for k in parse(read_csv(path)):
            got, us = leg_of(k["label"], k["name"]), duration_us(k)
            if got is None or us is None:
                continue
            key, leg, mode = got
            rec = tiles.setdefault(key, {})
            slot = rec.setdefault(f"{leg}_{mode}", {"us": us, "us_max": us, "launches": 0})
            slot["launches"] += 1
            slot["us_max"] = max(slot["us_max"], us)
            if us <= slot["us"]:
                slot.update(us=us, dram_pct=metric(k, *DRAM_PCT), issue_pct=metric(k, *ISSUE_PCT))
    out = []
    for (shape, dtype, m, name, params), rec in tiles.items():
        if not any(s.startswith(("loads", "math", "no_x", "pure", "x_l1")) for s in rec):
            continue  # no leg measured: a tile of the sweep, not of an ablate set
        row = {"shape": shape, "dtype": dtype, "M": m, "variant": name,
               "tile": {k: v for k, v in params
                        if k in SHOWN or v != sp.VARIANTS[name].DEFAULTS.get(k)},
               "legs": rec}
        # the legs at one denorm mode: plain where its math alone ran, else the highest mode
        # whose math alone ran (a bulk tile's is timed at denorm 2 only), else whose whole
        # ran (a set of the whole and x's legs alone); the loads take none
        modes = (0, *reversed(sp.DENORM_MODES))
        mode = next((d for leg in ("math", "whole") for d in modes if f"{leg}_{d}" in rec), 0)
        row["mode"] = mode
        loads, math = rec.get("loads_0", {}).get("us"), rec.get(f"math_{mode}", {}).get("us")
        whole = rec.get(f"whole_{mode}", {}).get("us")
        if loads is not None and math is not None:
            row["longer_leg"] = ("loads" if loads >= math else "math") + (
                f" (dn{mode})" if mode else "")
            if whole is not None:
                row["whole_over_longer"] = round(whole / max(loads, math), 3)
        out.append(row)
    return sorted(out, key=lambda r: (r["M"], r["shape"], r["dtype"], json.dumps(r["tile"])))


def cell(rec: dict, key: str, extra: str | None = None) -> str:
    s = rec.get(key)
    if s is None:
        return "-"
    text = f"{s['us']:.1f}" + (f"-{s['us_max']:.1f}" if s["us_max"] > s["us"] else "")
    if extra and s.get(extra) is not None:
        text += f" ({s[extra]:.0f}%)"
    return text


def markdown(rows: list[dict], sources: list[str]) -> str:
    head = ("| shape | dtype | M | variant | tile | whole | whole dn1 | whole dn2 | loads alone "
            "(DRAM %) | math alone (issue %) | math dn1 | math dn2 | longer leg | whole / longer | "
            "whole, no x loads | math, no x loads | whole, x from L1 |")
    intro = f"Each launch alone under ncu, least-largest time over its launches, µs; from {', '.join(sources)}."
    lines = [intro, "", head, "|" + "---|" * 17]
    for r in rows:
        rec, mode = r["legs"], r.get("mode", 0)
        tile = ", ".join(f"{k} {v}" for k, v in r["tile"].items())
        lines.append(
            f"| {r['shape']} | {r['dtype']} | {r['M']} | {r['variant']} | {tile} | "
            f"{cell(rec, 'whole_0')} | {cell(rec, 'whole_1')} | {cell(rec, 'whole_2')} | "
            f"{cell(rec, 'loads_0', 'dram_pct')} | {cell(rec, 'math_0', 'issue_pct')} | "
            f"{cell(rec, 'math_1')} | {cell(rec, 'math_2')} | {r.get('longer_leg', '-')} | "
            f"{r.get('whole_over_longer', '-')} | {cell(rec, f'no_x_{mode}')} | "
            f"{cell(rec, f'pure_{mode}')} | {cell(rec, f'x_l1_{mode}')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", nargs="+", help="ncu CSVs of bench/cuda_verify_ncu.py runs")
    ap.add_argument("--out", default=None, help="write PATH.json and PATH.md as well")
    args = ap.parse_args(argv)
    missing = [p for p in args.csv if not Path(p).is_file()]
    if missing:
        print(f"ablate_legs: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    rows = legs(args.csv)
    if not rows:
        print("ablate_legs: no ablated launch (ablate 1-5) in "
              f"{', '.join(args.csv)}: give a diagnose run's CSV", file=sys.stderr)
        return 1
    sources = [str(Path(p).resolve().relative_to(ROOT)) if Path(p).resolve().is_relative_to(ROOT)
               else Path(p).name for p in args.csv]
    md = markdown(rows, sources)
    print(md, end="")
    if args.out:
        Path(f"{args.out}.json").write_text(json.dumps({"sources": sources, "tiles": rows},
                                                       indent=1) + "\n")
        Path(f"{args.out}.md").write_text(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
