"""Rehearse the device plan's Python on a CPU before device time is spent on it.

    python scripts/rehearse_h200_plan.py [--out DIR] [--emulate] [--point-m 8] [--points SET]

The next H200 session runs, in calls of at most 10 minutes out of 30 (scripts/h200.sh):
``coldsweep --check-only``, ``ncucold --points``, ``choose``, then launches the chosen table.
A plumbing mistake there (a key a new variant lacks, a label the chooser cannot read) costs a
machine's start and the rest of a call. Here the same entry points run, in one process, with
MLX's CUDA kernel factory replaced by a stand-in whose kernel is MLX's float32 QMM of the
launch's arrays (so a point is "exact" against its twin by construction: nothing here says a
kernel is right), gate/up and down at their K with fewer columns, and ncu's CSV made from the
launches the ncu run lists, with made-up times that favour one variant, so that the choice
must carry that variant into the table. bf16/fp16 stock runs in float32 too: the CPU's own
half-precision QMM accumulates in low precision (../shared/FACTS.md) and would fail every
point's closeness to stock. The packed bulk points are left out (``--no-bulk``, as h200.sh
does after a failed bulk smoke test); ``rehearse_timed`` runs them, the stand-in reading their
packed w back, in the timed sweep the plan runs on them.

``--emulate`` checks every point on its own kernel body instead (kernels/cuda_emu), at the real
K: the check the device's check-only sweep makes, less the tensor core (a minute).

Writes only under ``--out`` (default: a temporary folder); prints each step's outcome (JSON)
and exits 1, naming what is wrong in one line each, when a step does not do what the plan
needs.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench", ROOT / "scripts"):
    sys.path.insert(0, str(p))

import mlx.core as mx

# What the made-up ncu times favour in each set (a launch label holding it is the fastest),
# and so what every entry must be chosen and launched with: the next set's group sums; the
# denorm set's denorm tiles (each timed beside its plain self and the entry's own tile).
FAVOURED = {"next": "mma_group_sums", "denorm": "'denorm': 1"}
FAVOURED_AS = {"next": "mma_group_sums", "denorm": "mma_weights_a denorm"}


def described(variant: str, params: dict) -> str:
    """A chosen tile as the rehearsal names it: its variant, and ``denorm`` where it has it."""
    return variant + (" denorm" if params.get("denorm") else "")
COLUMNS = {"gate_up": 1152, "down": 384}  # N a shape keeps: whole tiles of 16 to 128 (col_warps)


# While the ncu run's launches are made, each stand-in launch prints its kernel's name, so the
# made-up CSV names every launch's kernel as ncu does (the variant is in it; the label of the
# table's own tile, "custom {params}", does not say it).
_NAME_LAUNCHES = False


def _standin(name, input_names, output_names, source, header="", **_):
    def kernel(*, inputs, template, grid, threadgroup, output_shapes, output_dtypes):
        if _NAME_LAUNCHES:
            print(f"STANDIN custom_kernel_{name}_standin")
        t = dict(template)
        x, w, s, b = (a.astype(mx.float32) if a.dtype != mx.uint32 else a for a in inputs)
        if t.get("PACKED"):  # w in the bulk tiles' layout (pack_weights): read it back as MLX's
            w = _unpacked(w, t["COL_TILES"] * 16, t["K_GROUPS"], t["UNROLL"])
        y = mx.quantized_matmul(x, w, s, b, transpose=True, group_size=t["GS"], bits=4)
        return [y.astype(output_dtypes[0])]
    return kernel


def _unpacked(w: mx.array, n_tile: int, k_groups: int, unroll: int) -> mx.array:
    """``mma_weights_a.pack_weights`` undone: [block][stage][K group][row][words] back to rows."""
    n, words = w.shape
    steps = words // 16 // k_groups // unroll
    return w.reshape(n // n_tile, steps, k_groups, n_tile, unroll * 16).transpose(
        0, 3, 2, 1, 4).reshape(n, words)


@contextlib.contextmanager
def _stood_in(*extra: tuple):
    """The stand-in kernel factory and float32 stock in place, each shape cut to COLUMNS, the
    launch caches empty; ``extra``: more (module, attribute, value) to set. All put back after."""
    import cuda_verify as cv

    from kernels import cuda

    patches = [(mx.fast, "cuda_kernel", _standin), (cv, "stock", _stock_f32), *extra]
    saved = [(mod, name, getattr(mod, name)) for mod, name, _ in patches]
    shapes = dict(cv.SHAPES)
    for mod, name, value in patches:
        setattr(mod, name, value)
    cv.SHAPES.update({op: (cv.SHAPES[op][0], n) for op, n in COLUMNS.items()})
    cuda.clear_caches()
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)
        cv.SHAPES.clear()
        cv.SHAPES.update(shapes)
        cuda.clear_caches()


def rehearse_timed(out: Path, points: str = "bulk-vs-table", point_m: int = 8) -> dict:
    """The timed sweep the plan runs on a packing set (``--chain --final-top 4 --time-each``),
    with the stand-in, which reads packed w back (so a bulk point is bit-exact against its
    register twin as on the device), and a made-up read ceiling (the real one sums 4 GiB): what
    it checks is plumbing only, every final candidate timed compiled with the layouts made at
    load, not a time. ``point_m``: the M every point is checked and timed at, and the finals'."""
    import cuda_verify as cv
    import cuda_verify_cold_sweep as cs

    ceiling = (cv, "read_ceiling", lambda gib, reps: {"sum_read_only": {"Bps": 4e12}})
    copies = (cv, "COLD_TARGET_BYTES", 20e6)  # 3 copies of each shape's few columns
    with _stood_in(ceiling, copies), contextlib.redirect_stdout(io.StringIO()):
        rc = cs.main(["--out", str(out), "--points", points, "--ms", str(point_m),
                      "--point-m", str(point_m), "--shapes", ",".join(cs.sp.SETS[points]),
                      "--dtypes", "bfloat16", "--chain", "--final-top", "4", "--time-each",
                      "--no-ring", "--batch", "3", "--reps", "1", "--budget-s", "60"])
    return {"rc": rc, **json.loads((out / "cuda_verify_cold_sweep.json").read_text())}


def _stock_f32(x, wq, s, b):
    y = mx.quantized_matmul(x.astype(mx.float32), wq, s.astype(mx.float32),
                            b.astype(mx.float32), transpose=True, group_size=64, bits=4)
    return y.astype(x.dtype)


def _launches(ncu_output: str) -> list[tuple[str, str]]:
    """(label, kernel name) of each launch the ncu run lists: the name its stand-in printed
    before the label's NCU_ORDER line (stock's, which MLX builds, prints none)."""
    out, name = [], "qmm_sm80_kernel"
    for ln in ncu_output.splitlines():
        if ln.startswith("STANDIN "):
            name = ln.removeprefix("STANDIN ")
        elif ln.startswith("NCU_ORDER"):
            out.append((ln.removeprefix("NCU_ORDER ").rsplit(" x", 1)[0], name))
            name = "qmm_sm80_kernel"
    return out


def _made_up_us(label: str, kernel: str, favoured: str) -> tuple[str, float]:
    path = label.split(" ", 3)[3]
    if path == "stock":
        return "qmm_sm80_kernel", 80.0
    return kernel, 15.0 + 0.01 * len(path) if favoured in path else 20.0


def _emulated(x, qw, params):
    """A sweep point's launch on the CUDA emulator (kernels/cuda_emu): the kernel body itself."""
    import sweep_points as sp

    from kernels.cuda_emu import launch
    name, p = sp.launch_of(params)
    return launch.launch(name, x, qw, p)


def rehearse(out: Path, emulate: bool = False, point_m: int = 8, points: str = "next") -> dict:
    """Each step's outcome; raises nothing a step can report. ``emulate``: the check-only
    sweep's launches run the kernels' own bodies on the CUDA emulator instead of the stand-in
    (every point at the real K, slow: minutes). ``points``: the set checked, which ncu
    then times (a bare ``--points``: the tiles the sweep's JSON lists)."""
    import cuda_verify as cv
    import cuda_verify_cold_sweep as cs
    import cuda_verify_ncu as cvn
    import regen_sm90_table as regen

    from kernels import cuda
    from kernels.qweights import QWeights

    global _NAME_LAUNCHES
    report: dict = {}
    with _stood_in(*([(cs, "launch", _emulated)] if emulate else [])):
        try:
            sweep = out / "cuda_verify_cold_sweep.json"
            with contextlib.redirect_stdout(io.StringIO()):
                rc = cs.main(["--check-only", "--ms", str(point_m), "--point-m", str(point_m),
                              "--no-bulk", "--out", str(out), "--points", points])
            shapes = json.loads(sweep.read_text())["shapes"]
            report["check_only_rc"] = rc
            report["check_only"] = {
                key: {"points": len(e["points"]),
                      "ok": sum(bool(p.get("ok")) for p in e["points"]),
                      "errors": [p["error"].split(" (")[0] for p in e["points"] if "error" in p]}
                for key, e in shapes.items()}
            buf, _NAME_LAUNCHES = io.StringIO(), True
            with contextlib.redirect_stdout(buf):
                # a bare --points: the tiles the sweep above timed, whichever set it ran
                cvn.main(["--points", "--no-bulk", "--ms", str(point_m), "--dtypes",
                          "bfloat16,float16", "--cold-sweep", str(sweep)])
            _NAME_LAUNCHES = False
            launches = _launches(buf.getvalue())
            report["ncu_launches"] = len(launches)
            # denorm tiles ncu leaves out, by shape and dtype: their weights would run them plain
            skipped = [ln.split()[1:3] for ln in buf.getvalue().splitlines()
                       if ln.startswith("NCU_SKIP") and "denorm's limit" in ln]
            report["ncu_denorm_skipped"] = {f"{op}/{dt}": skipped.count([op, dt])
                                            for op, dt in sorted(map(tuple, skipped))}
            csv_path = out / "ncu_cold.csv"
            favoured = FAVOURED.get(points, FAVOURED["next"])
            csv_path.write_text(cvn.csv_of([(lb, *_made_up_us(lb, kernel, favoured))
                                            for lb, kernel in launches]))
            chosen, record = out / "chosen_table.json", out / "tile_choice.json"
            with contextlib.redirect_stdout(io.StringIO()):
                report["choose_rc"] = regen.main([
                    "--choose-from-ncu", str(csv_path), "--cold-sweep", str(sweep),
                    "--out", str(chosen), "--choice-out", str(record)])
            choices = json.loads(record.read_text())["choices"]
            # a kept entry is what it was: the made-up times may rank its own tile first
            report["chosen"] = {key: described(c["variant"], c["chosen"]) if "chosen" in c
                                else described(c["previous_variant"], c["previous"]) if "kept" in c
                                else c.get("skipped") for key, c in choices.items()}
            launched = {}
            for e in json.loads(chosen.read_text())["entries"]:
                if e["devices"] != ["sm_90"] or e["M"] != point_m or e["shapes"][0] not in COLUMNS:
                    continue
                v = e["candidate"] if e["variant"] == "stock" else e
                k, n = cv.SHAPES[e["shapes"][0]]
                dt = getattr(mx, e["dtypes"][0])
                qw = QWeights.quantize(mx.random.normal((n, k)) / k ** 0.5, 64, 4, dt)
                x = mx.random.normal((point_m, k)).astype(dt)
                y = cuda.launch(v["variant"], x, qw, v["params"])
                mx.eval(y)
                launched[f"{e['shapes'][0]}/{e['dtypes'][0]}"] = described(v["variant"],
                                                                          v["params"])
            report["launched"] = launched
        finally:
            _NAME_LAUNCHES = False
    return report


def problems(report: dict, points: str = "next") -> list[str]:
    """What the plan needs of each step: every point checked (an error only where a lever
    refuses the dtype), each entry chosen and launched with what the set's times favour."""
    want = FAVOURED_AS.get(points, FAVOURED_AS["next"])
    out = [] if report["check_only_rc"] == 0 else [
        f"check-only exited {report['check_only_rc']} (a point not bit-exact)"]
    for key, c in report["check_only"].items():
        # bf16 refuses hi_in_place; fp16's denorm 2 refuses the bench's scales (over 2^-8)
        expected = ("float16 only",) + (("over its limit",) if key.endswith("float16") else ())
        other = [e for e in c["errors"] if not any(x in e for x in expected)]
        if other or c["ok"] + len(c["errors"]) != c["points"]:
            out.append(f"check-only {key}: {c['ok']} of {c['points']} ok, errors {other}")
    unexpected = [key for key in report.get("ncu_denorm_skipped", {})
                  if not key.endswith("float16")]  # only fp16's denorm 2 is over its limit
    if unexpected:
        out.append(f"ncu skipped denorm tiles on {unexpected}: the bench's scales should fit")
    if report["choose_rc"] != 0:
        out.append(f"choose exited {report['choose_rc']}")
    for key, variant in {**report["chosen"], **report["launched"]}.items():
        if variant != want:
            out.append(f"{key}: {variant}, not {want}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=None, help="folder for the rehearsal's files")
    ap.add_argument("--emulate", action="store_true",
                    help="check every point by running its kernel body on the CUDA emulator "
                         "(kernels/cuda_emu) instead of the stand-in: minutes")
    ap.add_argument("--point-m", type=int, default=8, help="the M the points are checked at")
    ap.add_argument("--points", default="next", help="the set of points (bench/sweep_points.SETS)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        out.mkdir(parents=True, exist_ok=True)
        report = rehearse(out, args.emulate, args.point_m, args.points)
    print(json.dumps(report, indent=1))
    bad = problems(report, args.points)
    for line in bad:
        print(f"rehearsal: {line}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
