"""Where a kernel's warps spend their time, instruction by instruction: ncu's source page
(SASS with warp-stall samples, ``scripts/h200.sh sass``) summed by opcode.

    python bench/sass_stalls.py SASS_SOURCE.csv[.gz] > sass.md

Sums of stall reasons say that a kernel waits; they do not say on what. The source page
attributes every sample to the instruction the warp was stuck at, and the static count of
each opcode is what the compiler made of the source. Both found the dequantization's extra
LOP3 per nibble pair (2026-12-04: an AND and an OR of two immediates, which one LOP3 cannot
take) that the PTX hid.
"""

from __future__ import annotations

import argparse
import collections
import csv
import gzip
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path

ALL = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


@dataclass
class Kernel:
    name: str
    rows: list[dict] = field(default_factory=list)

    @property
    def samples(self) -> int:
        return sum(_int(r[ALL]) for r in self.rows)

    @property
    def executed(self) -> int:
        return sum(_int(r[EXECUTED]) for r in self.rows)


def _int(v: str) -> int:
    return int(float(v)) if v not in ("", "-") else 0


def opcode(source: str) -> str:
    """``@P0 BRA 0x..`` -> BRA; ``LOP3.LUT R1, ...`` -> LOP3."""
    words = source.split()
    if not words:
        return ""
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


def parse(text: str) -> list[Kernel]:
    """ncu --page source --print-source sass --csv: per kernel a "Kernel Name" line, a header
    line, then one line an instruction."""
    kernels: list[Kernel] = []
    header: list[str] | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            kernels.append(Kernel(row[1]))
            header = None
        elif row[0] == "Address":
            header = row
        elif header and kernels:
            kernels[-1].rows.append(dict(zip(header, row, strict=False)))
    return kernels


def read(path: str) -> str:
    """A CSV's text, gzipped (a name ending .gz: the committed ncu CSVs of 100 KB or more, so
    that the tracked tree and a wheel part fit one device call) or not."""
    raw = Path(path).read_bytes()
    return (gzip.decompress(raw) if path.endswith(".gz") else raw).decode()


def summarize(kernels: list[Kernel], top: int = 16) -> str:
    out = []
    for k in kernels:
        samples, executed = k.samples or 1, k.executed or 1
        reasons = collections.Counter()
        static, done, stalled = (collections.Counter() for _ in range(3))
        for r in k.rows:
            for h, v in r.items():
                if h.startswith("stall_") and "Not Issued" not in h:
                    reasons[h[len("stall_"):]] += _int(v)
            op = opcode(r.get("Source", ""))
            static[op] += 1
            done[op] += _int(r[EXECUTED])
            stalled[op] += _int(r[ALL])
        out += [f"### {k.name.split('(')[0]}", "",
                f"{len(k.rows)} instructions, {k.executed} warp instructions executed, "
                f"{k.samples} stall samples. Samples by reason: "
                + ", ".join(f"{h} {100 * v / samples:.1f}%" for h, v in reasons.most_common(6)),
                "", "| opcode | static | % of executed | % of samples |", "|---|---|---|---|"]
        out += [f"| {op} | {static[op]} | {100 * v / executed:.1f} | "
                f"{100 * stalled[op] / samples:.1f} |" for op, v in done.most_common(top)]
        out.append("")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="ncu's source page as CSV (.gz read as such)")
    ap.add_argument("--top", type=int, default=16, help="opcodes a kernel (by executed)")
    args = ap.parse_args(argv)
    try:
        kernels = parse(read(args.csv))
    except OSError as e:
        print(f"error: cannot read {args.csv}: {e.strerror}", file=sys.stderr)
        return 2
    if not kernels:
        print(f"error: {args.csv} holds no ncu source page", file=sys.stderr)
        return 2
    sys.stdout.write(summarize(kernels, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
