"""The tiles of h200.sh's ``diagnose`` runs (and ``denorm``'s), by kind, as ``cuda_verify_ncu
--tiles`` takes them: ``python bench/diagnostic_tiles.py KIND`` prints them as JSON.

Kept apart from bench/sweep_points.py (the sweeps' sets and their helpers) because these are
not sweeps: each kind is built from the selection table in effect, or from a set, so a run
measures what the table ships whatever it ships then. Until 2026-12-07 11:10 UTC this was
``sweep_points.py tiles KIND``, as the older records under bench/results/ name it.
"""

from __future__ import annotations

import json
import sys

from sweep_points import (
    BALANCED,
    BULK_TILES,
    CLUSTERED,
    DENORM_2,
    DENORM_MODES,
    DENORMED,
    NAME,
    SETS,
    SWEPT,
    as_params,
    point_of,
    with_plain_twins,
)

from kernels.cuda_config import takes_x_ablate
from kernels.selection import table_path

# The ablated tiles of the table's entries at an M: M=16's tell whether its second activation
# tile's math is what M=16 pays for.
ABLATE_AT = {"ablate": 8, "ablate16": 16}
# ``xcost_<shape>``: the Ms whose table tiles are timed at each of them
XCOST_MS = (8, 16)
# The ablates a tile takes in ``xcost_<shape>`` (every part) and ``xl1_<shape>`` (the whole,
# without x's loads, and x's loads from L1: is what M=16 pays for x the wait on L2?)
XCOST_ABLATES = {"xcost": range(5), "xl1": (0, 3, 5)}

# The loads alone (ablate 1) of register-pipeline tiles that keep more weight bytes in flight
# than the shipped one: does the load leg (H200: 17.2 us for gate/up against a bare read's
# 14.1) follow the bytes in flight? With no math a tile needs ~32 registers, so the grid, not
# the registers, sets the warps an SM, and a lane holds 32 B x (n_tile / 16) a K step x unroll
# x (1 + prefetch). Per SM on gate/up: the shipped 32 x 4 u2 ~66 KB, these 33-132 KB, a bare
# read (2048 threads x 4 loads of 16 B) 128 KB. 32 x 4 u1 / u2 at prefetch 0 and 1; 32 x 2 u4
# (half the warps, twice the steps) at both; 16 x 4 u2 p1 (twice the blocks); 16 x 8 u1 p1;
# for down (its 160-320 blocks leave an SM 2-41 warps, 10-39 KB) 16 x 17 u4 p1 too (330 KB).
# Tiles that do not tile a shape are skipped there (the ncu run names them); unroll shrinks
# to the largest of 4, 2, 1 that divides a group's steps (kernels.cuda_config).
LOADS = [(32, 4, 1, 0, 0), (32, 4, 2, 0, 0), (32, 4, 1, 1, 0), (32, 4, 2, 1, 0),
         (32, 2, 4, 0, 0), (32, 2, 4, 1, 0), (16, 4, 2, 1, 0), (16, 8, 1, 1, 0),
         (16, 17, 4, 1, 0)]


def diagnostic_tiles(kind: str, table: dict) -> list[dict]:
    """The tiles of h200.sh's ``diagnose`` run, as ``cuda_verify_ncu --tiles`` takes them:
    ``balanced``, the BALANCED points; ``cluster``, the CLUSTERED points; ``loads``, the LOADS
    tiles' loads alone; ``bulk_<shape>``, the BULK_TILES' legs; ``ablate``
    (``ablate16``), the selection table's sm_90 gate/up and down tiles at M=8 (16) in bf16
    with a part taken out (1: the loads alone, 2: the math alone; an mma_weights_a tile's
    math alone and whole also with each of DENORM_MODES), so the run measures what the table ships,
    whatever it ships then."""
    if kind == "balanced":
        return [as_params(pt) for pt in BALANCED]
    if kind == "cluster":
        return [as_params(pt) for pts in CLUSTERED.values() for pt in pts]
    if kind == "loads":
        return [{**as_params(pt), "ablate": 1} for pt in LOADS]
    if kind.startswith("bulk_") and kind.removeprefix("bulk_") in BULK_TILES:
        # each tile whole (plain, denorm 2), its loads alone and its math alone at denorm 2,
        # and (since 2026-12-07 13:30 UTC) at denorm 2 its whole without x's loads and its
        # math without them (ablate 3, 4): bulk 3's warps waited on x most (an H100's stall
        # samples, bench/results/h100/bulk3_stalls_1632), while its legs alone are ~14.5 us
        # each and its whole 19.7 on the H200 (layouts_1853): does x hold the overlap?
        return [{**as_params(pt), **extra} for pt in BULK_TILES[kind.removeprefix("bulk_")]
                for extra in ({}, DENORM_2, {"ablate": 1}, {**DENORM_2, "ablate": 2},
                              {**DENORM_2, "ablate": 3}, {**DENORM_2, "ablate": 4})]
    shape = kind.removeprefix("denorm_")
    if shape != kind and shape in DENORMED:
        # a shape's denormed tiles, each beside its plain self (the same run's baseline)
        return [as_params(pt) for pt in with_plain_twins(DENORMED[shape])]
    if kind.startswith("set:"):  # set:<name>:<shape>, a sweep set's points for ncu alone
        _, name, shape = (kind.split(":") + ["", ""])[:3]
        if shape not in SETS.get(name, {}):
            raise ValueError(f"no sweep set {name!r} with shape {shape!r} (sets: "
                             f"{', '.join(SETS)})")
        return [as_params(pt) for pt in SETS[name][shape]]
    part, _, shape = kind.partition("_")
    if part in XCOST_ABLATES and shape in ("gate_up", "down"):
        # the table's tiles of mma_weights_a for the shape (bf16, M=8 and 16) whose activation
        # loads ablate 3 and 4 take out (the register pipeline's, and the bulk pipeline's
        # without x_early), each whole and with each part taken out, at whichever M runs them:
        # x's share of the whole (ablate 3) and of the math (4), at M=8 against M=16
        tiles = [point_of(e["variant"], e["params"]) for e in table["entries"]
                 if e["devices"] == ["sm_90"] and e["M"] in XCOST_MS
                 and e["dtypes"] == ["bfloat16"] and e["shapes"][0] == shape
                 and e["variant"] == NAME and takes_x_ablate(e["params"])]
        tiles = [t for i, t in enumerate(tiles) if t not in tiles[:i]]
        return [{**t, "ablate": a} for t in tiles for a in XCOST_ABLATES[part]]
    if kind not in ABLATE_AT:
        raise ValueError(f"no diagnostic tiles named {kind!r} (balanced, cluster, loads, "
                         f"denorm_gate_up, denorm_down, bulk_gate_up, bulk_down, "
                         f"xcost_gate_up, xcost_down, xl1_gate_up, xl1_down, "
                         f"{', '.join(ABLATE_AT)})")
    out = []
    for e in table["entries"]:
        if (e["devices"] == ["sm_90"] and e["M"] == ABLATE_AT[kind] and e["dtypes"] == ["bfloat16"]
                and e["shapes"][0] in ("gate_up", "down") and e["variant"] in SWEPT):
            tile = point_of(e["variant"], e["params"])
            out.append({**tile, "ablate": 1})
            if e["variant"] != NAME:
                out.append({**tile, "ablate": 2})
                continue
            # its math alone at every denorm mode (326, 265, 238 instructions a K step), and
            # its whole at each mode but the tile's own (the ncu run times that one anyway):
            # whether the math's cut reaches the whole, whichever mode the table ships
            own = tile.get("denorm", 0)
            plain = {k: v for k, v in tile.items() if k != "denorm"}
            at = [plain, *({**plain, "denorm": d} for d in DENORM_MODES)]  # modes 0, 1, 2
            out += [{**t, "ablate": 2} for t in at]
            out += [t for d, t in enumerate(at) if d != own]
    return out


def main(argv: list[str] | None = None) -> int:
    """``python bench/diagnostic_tiles.py KIND``: the diagnostic tiles as JSON, for h200.sh."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: diagnostic_tiles.py balanced|cluster|loads|denorm_gate_up|denorm_down|"
              "bulk_gate_up|bulk_down|xcost_gate_up|xcost_down|xl1_gate_up|xl1_down|ablate|"
              "ablate16|set:NAME:SHAPE",
              file=sys.stderr)
        return 2
    table = json.loads(table_path().read_text())  # the table in effect, as the runtime reads it
    try:
        print(json.dumps(diagnostic_tiles(args[0], table)))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
