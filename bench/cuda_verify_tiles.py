"""Which kernel and tile a CUDA bench row times: the selection table's sm_90 entry (or the
candidate it keeps), else a tabled shape with the same K, else the hot sweep's choice; and every
table entry as a candidate row. Plain functions over the table's JSON."""

from __future__ import annotations

SHAPES = {"gate_up": (5120, 17408), "down": (17408, 5120)}


def sweep_choice(sweep: dict, op: str, dt_name: str) -> tuple[str, dict]:
    """The custom kernel and tile the hot-weight sweep chose for this shape at M=8: the last
    resort of ``tile_for``, for a shape the table does not list (the table's tiles were chosen
    cold since)."""
    b = (sweep.get("shapes", {}).get(f"{op}/{dt_name}") or {}).get("best_m8") or {}
    if b.get("variant"):
        return b["variant"], {k: b[k] for k in ("n_tile", "k_groups", "unroll", "prefetch")
                              if k in b}
    return "mma_weights_a", {"n_tile": 32, "k_groups": 2, "unroll": 2, "prefetch": 0}


def table_choice(table: dict, op: str, dt_name: str, m: int = 8) -> tuple[str, dict] | None:
    """The custom kernel and tile the selection table's sm_90 entry ships for this shape and
    dtype at M=``m`` (for an entry the regeneration dropped to stock, its kept candidate)."""
    for e in table.get("entries", []):
        if ("sm_90" in e["devices"] and op in e["shapes"] and dt_name in e["dtypes"]
                and int(e["M"]) == m):
            c = e.get("candidate") or {"variant": e["variant"], "params": e.get("params", {})}
            if c["variant"] != "stock":
                return c["variant"], dict(c["params"])
    return None


def tile_for(table: dict, sweep: dict, op: str, k: int, dt_name: str,
              m: int) -> tuple[str, dict, str]:
    """(kernel, tile, where it came from) for one main row: the table's sm_90 entry at this
    shape, dtype and M (its candidate where it selects stock), else its M=8 entry, else the
    entry at M (then M=8) of a tabled shape with the same K (the vocab head reads gate_up's
    activations), else the hot sweep's M=8 choice."""
    same_k = [shape for shape, (k2, _) in SHAPES.items() if k2 == k and shape != op]
    for shape, at, note in ((op, m, ""), (op, 8, ""),
                            *((s, a, " (same K)") for s in same_k for a in (m, 8))):
        c = table_choice(table, shape, dt_name, at)
        if c:
            return (*c, f"table {shape} M={at}{note}")
    return (*sweep_choice(sweep, op, dt_name), "hot sweep M=8")


def table_candidates(table: dict) -> list[dict]:
    """One record per key of every sm_90 entry of the selection table: the custom kernel it
    selects, or for an entry the regeneration dropped to stock, the ``candidate`` it keeps, so
    each run measures it again and a later run can restore it (scripts/regen_sm90_table.py)."""
    out = []
    for e in table["entries"]:
        if "sm_90" not in e["devices"]:
            continue
        cand = e.get("candidate") or {"variant": e["variant"], "params": e.get("params", {})}
        for shape in e["shapes"]:
            k, n = table["shapes"][shape]
            for dt in e["dtypes"]:
                for gs in e["group_sizes"]:
                    out.append({"shape": shape, "K": int(k), "N": int(n), "dtype": dt,
                                "M": int(e["M"]), "group_size": int(gs), "bits": int(e["bits"]),
                                "variant": cand["variant"], "params": dict(cand["params"])})
    return out
