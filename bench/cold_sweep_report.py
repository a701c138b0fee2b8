"""The markdown of bench/cuda_verify_cold_sweep.py's results, from the JSON alone: a committed
sweep renders again unchanged, without a GPU or a rerun."""

from __future__ import annotations

from cuda_verify_report import UNTRUSTED, cell
from sweep_points import COLUMNS, candidate_timed


def broken_line(key: str, broken: dict) -> str:
    """A shape whose run changed the device's state (bench/device_state): its figures are
    not to be trusted, and the report says so above them."""
    what = ", ".join(f"{k} ({v['count']} of {v['of']} values)" for k, v in broken.items()
                     if isinstance(v, dict))
    return f"**{key}: the device's state broke {broken.get('when', '')}: {what} changed. {UNTRUSTED}**\n"


def render(res: dict) -> str:
    c = res.get("read_ceiling_Bps")
    ceiling = (f"Read-only ceiling (sum over 4 GiB) in the same run: **{c / 1e12:.2f} TB/s**. "
               if c else "**Check only** (`--check-only`): no point timed, no ceiling. ")
    lines = [(f"# mma_weights_a cold sweep on {res['device']['chip']} "
              f"({res['device']['arch']}, MLX {res['device']['mlx_version']})"), "",
             (f"Measured {res['measured_at']} by `bench/cuda_verify_cold_sweep.py`. {ceiling}Cold "
              "weights (rotating copies > 2x L2), pre-built batches of "
              f"{res['method']['batch']} launches, median of {res['method']['reps']}. "
              "% = floor / time, floor = bytes moved / ceiling. Every tile is checked bit for "
              "bit against the plain register pipeline at the same (n_tile, k_groups). The "
              "batched figures let independent launches overlap (MLX's CUDA graphs order only "
              "data dependencies); 'alone' (with --chain) chains each launch on the one before, "
              "through a small link kernel whose own chain is timed and taken off."), "",
             ("Launch floor (the same timing of launches with next to no work, K=256, N=64): "
              + ", ".join(f"{k.removesuffix('_us')} {v:.1f} µs"
                          for k, v in res.get("launch_floor", {}).items()) + "."), "",
             (f"| shape | dtype | M | tile ({', '.join(COLUMNS)}) | floor µs | stock µs | "
              "custom eager µs | custom compiled µs "
              "| stock % | eager % | compiled % | compiled speed-up | alone: stock µs | alone: "
              "custom µs | alone % | ulps vs portable | ulps vs f64 (stock) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, e in res["shapes"].items():
        if e.get("state_broken"):
            lines.insert(6, broken_line(key, e["state_broken"]))
        for r in e["final"]:
            if "params" not in r:
                continue
            p = r["params"]
            ch = r.get("check", {})
            lines.append(
                f"| {key.split('/')[0]} | {e['dtype']} | {r['M']} | "
                f"{', '.join(str(p.get(k, '-')) for k in COLUMNS)} | {r['floor_us']:.1f} | "
                f"{r['stock_us']:.1f} | {r['custom_eager_us']:.1f} | "
                f"{r['custom_compiled_us']:.1f} | {r['stock_pct_ceiling']:.0%} | "
                f"{r['pct_ceiling_eager']:.0%} | {r['pct_ceiling_compiled']:.0%} | "
                f"{r['compiled_speedup_vs_stock']:.2f}x | {cell(r.get('alone_stock_us'))} | "
                f"{cell(r.get('alone_custom_us'))} | "
                f"{cell(r.get('alone_pct_ceiling'), '{:.0%}')} | "
                f"{ch.get('ulps_vs_portable', float('nan')):.3f} | "
                f"{ch.get('ulps_vs_f64', float('nan')):.3f} "
                f"({ch.get('stock_ulps_vs_f64', float('nan')):.3f}) |")
    lines += _each_lines(res)
    point_ms = sorted({e.get("point_m", 8) for e in res["shapes"].values()})
    lines += ["", f"Every point at M={'/'.join(map(str, point_ms))} (cold, eager):", "",
              (f"| shape | dtype | M | {' | '.join(COLUMNS)} | µs | % of ceiling | "
               "bit-exact vs register | rel vs stock | note |"),
              "|---" * (len(COLUMNS) + 8) + "|"]
    for key, e in res["shapes"].items():
        for r in e["points"]:
            note = r.get("error", r.get("skipped", ""))[:90]
            lines.append(
                f"| {key.split('/')[0]} | {e['dtype']} | {e.get('point_m', 8)} | "
                + " | ".join(str(r.get(k, "-")) for k in COLUMNS)
                + f" | {cell(r.get('us'))} | {cell(r.get('pct_ceiling'), '{:.0%}')} | "
                f"{r.get('exact_vs_register', '-')} | {cell(r.get('rel_vs_stock'), '{:.1e}')} "
                f"| {note} |")
    return "\n".join(lines) + "\n"


def _each_lines(res: dict) -> list[str]:
    """With ``--time-each``: every final candidate eager, compiled (the layouts made at load
    as inputs) and alone in a chain, the best first, so that tiles are compared the ways a
    user runs them, not only by the batched eager time that ranked them."""
    rows = [(key, e, r, c) for key, e in res["shapes"].items() for r in e["final"]
            for c in r.get("candidates", [])]
    if not any(candidate_timed(c) for *_, c in rows):
        return []
    out = ["", "Every final candidate (`--time-each`), µs:", "",
           (f"| shape | dtype | M | tile ({', '.join(COLUMNS)}) | eager | compiled | "
            "compiled/eager | alone |"), "|---|---|---|---|---|---|---|---|"]
    for key, e, r, c in rows:
        t = candidate_timed(c) or {"compiled_us": r.get("custom_compiled_us"),
                          "alone_us": r.get("alone_custom_us")}  # the best: its row's
        compiled, alone = t.get("compiled_us"), t.get("alone_us")
        out.append(f"| {key.split('/')[0]} | {e['dtype']} | {r['M']} | "
                   f"{', '.join(str(c.get(k, '-')) for k in COLUMNS)} | {cell(c['us'])} | "
                   f"{cell(compiled)} | {cell(compiled and compiled / c['us'], '{:.2f}')} | "
                   f"{cell(alone)} |")
    return out

