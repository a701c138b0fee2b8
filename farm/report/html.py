"""One run as a single self-contained HTML page: status, matrix, regression flags, trend plots.

Self-contained because the page is mailed, attached to CI and opened from disk on machines with
no network: inline CSS, inline SVG, no script, no external URL. The markup is in
``templates/*.html.j2``, rendered by Jinja2 with autoescape on, because test ids, suite names
and host names are data that a page must show as text (``test_x[a<b]``), never run as markup.
This module only gathers the data (``show_run``, ``analyse``, and the plotted measurements
from ``farm.report.trends``) and shapes it for the templates.

A run's status on the page is the recorded one unless the regression analysis disagrees: a run
whose tests passed but which regressed reads ``regressed``, with the count and a link to the
flags. Trends are drawn per suite and per kind of device (real or emulated), over comparable
runs only: the x axis of a plot is the runs of one suite in which the report's device variants
ran, and a series is one device variant, so another suite's runs never share an axis and an
emulated device's values never sit beside a real one's.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field

import jinja2

from db.events import CATEGORIES
from db.history import History
from db.queries import resolve_run, show_run
from db.regressions import analyse
from farm.report.svg_plot import PALETTE, Guide, Plot, Series, line_plot
from farm.report.trends import (
    BENCH_MEASURE,
    ULP_MEASURES,
    Cell,
    PlotKey,
    Trends,
    comparable_runs,
    load_trends,
    series_names,
    slugify,
)

DEFAULT_RUNS = 20
# the headroom levels the regression analysis judges by, drawn as guides
HEADROOM_LEVELS = (0.5, 0.9)
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
TEMPLATE = "report.html.j2"


@functools.cache
def environment() -> jinja2.Environment:
    """Loaded through the package, so an installed farm renders from the templates it ships
    as package data, not from a checkout; cached because they cannot change under a running
    process. StrictUndefined: a misspelt field fails the tests instead of leaving a blank."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("farm.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["when"] = _when
    return env


def render_plot(plot: Plot) -> str:
    """One plot on its own, through the macro the page uses, so a chart checked alone is
    drawn exactly as on the page."""
    return str(environment().get_template("plot.html.j2").module.plot(plot))


@dataclass(frozen=True)
class Verdict:
    """A run's status as shown: "passed" beside regressions would tell a reader that nothing
    needs a look, so a passed run that regressed reads ``regressed``; notes never change it."""

    recorded: str
    regressions: int = 0
    notes: int = 0

    @property
    def status(self) -> str:
        return "regressed" if self.recorded == "passed" and self.regressions else self.recorded

    @property
    def detail(self) -> str:
        return ", ".join(_count(n, word) for n, word in ((self.regressions, "regression"),
                                                          (self.notes, "note")) if n)


@dataclass
class Section:
    """One suite on one kind of device (real or emulated): its runs, the x axis of its plots."""

    suite: str
    emulated: bool
    runs: list[dict]
    current: int | None
    bench: list[tuple[str, Plot]] = field(default_factory=list)  # (title, plot)
    kernels: list[tuple[str, str, list[Plot]]] = field(default_factory=list)  # title, slug, plots

    @property
    def group(self) -> str:
        return "emulated" if self.emulated else "real"

    @property
    def slug(self) -> str:
        return f"{slugify(self.suite) or 'suite'}-{self.group}"


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _when(t: float | None) -> str:
    return "" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t))


def verdict(recorded: str, report) -> Verdict:
    n = len(report.regressions)
    return Verdict(recorded, n, len(report.flags) - n)


def render_report(history: History, run_id: str | None, *, against: str = "baseline",
                  runs: int = DEFAULT_RUNS) -> str:
    """The whole page for ``run_id`` (an id, a unique prefix, ``latest`` or None for the
    newest run); each suite's plots cover at most ``runs`` runs up to and including it."""
    run_id = resolve_run(history, run_id)
    doc = show_run(history, run_id)
    report = (analyse(history, run_id) if against in (None, "", "baseline")
              else analyse(history, run_id, against))
    run = doc["run"]
    verdicts = {run_id: verdict(run["status"], report)}
    sections = trend_sections(history, run_id, doc, runs, verdicts)
    return environment().get_template(TEMPLATE).render(
        run_id=run_id, run=run, verdict=verdicts[run_id],
        revision=(run["git_sha"] or "-")[:12] + (" (dirty)" if run["dirty"] else ""),
        generated=_when(time.time()), jobs=doc["jobs"], matrix=_matrix(doc),
        legend=[CATEGORY_LOOK[k] for k in CATEGORIES], categories=CATEGORY_LOOK,
        flags=[_flag_view(f) for f in report.flags],
        comparisons=[_comparison_view(c) for c in report.comparisons],
        sections=sections)


def _series(cells: dict[tuple[int, str], Cell], x_of: dict[str, int], devices: set[int],
            names: dict[int, str], colours: dict[int, str]) -> list[Series]:
    """One series per device variant, over the section's runs only; several values in one run
    plot as the worst (largest; a non-finite one wins), the tooltip naming the tests."""
    out: dict[int, Series] = {}
    for (dev, run), cell in sorted(cells.items(), key=lambda kv: (names[kv[0][0]], kv[0][1])):
        if dev not in devices or run not in x_of:
            continue
        s = out.setdefault(dev, Series(names[dev], colours[dev]))
        x = x_of[run]
        finite = [v for v in cell.values if v is not None]
        s.points[x] = None if len(finite) < len(cell.values) else max(finite)
        tests = sorted({t.split("::")[-1] for t in cell.tests})
        s.tips[x] = ", ".join(tests[:3]) + (f" +{len(tests) - 3}" if len(tests) > 3 else "")
    return list(out.values())


def trend_sections(h: History, run_id: str, doc: dict, limit: int,
                   verdicts: dict[str, Verdict]) -> list[Section]:
    """The run's own suite first, then every other suite its devices ran, each split into
    real and emulated devices, because an emulated device's numbers are never judged against
    a real one's. ``verdicts`` gains the status shown for every run listed: a runs table that
    read "passed" for a run that regressed would repeat the error the header avoids."""
    devs = {j["device"]["id"]: j["device"] for j in doc["jobs"]}
    windows = comparable_runs(h, run_id, list(devs), limit)
    trends = load_trends(h, [x["id"] for runs in windows.values() for x in runs], list(devs))
    names = series_names(devs)
    colours = {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(sorted(devs, key=names.get))}
    sections = []
    for suite in sorted(windows, key=lambda s: (s != doc["run"]["suite"], s)):
        for emulated in (False, True):
            mine = {d for d, dev in devs.items() if dev["emulated"] == emulated}
            runs = [dict(x) for x in windows[suite] if x["devices"] & mine]
            if not runs:
                continue
            for x in runs:
                if x["id"] not in verdicts:
                    verdicts[x["id"]] = verdict(x["status"], analyse(h, x["id"]))
                x["verdict"] = verdicts[x["id"]]
            current = next((i for i, x in enumerate(runs) if x["id"] == run_id), None)
            section = Section(suite, emulated, runs, current)
            _plots(section, trends, mine, names, colours)
            sections.append(section)
    return sections


def _plots(section: Section, trends: Trends, devices: set[int], names: dict[int, str],
           colours: dict[int, str]) -> None:
    cats = [f"#{i + 1}" for i in range(len(section.runs))]
    x_runs = [x["id"] for x in section.runs]
    x_of = {rid: i for i, rid in enumerate(x_runs)}
    common = {"x_runs": x_runs, "highlight": section.current,
              "data": {"suite": section.suite, "devices": section.group}}

    def plot(kind: str, slug: str, title: str, cells: dict, **kw) -> Plot | None:
        series = _series(cells, x_of, devices, names, colours)
        return line_plot(f"{kind}-{slug}--{section.slug}", title, cats, series, kind=kind,
                         **common, **kw) if series else None

    # Bench first: a few plots, one per shape; the numeric cards are many.
    for subject in sorted((k for k in trends if isinstance(k, tuple)), key=lambda k: str(k[1])):
        target = subject[1]
        title = target.title if isinstance(target, PlotKey) else target.split("::")[-1]
        slug = target.slug if isinstance(target, PlotKey) else slugify(title)
        p = plot("bench", slug, f"{BENCH_MEASURE} (M=8 verify path)",
                 trends[subject][BENCH_MEASURE], y_label="rows/s")
        if p is not None:
            section.bench.append((title, p))
    for key in sorted((k for k in trends if isinstance(k, PlotKey)),
                      key=lambda k: (k.K, k.N, k.M, k.dtype, k.variant)):
        measures = trends[key]
        plots = []
        if (ulps := next((n for n in ULP_MEASURES if n in measures), None)) is not None:
            plots.append(plot("ulps", key.slug, f"deviation in ulps ({ulps})", measures[ulps],
                              y_label="ulps"))
        if "headroom" in measures:
            plots.append(plot("headroom", key.slug, "headroom (deviation / bound)",
                              measures["headroom"], y_label="fraction of bound",
                              guides=tuple(Guide(lv, f"{lv}") for lv in HEADROOM_LEVELS)))
        if plots := [p for p in plots if p is not None]:
            section.kernels.append((key.title, f"{key.slug}--{section.slug}", plots))


# -- views --------------------------------------------------------------------------------------

def _matrix(doc: dict) -> list[dict]:
    """Rows are tests, columns devices; a cell is coloured by its worst category and lists
    the count of every category present (one test id covers all its parametrizations)."""
    rows = []
    for row in doc["matrix"]:
        cells = []
        for j in doc["jobs"]:
            counts = row["cells"].get(str(j["id"]), {})
            worst = next((c for c in CATEGORY_LOOK if counts.get(c)), None)
            cells.append(None if worst is None else {
                "worst": worst, "colour": CATEGORY_LOOK[worst][1],
                "chips": [(counts[c], CATEGORY_LOOK[c][0]) for c in CATEGORY_LOOK
                          if counts.get(c)]})
        rows.append({"test_id": row["test_id"], "cells": cells})
    return rows


def _flag_view(f) -> dict:
    """Only the fields every version of ``Flag`` has, read leniently: the analyser grows."""
    return {"kind": f.kind, "severity": f.severity, "device": f.device, "subject": f.subject,
            "evidence": f.evidence, "colour": SEVERITY_COLOUR.get(f.severity, "#666"),
            "regression": f.severity != "note",
            "against": getattr(f, "against", None) or "within the run"}


def _comparison_view(c) -> dict:
    """A comparison without a run to compare with shows why (e.g. no comparable earlier
    run), so a device with no flags is not mistaken for one that was checked."""
    return {"device": c.device, "variant_key": getattr(c, "variant_key", "") or "",
            "against": c.against, "why": c.why or ""}
