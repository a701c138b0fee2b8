"""Line plots laid out as numbers for ``templates/plot.html.j2``, which draws them as inline SVG.

Inline SVG, so an HTML report needs no JavaScript and no external file. The layout (pixels,
ticks, tooltips) is computed here and the markup lives in the template, so every string that
reaches the page (device names, test ids in tooltips) goes through Jinja's autoescape and none
is spliced into markup by hand.

The x axis is categorical: the comparable runs of one suite in time order (``x_runs`` names
them, so a reader or a test can tell which runs a plot spans); each series is one device
variant. Every point carries ``data-*`` attributes and a tooltip, which is what a person hovers
and what a test counts. A ``None`` value is a non-finite measurement: it is drawn as a red cross
on the top edge rather than dropped, because "the deviation became NaN" is the most important
point on the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
           "#e377c2", "#7f7f7f", "#bcbd22")
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 58, 14, 28, 40
LEGEND_ROW = 16


@dataclass
class Series:
    """One device's values: x index (into the plot's categories) -> value (None: non-finite)."""

    name: str
    color: str
    points: dict[int, float | None] = field(default_factory=dict)
    tips: dict[int, str] = field(default_factory=dict)  # x index -> extra tooltip text


@dataclass(frozen=True)
class Guide:
    """A horizontal reference line (a threshold such as headroom 0.9)."""

    y: float
    label: str
    color: str = "#b36b00"


@dataclass(frozen=True)
class Point:
    series: str
    color: str
    x: str  # the category label, e.g. "#3"
    run: str  # the run id behind the category ("" when the plot has none)
    y: str  # repr of the value, or "nan"
    cx: str
    cy: str
    cross: str  # the path of the red cross a non-finite point is drawn as
    tip: str
    nonfinite: bool


@dataclass
class Plot:
    """Everything the template needs, already in pixels and strings."""

    id: str
    title: str
    kind: str
    width: int
    height: int
    x0: int
    x1: int
    y0: int
    y1: int
    x_label: str
    y_label: str
    data: dict[str, str]  # extra data-* attributes of the <svg>
    y_ticks: list[tuple[str, str, str]] = field(default_factory=list)  # (y, label y, label)
    x_ticks: list[tuple[str, str | None]] = field(default_factory=list)  # (pixel x, label)
    highlight: str | None = None  # pixel x of the dashed line for the report's run
    guides: list[tuple[str, str, str, str]] = field(default_factory=list)  # y, label y, ...
    lines: list[tuple[str, str, str]] = field(default_factory=list)  # (series, colour, points)
    points: list[Point] = field(default_factory=list)
    # (box x, box y, text x, text y, colour, name)
    legend: list[tuple[str, str, str, str, str, str]] = field(default_factory=list)

    @property
    def centre(self) -> tuple[str, str]:
        """The middle of the plot area: where the axis labels go."""
        return f"{(self.x0 + self.x1) / 2:g}", f"{(self.y0 + self.y1) / 2:g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    first = math.floor(lo / step + 1e-9) * step
    n = max(1, math.ceil((hi - first) / step - 1e-9))
    return [round(first + i * step, 12) for i in range(n + 1)]


def fmt(v: float) -> str:
    """Short numbers for ticks and tooltips: 0.0078125 -> 0.007812, 1373.6 -> 1374."""
    if v == 0:
        return "0"
    return format(v, ".4g")


def line_plot(plot_id: str, title: str, categories: list[str], series: list[Series], *,
              y_label: str, x_label: str = "run", kind: str = "", highlight: int | None = None,
              guides: tuple[Guide, ...] = (), x_runs: list[str] | None = None,
              data: dict[str, str] | None = None, width: int = 440, height: int = 210) -> Plot:
    """One plot's layout. ``categories`` name the x positions and ``x_runs`` the run behind
    each; ``highlight`` marks one of them (the run the report is about) with a dashed line."""
    runs = list(x_runs) if x_runs is not None else [""] * len(categories)
    if len(runs) != len(categories):
        raise ValueError(f"{len(categories)} categories but {len(runs)} runs")
    x0, x1 = MARGIN_L, width - MARGIN_R
    # Two legend entries a row when the names fit in half the width, else one.
    cols = 2 if max((len(s.name) for s in series), default=0) * 6.5 + 16 < (x1 - x0) / 2 else 1
    total_h = height + LEGEND_ROW * max(1, math.ceil(len(series) / cols))
    y0, y1 = height - MARGIN_B, MARGIN_T  # pixel y of the axis bottom and top
    finite = [v for s in series for v in s.points.values() if v is not None]
    finite += [g.y for g in guides]
    lo, hi = (min(0.0, min(finite)), max(finite)) if finite else (0.0, 1.0)
    ticks = nice_ticks(lo, hi if hi > lo else lo + 1.0)
    t_lo, t_hi = ticks[0], ticks[-1]

    def px(i: int, offset: float = 0.0) -> float:
        n = len(categories)
        return (x0 + x1) / 2 + offset if n <= 1 else x0 + 12 + (x1 - x0 - 24) * i / (n - 1) + offset

    def py(v: float) -> float:
        return y0 - (y0 - y1) * (v - t_lo) / (t_hi - t_lo)

    attrs = {f"data-{k}": str(v) for k, v in (data or {}).items()}
    plot = Plot(plot_id, title, kind, width, total_h, x0, x1, y0, y1, x_label, y_label,
                attrs | {"data-x-runs": " ".join(runs)})
    plot.y_ticks = [(f"{py(t):.1f}", f"{py(t) + 3.5:.1f}", fmt(t)) for t in ticks]
    step = max(1, math.ceil(len(categories) / 12))
    plot.x_ticks = [(f"{px(i):.1f}", cat if i % step == 0 or i == len(categories) - 1 else None)
                    for i, cat in enumerate(categories)]
    if highlight is not None and 0 <= highlight < len(categories):
        plot.highlight = f"{px(highlight):.1f}"
    plot.guides = [(f"{py(g.y):.1f}", f"{py(g.y) - 3:.1f}", g.label, g.color) for g in guides]
    for k, s in enumerate(series):
        # Devices that agree exactly would hide each other: spread them a few pixels apart.
        dodge = (k - (len(series) - 1) / 2) * 4.0
        pts = sorted(s.points.items())
        line = [f"{px(i, dodge):.1f},{py(v):.1f}" for i, v in pts if v is not None]
        if len(line) > 1:
            plot.lines.append((s.name, s.color, " ".join(line)))
        for i, v in pts:
            tip = f"{s.name} · {categories[i]}: {'non-finite' if v is None else fmt(v)}"
            tip += f" ({s.tips[i]})" if s.tips.get(i) else ""
            x, y = px(i, dodge), y1 if v is None else py(v)
            plot.points.append(Point(s.name, s.color, categories[i], runs[i],
                                     "nan" if v is None else repr(v), f"{x:.1f}", f"{y:.1f}",
                                     f"M{x - 4:.1f},{y - 4:.1f} l8,8 m0,-8 l-8,8", tip,
                                     v is None))
    for k, s in enumerate(series):
        lx, ly = x0 + (k % cols) * (x1 - x0) / 2, height + LEGEND_ROW * (k // cols) + 4
        plot.legend.append((f"{lx:.1f}", str(ly), f"{lx + 14:.1f}", str(ly + 9), s.color,
                            s.name))
    return plot
