"""One run as a single self-contained HTML page: matrix, regression flags, trend plots.

Self-contained because the page is mailed, attached to CI and opened from disk on machines with
no network: inline CSS, inline SVG (``farm.report.svg_plot``), no script, no external URL. The data
comes from the `db` library (``show_run``, ``analyse``) plus one query for the measurements the
plots need over the runs up to RUN, so the page costs a few queries, not a load of every result.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from html import escape

from sqlalchemy import select

from db import models as m
from db.events import CATEGORIES
from db.history import History
from db.queries import devices, resolve_run, show_run
from db.regressions import HEADROOM_LEVELS, ULP_MEASURES, Report, analyse
from farm.report.svg_plot import PALETTE, Guide, Series, line_plot

DEFAULT_RUNS = 20
BENCH_MEASURE = "rows_per_s"
PLOT_MEASURES = (*ULP_MEASURES, "headroom", "deviation", BENCH_MEASURE)
STOCK = "stock"
# name shown, cell colour; worst first, the order a cell picks its colour by.
CATEGORY_LOOK = {
    "crashed": ("crashed", "#7a0019"),
    "unexpected_fail": ("unexpected fail", "#d7301f"),
    "unexpected_pass": ("unexpected pass (stale)", "#9e5fd6"),
    "expected_fail": ("expected fail", "#e8a33d"),
    "skipped": ("skipped", "#9aa0a6"),
    "expected_pass": ("expected pass", "#3f9b4f"),
}
SEVERITY_COLOUR = {"high": "#d7301f", "medium": "#e8a33d", "low": "#4a7dbf", "note": "#9aa0a6"}

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid
#ddd;padding-bottom:4px}h3{font-size:14px;margin:0 0 6px}
.meta{color:#555}.meta code{background:#f3f3f3;padding:1px 4px;border-radius:3px}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #d5d5d5;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f5f5f5;font-weight:600}
td.test{font-family:ui-monospace,Menlo,monospace;font-size:12.5px}
td.cell{text-align:center;min-width:120px;color:#fff}td.cell.empty{background:#fafafa;color:#999}
.chip{display:inline-block;border-radius:9px;padding:0 7px;margin:1px 2px;font-size:12px;
color:#fff;white-space:nowrap}td.cell .chip{background:rgba(0,0,0,.18)}
.legend span.chip{margin-right:8px}.sev{font-weight:600;color:#fff;border-radius:3px;
padding:0 6px}.evidence{font-family:ui-monospace,Menlo,monospace;font-size:12px}
.current-run{background:#fff8d6}.none{color:#3f9b4f;font-weight:600}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(430px,1fr));gap:14px}
.card{border:1px solid #ddd;border-radius:6px;padding:8px 10px;background:#fff}
.card .note{color:#666;font-size:12px}
svg.plot{width:100%;height:auto;display:block;font-family:system-ui,sans-serif}
svg .plot-title{font-size:12px;font-weight:600;fill:#333}svg .tick{font-size:10px;fill:#555}
svg .axis-label{font-size:11px;fill:#333}svg .legend{font-size:11px;fill:#333}
svg .axis{stroke:#444;stroke-width:1}svg .grid{stroke:#e6e6e6;stroke-width:1}
svg .series{stroke-width:1.8}svg .current{stroke:#c9a800;stroke-dasharray:4 3;stroke-width:1.5}
svg .guide{stroke-dasharray:6 3;stroke-width:1}svg .guide-label{font-size:10px}
"""


@dataclass(frozen=True)
class PlotKey:
    """A kernel at a shape: the variant that served, its dtype, and (M, K, N)."""

    variant: str
    dtype: str
    M: int
    K: int
    N: int

    @property
    def title(self) -> str:
        return f"{self.variant} · {self.dtype} · M={self.M} K={self.K} N={self.N}"

    @property
    def slug(self) -> str:
        return _slug(f"{self.variant}-{self.dtype}-m{self.M}-{self.K}x{self.N}")


@dataclass
class Cell:
    """The values one device gave one plot in one run (several tests may share a kernel)."""

    values: list[float | None] = field(default_factory=list)
    tests: list[str] = field(default_factory=list)


# plot subject -> measure -> (device label, run index) -> Cell
Trends = dict[object, dict[str, dict[tuple[str, int], Cell]]]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-")


def _when(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def render_report(history: History, run_id: str | None, *, against: str = "baseline",
                  runs: int = DEFAULT_RUNS) -> str:
    """The whole page for ``run_id`` (an id, a unique prefix, ``latest`` or None for the
    newest run); plots cover at most ``runs`` runs up to and including it."""
    run_id = resolve_run(history, run_id)
    doc = show_run(history, run_id)
    report = analyse(history, run_id, against)
    window = run_window(history, run_id, runs)
    trends = load_trends(history, [r["id"] for r in window])
    labels = sorted({d for subject in trends.values() for cells in subject.values()
                     for d, _ in cells})
    colours = {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(labels)}
    current = next(i for i, r in enumerate(window) if r["id"] == run_id)
    r = doc["run"]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>farm report {escape(run_id)}</title><style>{CSS}</style></head><body>",
        f'<h1>farm report: run <code id="run-id">{escape(run_id)}</code></h1>',
        (f'<p class="meta">suite <code>{escape(r["suite"])}</code> · status '
        f'<code>{escape(r["status"])}</code> · started {_when(r["started"])} UTC · revision '
        f'<code>{escape((r["git_sha"] or "-")[:12])}{" (dirty)" if r["dirty"] else ""}</code>'
        f" · generated {_when(time.time())} UTC</p>"),
        _jobs_section(doc), _matrix_section(doc), _flags_section(report),
        _runs_section(window, current),
        # Bench first: a few plots, one per shape; the numeric cards are many.
        _bench_section(trends, window, colours, current),
        _numeric_section(trends, window, colours, current),
        "</body></html>",
    ]
    return "\n".join(parts)


# -- data ---------------------------------------------------------------------------------------

def run_window(h: History, run_id: str, limit: int) -> list[dict]:
    """The runs the plots span: ``limit`` runs started no later than ``run_id``, oldest first."""
    with h.engine.connect() as c:
        started = c.execute(select(m.runs.c.started).where(m.runs.c.id == run_id)).scalar()
        rows = c.execute(select(m.runs.c.id, m.runs.c.suite, m.runs.c.started, m.runs.c.status)
                         .where((m.runs.c.started < started)
                                | ((m.runs.c.started == started) & (m.runs.c.id <= run_id)))
                         .order_by(m.runs.c.started.desc(), m.runs.c.id.desc())
                         .limit(max(limit, 1))).mappings().all()
    return [dict(x) for x in reversed(rows)]


def _plot_key(sels: list[tuple]) -> PlotKey | None:
    """The kernel a result measured: its first tuned selection (stock is the reference the
    suites compare against), else its first."""
    if not sels:
        return None
    tuned = [s for s in sels if s[0] != STOCK]
    return PlotKey(*(tuned or sels)[0])


def load_trends(h: History, run_ids: list[str]) -> Trends:
    """Per plot subject (a ``PlotKey``, or a bench test's node id), per measure, per (device,
    run index): the values recorded. Reads only the plotted measures, through their index."""
    index = {rid: i for i, rid in enumerate(run_ids)}
    labels = {i: d["label"] for i, d in devices(h).items()}
    q = (select(m.measurements.c.name, m.measurements.c.value, m.measurements.c.bound,
                m.results.c.id, m.results.c.nodeid, m.jobs.c.run_id, m.jobs.c.device_id)
         .join(m.results, m.results.c.id == m.measurements.c.result_id)
         .join(m.jobs, m.jobs.c.id == m.results.c.job_id)
         .where(m.jobs.c.run_id.in_(run_ids), m.measurements.c.name.in_(PLOT_MEASURES))
         .order_by(m.results.c.id, m.measurements.c.id))
    with h.engine.connect() as c:
        rows = c.execute(q).all() if run_ids else []
        ids = sorted({row.id for row in rows})
        sels: dict[int, list[tuple]] = defaultdict(list)
        for i in range(0, len(ids), 500):
            s = m.selections.c
            for row in c.execute(select(s.result_id, s.variant, s.dtype, s.M, s.K, s.N)
                                 .where(s.result_id.in_(ids[i:i + 500])).order_by(s.id)):
                sels[row[0]].append(tuple(row[1:]))
    per_result: dict[int, dict[str, tuple[float | None, float | None]]] = defaultdict(dict)
    where: dict[int, tuple[str, str, int]] = {}
    for row in rows:
        per_result[row.id].setdefault(row.name, (row.value, row.bound))
        where[row.id] = (row.nodeid, labels[row.device_id], index[row.run_id])
    trends: Trends = defaultdict(lambda: defaultdict(lambda: defaultdict(Cell)))
    for rid, meas in per_result.items():
        nodeid, label, x = where[rid]
        key = _plot_key(sels.get(rid, []))
        if BENCH_MEASURE in meas:
            _add(trends[("bench", key or nodeid)], BENCH_MEASURE, label, x,
                 meas[BENCH_MEASURE][0], nodeid)
        if key is None:
            continue
        for name in ULP_MEASURES:
            if name in meas:
                _add(trends[key], name, label, x, meas[name][0], nodeid)
        if "headroom" in meas:
            _add(trends[key], "headroom", label, x, meas["headroom"][0], nodeid)
        elif "deviation" in meas and meas["deviation"][1]:
            value = meas["deviation"][0]
            _add(trends[key], "headroom", label, x,
                 None if value is None else value / meas["deviation"][1], nodeid)
    return trends


def _add(measures: dict, name: str, label: str, x: int, value: float | None, test: str) -> None:
    cell = measures[name][(label, x)]
    cell.values.append(value)
    cell.tests.append(test)


def _series(cells: dict[tuple[str, int], Cell], colours: dict[str, str]) -> list[Series]:
    """One series per device; several values in one run plot as the worst (largest; a
    non-finite one wins), the tooltip naming the tests."""
    out: dict[str, Series] = {}
    for (label, x), cell in sorted(cells.items()):
        s = out.setdefault(label, Series(label, colours[label]))
        finite = [v for v in cell.values if v is not None]
        s.points[x] = None if len(finite) < len(cell.values) else max(finite)
        names = sorted({t.split("::")[-1] for t in cell.tests})
        s.tips[x] = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
    return list(out.values())


# -- sections -----------------------------------------------------------------------------------

def _chip(cat: str, n: int) -> str:
    name, colour = CATEGORY_LOOK.get(cat, (cat, "#666"))
    return (f'<span class="chip cat-{escape(cat)}" style="background:{colour}" '
            f'title="{escape(name)}">{n} {escape(name)}</span>')


def _counts_html(counts: dict[str, int]) -> str:
    return " ".join(_chip(c, counts[c]) for c in CATEGORY_LOOK if counts.get(c)) or "-"


def _jobs_section(doc: dict) -> str:
    rows = []
    for j in doc["jobs"]:
        d = j["device"]
        rows.append(f"<tr><td>{escape(d['label'])}</td><td><code>{escape(d['variant_key'])}"
                    f"</code></td><td>{escape(d['chip'])}</td><td>{escape(d['mlx_version'])}"
                    f"</td><td>{escape(j['status'])}</td><td>{j['attempts']}</td>"
                    f"<td>{_counts_html(j['counts'])}</td>"
                    f"<td>{escape((j['error'] or '')[:200])}</td></tr>")
    return ('<h2>Devices</h2><table id="jobs" data-testid="jobs"><tr><th>device</th>'
            "<th>variant</th><th>chip</th><th>MLX</th><th>job status</th><th>attempts</th>"
            "<th>results</th><th>error</th></tr>" + "".join(rows) + "</table>")


def _matrix_section(doc: dict) -> str:
    """Rows are tests, columns devices; a cell is coloured by its worst category and lists
    the count of every category present (one test id covers all its parametrizations)."""
    legend = " ".join(f'<span class="chip" style="background:{c}">{escape(n)}</span>'
                      for n, c in (CATEGORY_LOOK[k] for k in CATEGORIES))
    head = "".join(f"<th>{escape(j['device']['label'])}</th>" for j in doc["jobs"])
    rows = []
    for row in doc["matrix"]:
        cells = []
        for j in doc["jobs"]:
            counts = row["cells"].get(str(j["id"]), {})
            worst = next((c for c in CATEGORY_LOOK if counts.get(c)), None)
            if worst is None:
                cells.append('<td class="cell empty">not run</td>')
                continue
            chips = " ".join(f'<span class="chip">{counts[c]} {escape(CATEGORY_LOOK[c][0])}'
                             f"</span>" for c in CATEGORY_LOOK if counts.get(c))
            cells.append(f'<td class="cell cat-{worst}" data-category="{worst}" '
                         f'style="background:{CATEGORY_LOOK[worst][1]}">{chips}</td>')
        rows.append(f'<tr><td class="test">{escape(row["test_id"])}</td>{"".join(cells)}</tr>')
    return ('<h2>Device x test matrix</h2><p class="legend" data-testid="legend">'
            f"{legend}</p>"
            f'<table id="matrix" data-testid="matrix"><tr><th>test</th>{head}</tr>'
            + "".join(rows) + "</table>")


def _flags_section(report: Report) -> str:
    comps = "".join(f"<li>{escape(c.device)} <code>{escape(c.variant_key)}</code>: "
                    + (f"against run <code>{escape(c.against)}</code> ({escape(c.why)})"
                       if c.against else escape(c.why)) + "</li>" for c in report.comparisons)
    n = len(report.regressions)
    summary = (f"{n} regression(s), {len(report.flags) - n} note(s)" if report.flags
               else "no flags: nothing regressed")
    out = ["<h2>Regression flags</h2>", f"<ul>{comps}</ul>",
           (f'<p class="{"" if report.flags else "none"}" id="flag-summary">'
           f"{escape(summary)}</p>")]
    if report.flags:
        rows = "".join(
            f'<tr class="flag" data-kind="{escape(f.kind)}" data-severity="{escape(f.severity)}">'
            f'<td><span class="sev" style="background:{SEVERITY_COLOUR[f.severity]}">'
            f"{escape(f.severity)}</span></td><td>{escape(f.kind)}</td>"
            f"<td>{escape(f.device)}</td><td class=\"test\">{escape(f.subject)}</td>"
            f'<td class="evidence">{escape(f.evidence)}</td>'
            f"<td>{escape(f.against or 'within the run')}</td></tr>" for f in report.flags)
        out.append('<table id="flags" data-testid="flags"><tr><th>severity</th><th>kind</th>'
                   "<th>device</th><th>subject</th><th>evidence</th><th>compared with</th>"
                   f"</tr>{rows}</table>")
    return "".join(out)


def _runs_section(window: list[dict], current: int) -> str:
    rows = "".join(
        f'<tr class="{"current-run" if i == current else ""}"><td>#{i + 1}</td>'
        f"<td><code>{escape(r['id'])}</code></td><td>{escape(r['suite'])}</td>"
        f"<td>{_when(r['started'])}</td><td>{escape(r['status'])}</td></tr>"
        for i, r in enumerate(window))
    return ("<h2>Runs in the plots</h2><p class=\"meta\">x axis of every plot: these runs in "
            "time order, up to this run (highlighted, dashed line in the plots).</p>"
            '<table id="runs"><tr><th>x</th><th>run</th><th>suite</th><th>started (UTC)</th>'
            f"<th>status</th></tr>{rows}</table>")


def _numeric_section(trends: Trends, window: list[dict], colours: dict[str, str],
                     current: int) -> str:
    cats = [f"#{i + 1}" for i in range(len(window))]
    keys = sorted((k for k in trends if isinstance(k, PlotKey)),
                  key=lambda k: (k.K, k.N, k.M, k.dtype, k.variant))
    cards = []
    for key in keys:
        measures = trends[key]
        ulps = next((n for n in ULP_MEASURES if n in measures), None)
        plots = []
        if ulps is not None:
            plots.append(line_plot(f"ulps-{key.slug}", f"deviation in ulps ({ulps})", cats,
                                   _series(measures[ulps], colours), y_label="ulps",
                                   kind="ulps", highlight=current))
        if "headroom" in measures:
            plots.append(line_plot(
                f"headroom-{key.slug}", "headroom (deviation / bound)", cats,
                _series(measures["headroom"], colours), y_label="fraction of bound",
                kind="headroom", highlight=current,
                guides=tuple(Guide(lv, f"{lv}") for lv in sorted(HEADROOM_LEVELS))))
        if plots:
            cards.append(f'<div class="card" data-testid="kernel-card" id="kernel-{key.slug}">'
                         f"<h3>{escape(key.title)}</h3>{''.join(plots)}</div>")
    body = "".join(cards) or "<p>no deviation or headroom measurements in these runs</p>"
    return ("<h2>Deviation and headroom per kernel and shape</h2><p class=\"meta\">One series "
            "per device; several tests on one kernel in one run plot as the largest value.</p>"
            f'<div class="cards">{body}</div>')


def _bench_section(trends: Trends, window: list[dict], colours: dict[str, str],
                   current: int) -> str:
    cats = [f"#{i + 1}" for i in range(len(window))]
    subjects = sorted((k for k in trends if isinstance(k, tuple)), key=lambda k: str(k[1]))
    cards = []
    for subject in subjects:
        target = subject[1]
        title = target.title if isinstance(target, PlotKey) else target.split("::")[-1]
        slug = target.slug if isinstance(target, PlotKey) else _slug(title)
        svg = line_plot(f"bench-{slug}", f"{BENCH_MEASURE} (M=8 verify path)", cats,
                        _series(trends[subject][BENCH_MEASURE], colours), y_label="rows/s",
                        kind="bench", highlight=current)
        cards.append(f'<div class="card" data-testid="bench-card"><h3>{escape(title)}</h3>'
                     f"{svg}</div>")
    body = "".join(cards) or "<p>no bench results (rows_per_s) in these runs</p>"
    return f'<h2>Bench throughput</h2><div class="cards">{body}</div>'
