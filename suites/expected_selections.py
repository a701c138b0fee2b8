"""The expected-selections data file: what each device profile must select, per shape/dtype/M.

``expected_selections.json`` is a reviewed record, not a mirror of the table: the selection
suite fails when the table's choice for any row changes. After an intended table change, review
the diff this prints and write it with

    python -m suites.expected_selections --write
"""

from __future__ import annotations

import argparse
import json
import sys

import mlx.core as mx

from devices.identity import DeviceIdentity, current_device
from kernels.selection import load_table, select
from suites.support import HERE

PATH = HERE / "expected_selections.json"
PROFILES = ["applegpu_g13g", "applegpu_g13s", "applegpu_g14g", "applegpu_g14s",
            "applegpu_g14d", "applegpu_g15s", "applegpu_g16g", "cpu", "sm_90"]
PRODUCTION = ["gate_up", "down", "out", "attn_q", "attn_kv", "router", "draft_o", "draft_q",
              "draft_down", "draft_kv", "vocab"]
DTYPES = ["bfloat16", "float16", "float32"]
ROWS = [4, 8, 16]


def profile_device(profile: str):
    """The identity a profile's device reports. An NVIDIA GPU cannot be emulated (selection is
    all that differs), so its profile is the identity an H200 reports through MLX. The cpu
    profile is built, not read off this host: on a GPU host the native device is the GPU."""
    if profile == "cpu":
        return DeviceIdentity("cpu", None, None, "cpu", "cpu", mx.__version__, False)
    if profile.startswith("sm_"):
        return DeviceIdentity(profile, None, None, "NVIDIA H200", "cuda", mx.__version__, False)
    return current_device(profile)


def current_rows() -> list[dict]:
    table = load_table()
    rows = []
    for profile in PROFILES:
        dev = profile_device(profile)
        for op in PRODUCTION:
            k, n = table.shapes[op]
            for dtype in DTYPES:
                for m in ROWS:
                    c = select(dev, dtype, m, k, n)
                    rows.append({"device": profile, "op": op, "K": k, "N": n, "dtype": dtype,
                                 "M": m, "variant": c.variant, "reason": c.reason})
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the current selections")
    args = ap.parse_args(argv)
    rows = current_rows()
    old = {json.dumps({k: r[k] for k in ("device", "op", "dtype", "M")}): r
           for r in (json.loads(PATH.read_text())["rows"] if PATH.exists() else [])}
    changed = 0
    for r in rows:
        key = json.dumps({k: r[k] for k in ("device", "op", "dtype", "M")})
        before = old.get(key)
        if before is None or (before["variant"], before["reason"]) != (r["variant"], r["reason"]):
            changed += 1
            was = f"{before['variant']} ({before['reason']})" if before else "(new)"
            print(f"{r['device']} {r['op']} {r['K']}x{r['N']} {r['dtype']} M={r['M']}: "
                  f"{was} -> {r['variant']} ({r['reason']})")
    print(f"{changed} of {len(rows)} rows differ from {PATH.name}")
    if args.write:
        PATH.write_text(json.dumps({"_doc": __doc__.split("\n\n")[0], "rows": rows}, indent=0)
                        + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
