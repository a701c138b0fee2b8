"""ncu's kernel times in the H200 bench (issue 14): the CSV read back, merged into the bench's
rows beside a bare read of each row's bytes, and summarized with what limits a launch (issue
slots, the SMs' balance). The tiles chosen from those times: tests/test_cuda_tile_choice.py.
Pure Python on committed ncu output: no GPU, no ncu."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "bench" / "results" / "h200"
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "scripts"))

import cuda_verify as cv
import cuda_verify_ncu as cvn
import sweep_points as sp
from cuda_verify_report import ncu_chain_lines

# The first ncu run (2026-12-03 18:38 UTC): bf16 at M=8, per shape stock, the shipped tile and the
# cold sweep's best, one launch each, with the SpeedOfLight/Occupancy/WarpStateStats sections.
NCU_COLD = H200 / "previous_ncu_cold.csv"


def _as_rows_csv(text: str) -> str:
    """That CSV with its stock and shipped-tile launches labelled as bench rows are (the
    cold-best launches keep a label no row has)."""
    text = re.sub(r"NCU_ORDER (\w+) (\w+) M=8 stock x1", r"NCU_ORDER row \1 \2 M=8 stock x1", text)
    return re.sub(r"NCU_ORDER (\w+) (\w+) M=8 custom \{[^}]*\} x1",
                  r"NCU_ORDER row \1 \2 M=8 custom x1", text)


def _rows() -> list[dict]:
    return [{"shape": s, "dtype": "bfloat16", "M": 8, "floor_us": 12.5, "K": k, "N": n,
             "kernel": "mma_weights_a", "params": {}} for s, (k, n) in cv.SHAPES.items()]


def test_the_summary_of_an_ncu_csv_is_unchanged():
    """The parser the merge and the tile choice share gives the committed summary back."""
    md = NCU_COLD.with_suffix(".md")
    assert cvn.summarize(str(NCU_COLD)) == md.read_text()


def test_ncu_times_merge_into_the_bench_rows_with_what_limits_them():
    res = {"rows": _rows()}
    assert cvn.merge(res, _as_rows_csv(NCU_COLD.read_text()), "x.csv") == 2
    g, d = res["rows"]
    assert g["ncu_stock_us"] == pytest.approx(87.616) and g["ncu_custom_us"] == pytest.approx(50.56)
    assert g["ncu_custom_speedup_vs_stock"] == pytest.approx(87.616 / 50.56)
    assert g["ncu_custom_pct_ceiling"] == pytest.approx(12.5 / 50.56)
    assert d["ncu_stock_us"] == pytest.approx(224.896)
    assert g["ncu_custom_registers"] == 82 and g["ncu_custom_grid"] == "(544, 1, 1)"
    assert g["ncu_custom_achieved_occupancy_pct"] > 0
    assert any("Occupancy" in f for f in g["ncu_custom_findings"])
    assert res["ncu"]["rows_timed"] == 2
    md = ncu_chain_lines({"rows": res["rows"], "ncu": res["ncu"]})
    assert any(ln.startswith("| gate_up | bfloat16 | 8 | 12.5 | 87.6 | 50.6 |") for ln in md)


def _with_bare_reads(text: str) -> str:
    """The rows CSV, then for each of its two rows (gate/up and down) the two 50.2 MB launches
    of read_sizes.csv labelled as that row's bare read, renumbered after the rows' launches so
    that the launch order holds."""
    import csv
    import io

    def records(t: str) -> list[list[str]]:
        return [r for r in csv.reader(ln for ln in t.splitlines() if ln.startswith('"'))
                if r[0].isdigit()]
    reads = (H200 / "read_sizes.csv").read_text()
    ids = sorted({int(r[0]) for r in records(reads)})  # launch order; two per size
    order = [ln for ln in reads.splitlines() if ln.startswith("NCU_ORDER")]
    at = 2 * next(i for i, ln in enumerate(order) if ln.startswith("NCU_ORDER read 50.2 MB"))
    mb50 = ids[at:at + 2]
    next_id = max(int(r[0]) for r in records(text)) + 1
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n")
    labels = []
    for shape in ("gate_up", "down"):
        labels.append(f"NCU_ORDER row {shape} bfloat16 M=8 read x2")
        for old in mb50:
            w.writerows([str(next_id), *r[1:]] for r in records(reads) if int(r[0]) == old)
            next_id += 1
    return "\n".join([text, *labels, buf.getvalue()])


def test_a_rows_bare_read_gives_the_share_of_what_a_read_of_its_size_reaches():
    """Each row's bare read (a kernel that only reads the row's bytes, alone under ncu) is
    merged as ``ncu_read_us``, and the custom kernel's share of that read's rate beside it."""
    res = {"rows": _rows()}
    assert cvn.merge(res, _with_bare_reads(_as_rows_csv(NCU_COLD.read_text())), "x.csv") == 2
    g, d = res["rows"]
    assert g["ncu_read_us"] == pytest.approx((13.6 + 14.56) / 2)  # read_sizes' 50.2 MB launches
    assert g["ncu_custom_pct_of_bare_read"] == pytest.approx(g["ncu_read_us"] / 50.56)
    assert d["ncu_read_us"] == pytest.approx(g["ncu_read_us"])
    assert g["ncu_custom_us"] == pytest.approx(50.56)  # the read is not taken for custom
    md = ncu_chain_lines({"rows": res["rows"], "ncu": res["ncu"]})
    assert any(ln.startswith("| gate_up | bfloat16 | 8 | 12.5 | 87.6 | 50.6 |")
               and "| 14.1 | 28% |" in ln for ln in md)


def test_a_launch_of_the_wrong_kernel_is_not_taken_for_the_path():
    """Labels and kernels out of step (a path that launched another kernel) leave the row
    without that time instead of giving it another launch's."""
    text = _as_rows_csv(NCU_COLD.read_text())
    swapped = (text.replace("M=8 stock x1", "M=8 TMP x1").replace("M=8 custom x1", "M=8 stock x1")
               .replace("M=8 TMP x1", "M=8 custom x1"))
    res = {"rows": _rows()}
    assert cvn.merge(res, swapped, "x.csv") == 0
    assert not any(k.startswith(("ncu_stock_us", "ncu_custom_us"))
                   for r in res["rows"] for k in r)


def test_the_read_sizes_summary_is_what_the_committed_ncu_csv_says():
    """bench/read_sizes_ncu.py's table (the rate a plain cold read of each size reaches alone)
    is made from ncu's CSV, labels from the script's NCU_ORDER lines: the committed table must
    be what its CSV gives, and the 50 MB row the median of its two launches (13.6, 14.56 us)."""
    import read_sizes_ncu as rs
    res = Path(__file__).resolve().parents[1] / "bench" / "results" / "h200"
    got = rs.summarize(str(res / "read_sizes.csv"))
    assert got.strip() == (res / "read_sizes.md").read_text().strip()
    row = next(ln for ln in got.splitlines() if ln.startswith("| read | 50.2 |"))
    assert row.split("|")[3].strip() == "14.1" and row.split("|")[5].strip() == "77%"


def test_the_sms_imbalance_is_read_where_the_run_measured_it(tmp_path):
    """sm__cycles_active's max over its mean says how long the busiest SM ran past the mean
    one (544 blocks on 132 SMs leave 16 SMs a fifth block): a column of the summary and a
    key of the merged row where the CSV has both, and neither where it has not."""
    text = cvn.csv_of([("row gate_up bfloat16 M=8 custom", "dflash2_mma_weights_a", 22.5)])
    rows = text.splitlines()
    rows += [rows[-1].replace("gpu__time_duration.sum", name).replace('"usecond"', '"cycle"')
             .replace('"22.5"', f'"{v}"') for name, v in (("sm__cycles_active.max", "50,000"),
                                                           ("sm__cycles_active.avg", "40,000"))]
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text("\n".join(rows) + "\n")
    md = cvn.summarize(str(csv_path)).splitlines()
    assert md[0].endswith("| SM busy max/mean |") and md[2].endswith("| 1.25 |")
    plain = tmp_path / "plain.csv"
    plain.write_text(text)
    assert "SM busy" not in cvn.summarize(str(plain))
    (k,) = cvn.parse(csv_path.read_text())
    assert cvn.sm_imbalance(k) == 1.25 and cvn.sm_imbalance(cvn.parse(text)[0]) is None
    rows = [{"shape": "gate_up", "dtype": "bfloat16", "M": 8, "floor_us": 13.0}]
    cvn.merge({"rows": rows}, csv_path.read_text(), "ncu.csv")
    assert rows[0]["ncu_custom_sm_busy_max_over_mean"] == 1.25
    from cuda_verify_report import has_sm_busy
    assert has_sm_busy({"rows": rows}) and not has_sm_busy({"rows": [{}]})
    table = [ln for ln in ncu_chain_lines({"rows": rows, "ncu": {}}) if ln.startswith("| ")]
    assert table[0].endswith("| custom SM busy max/mean |") and table[1].endswith("| 1.25 |")


def test_the_issue_slots_use_is_read_where_the_run_measured_it(tmp_path):
    """The share of cycles a scheduler issued, and the warp instructions in all (millions):
    two columns of the summary where the CSV has them, none where it has not."""
    text = cvn.csv_of([("tile gate_up bfloat16 M=8 ablate 2", "dflash2_mma_weights_a", 18.6)])
    rows = text.splitlines()
    rows += [rows[-1].replace("gpu__time_duration.sum", name).replace('"usecond"', f'"{unit}"')
             .replace('"18.6"', f'"{v}"') for name, unit, v in (
                 (cvn.ISSUE_ACTIVE, "%", "91.37"), (cvn.WARP_INSTRUCTIONS, "inst", "12,345,678"))]
    csv_path = tmp_path / "ncu.csv"
    csv_path.write_text("\n".join(rows) + "\n")
    md = cvn.summarize(str(csv_path)).splitlines()
    assert md[0].endswith("| issue active % | warp inst (M) |")
    assert md[1].count("|---") == 12 and md[2].endswith("| 91.4 | 12.3 |")
    plain = tmp_path / "plain.csv"
    plain.write_text(text)
    assert "issue active" not in cvn.summarize(str(plain))


def test_a_bare_points_times_the_tiles_the_cold_sweep_timed():
    """--points after a sweep of the bulk-x set: the ncu run times those tiles alone, not the
    next set's (which it once did, timing out before any of them: bulk_x_2303/README.md)."""
    cold = json.loads((ROOT / "bench/results/h100/bulk_x_2303/m8_cold_sweep.json").read_text())
    want = {op: [sp.as_params(pt) for pt in sp.SETS["bulk-x"][op]] for op in ("gate_up", "down")}
    for op, tiles in want.items():
        got = cvn.point_tiles("", cold, f"{op}/bfloat16")
        assert got == tiles and any(t.get("x_early") == 2 for t in got)
    assert cvn.point_tiles(None, cold, "gate_up/bfloat16") == []
    assert cvn.point_tiles("", cold, "vocab/bfloat16") == []  # a shape the sweep did not run
    # named, or with no sweep to follow: that set, less what --no-ring leaves out
    assert cvn.point_tiles("bulk-x", None, "down/float16") == want["down"]
    nxt = cvn.point_tiles("", None, "gate_up/bfloat16", no_ring=True)
    assert nxt == [sp.as_params(pt) for pt in sp.selected(sp.POINTS["gate_up"], no_ring=True)]
    assert nxt != want["gate_up"]


def test_an_unknown_points_set_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        cvn.main(["--points", "no-such-set", "--shapes", "gate_up"])
    assert e.value.code == 2
    assert "--points no-such-set: no such set" in capsys.readouterr().err
