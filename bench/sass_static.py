"""What each tile of the next cold sweep asks of an SM, read from its machine code, no GPU.

    python bench/sass_static.py [--out bench/results/sass_static.json] [--ms 8,16]

For every tile of ``bench/sweep_points.POINTS`` (gate/up and down, bf16 and fp16,
each M): nvcc's cubin for sm_90a as MLX would build it, ptxas' registers and spills, the
blocks an SM holds by sm_90's limits (65536 registers allocated per warp in 256s, 64 warps,
32 blocks, 228 KiB of shared memory with 1 KiB a block reserved), and from nvdisasm the
instructions a warp issues per K step of 128 in the innermost loop that issues the mma (the K
loop; for the bulk pipeline the loop over a stage's steps, so a stage's barrier wait is not in
it), split into the dequantization (the nibble shifts, LOP3s, HADD2s and HFMA2s), the mma, the
loads (global, shared, cp.async), the float32 FMAs of mma_group_sums' once-a-group scale and
bias (the epilogue) and the rest. A point of another variant names it (``sweep_points``).

Why, when only a device can time a tile: gate/up at M=8 issues 29% of an SM's cycles and
waits on its loads in half of its stall samples (bench/results/h200/sass_shipped_tiles.md), so
the sweep's question per tile is how many warps it keeps resident and how much each issues
per weight. These counts are facts of the compiler; what they cost in time is the sweep's.
The counts are static (per warp, one K step of the loop), not the executed totals ncu reports.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import sweep_points as sp
from cuda_verify import SHAPES

from kernels import cuda, cuda_offline
from kernels.tiling import TilingError
from kernels.variants import VARIANTS

NAME = sp.NAME
SMS = 132  # the H200's SMs, for the waves a grid takes
REGS_PER_SM, MAX_WARPS, MAX_BLOCKS = 65536, 64, 32
SMEM_PER_SM, SMEM_RESERVED = 228 * 1024, 1024
NIBBLE_MASKS = ("0xf000f", "0xf000f0")
NIBBLE_SHIFTS = ("0x4", "0x8", "0xc")


def blocks_per_sm(registers: int, threads: int, smem: int) -> int:
    """sm_90's occupancy rules: registers are allocated per warp in units of 256."""
    warps = -(-threads // 32)
    per_warp = -(-registers * 32 // 256) * 256
    by_regs = REGS_PER_SM // (per_warp * warps)
    by_smem = SMEM_PER_SM // (smem + SMEM_RESERVED) if smem else MAX_BLOCKS
    return min(by_regs, MAX_WARPS // warps, MAX_BLOCKS, by_smem)


def classify(instruction: str) -> str:
    full, args = cuda_offline.sass_operands(instruction)
    op = full.split(".")[0]
    if full == "SHF.R.U32.HI" and len(args) > 2 and args[2] in NIBBLE_SHIFTS:
        return "dequant"
    if op == "LOP3" and len(args) > 4 and args[4] == "0xea":
        return "dequant"
    # denorm: the nibble mask alone (an AND: LUT 0xc0), and the scale's power of two (fp16's
    # q << 4 is an IMAD.SHL, which the lane's address arithmetic also is: counted as other)
    if op == "LOP3" and len(args) > 4 and args[4] == "0xc0" and args[2] in NIBBLE_MASKS:
        return "dequant"
    if op in ("HADD2", "HFMA2", "HMUL2"):
        return "dequant"
    if op == "HMMA":
        return "mma"
    if op == "FFMA":  # mma_group_sums' scale and bias, once a group (mma_weights_a: none)
        return "epilogue"
    if op in ("LDG", "LDS", "LDGSTS", "UBLKCP", "SYNCS", "LDSM"):
        return "load"
    return "other"


def mma_a_k_step(name: str, template: dict) -> int:
    """The mma a warp issues per K step of 128: 4 words x 2 per column tile and activation
    tile, and mma_group_sums' sums of x (an mma pair a word and activation tile, A = ones)."""
    m_tiles = -(-template["M_ROWS"] // 8)
    return 8 * m_tiles * (template["COL_TILES"] + getattr(VARIANTS[name], "SUMS_X_MMA", False))


def tile_row(op: str, dtype: str, m: int, params: dict) -> dict:
    k, n = SHAPES[op]
    row = {"shape": op, "dtype": dtype, "m": m, "params": params}
    name, launch_params = sp.launch_of(params)
    try:
        cfg = cuda.launch_config(name, m, k, n, 64, dtype, launch_params)
    except TilingError as e:
        return {**row, "refused": str(e)}
    header = cuda.kernel_header(name, cfg)
    rep, cubin = cuda_offline.cubin_sm90(name, dtype, cfg.template, header)  # one nvcc run
    smem = max(rep.smem_bytes, cfg.shared_memory)
    loop = cuda_offline.hot_loop(cuda_offline.disassemble(cubin))
    # the loop's K steps: its mma over a step's (a count fixed by the tile)
    pairs_a_step = 32 * cfg.template["COL_TILES"]
    hmma = sum(1 for i in loop if cuda_offline.sass_opcode(i) == "HMMA")
    steps = hmma / mma_a_k_step(name, cfg.template)
    kinds = {"dequant": 0, "mma": 0, "load": 0, "epilogue": 0, "other": 0}
    for i in loop:
        kinds[classify(i)] += 1
    b = blocks_per_sm(rep.registers, cfg.threads, smem)
    return {**row, "registers": rep.registers, "spill_bytes": rep.spill_bytes,
            "smem_bytes": smem, "threads": cfg.threads, "blocks": cfg.grid // cfg.threads,
            "blocks_per_sm": b, "warps_per_sm": b * cfg.threads // 32,
            "waves": round(cfg.grid // cfg.threads / (SMS * b), 2) if b else None,
            "loop_k_steps": steps,
            "per_k_step": {kk: round(v / steps, 1) for kk, v in kinds.items()} if steps else {},
            "per_weight_pair": round(sum(kinds.values()) / steps / pairs_a_step, 2)
            if steps else None}


def run(ms: list[int], dtypes=("bfloat16", "float16"), points=None) -> dict:
    rows = []
    for op in ("gate_up", "down"):
        for pt in (points or sp.POINTS)[op]:
            p = sp.as_params(pt)
            for dtype in dtypes:
                for m in ms:
                    rows.append(tile_row(op, dtype, m, p))
                    print(json.dumps(rows[-1]), flush=True, file=sys.stderr)
    nvcc = subprocess.run([cuda_offline.nvcc(), "--version"], capture_output=True, text=True,
                          check=True).stdout.strip().splitlines()[-1]
    return {"nvcc": nvcc, "arch": "sm_90a", "rows": rows}


SHORT = {"n_tile": "n", "k_groups": "kg", "unroll": "u", "prefetch": "pf", "stages": "st",
         "x_early": "xe", "bulk": "bulk", "hi_in_place": "hi", "min_blocks": "mb",
         "late_scales": "ls", "denorm": "dn"}


def tile_label(p: dict) -> str:
    """The requested tile, short: its unroll as asked (kernels.cuda may shrink it to divide a
    K group's steps; the row's loop_k_steps is what the loop does)."""
    name = p.get(sp.VARIANT, NAME)
    d = VARIANTS[name].DEFAULTS
    core = f"{p['n_tile']}x{p['k_groups']} u{p['unroll']}"
    extra = [f"{SHORT.get(k, k)}{v}" for k, v in p.items()
             if k not in ("n_tile", "k_groups", "unroll", sp.VARIANT) and v != d.get(k)]
    return " ".join([*([name] if name != NAME else []), core, *extra])


def render(data: dict) -> str:
    which = data.get("points", "next")
    title = "the next sweep's tiles" if which == "next" else f"the {which} set's tiles"
    out = [f"# Static SASS of {title} ({data['arch']}, {data['nvcc']})", "",
           ("Per warp and K step of 128 in the innermost loop that issues the mma (static "
            "counts, not executed totals); blocks an SM by sm_90's limits. "
            "`bench/sass_static.py`."), "",
           ("| shape | dtype | M | tile | regs | spill B | blocks an SM (warps) | waves | "
            "instr / K step | dequant | mma | loads | epilogue | other | instr / weight pair |"),
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lead = f"| {r['shape']} | {r['dtype']} | {r['m']} | {tile_label(r['params'])} |"
        if "refused" in r:
            out.append(f"{lead} refused: {r['refused'].split(': ', 1)[-1].split(' (')[0]} |"
                       + " |" * 10)
            continue
        k = r["per_k_step"]
        total = sum(k.values()) if k else None
        out.append(
            f"{lead} {r['registers']} | {r['spill_bytes']} | {r['blocks_per_sm']} "
            f"({r['warps_per_sm']}) | {r['waves']} | {total:.0f} | {k['dequant']:.0f} | "
            f"{k['mma']:.0f} | {k['load']:.0f} | {k.get('epilogue', 0):.0f} | "
            f"{k['other']:.0f} | {r['per_weight_pair']} |"
            if k else f"{lead} {r['registers']} | {r['spill_bytes']} | {r['blocks_per_sm']} "
            f"({r['warps_per_sm']}) | {r['waves']} | no K loop |" + " |" * 6)
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "sass_static.json"))
    ap.add_argument("--ms", default="8,16", help="rows M, comma-separated")
    ap.add_argument("--points", default="next", choices=tuple(sp.SETS),
                    help="the set of tiles (bench/sweep_points.SETS); the denorm set's tiles "
                         "each beside their plain selves")
    args = ap.parse_args(argv)
    if cuda_offline.nvcc() is None or cuda_offline.nvdisasm() is None:
        print("sass_static: needs nvcc and nvdisasm (pip install nvidia-cuda-nvdisasm)",
              file=sys.stderr)
        return 2
    points = sp.SETS[args.points]
    if args.points == "denorm":  # each denorm tile beside its plain self, as ncu times them
        points = {op: sp.with_plain_twins(pts) for op, pts in points.items()}
    data = {**run([int(v) for v in args.ms.split(",")], points=points), "points": args.points}
    out = Path(args.out)
    out.write_text(json.dumps(data, indent=1) + "\n")
    md = render(data)
    out.with_suffix(".md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
