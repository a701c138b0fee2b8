"""Line plots as inline SVG text, so an HTML report needs no JavaScript and no external file.

The x axis is categorical (runs in time order, shared by every plot of a report so plots line
up); each series is one device. Every point is a ``<circle class="point">`` with ``data-*``
attributes and a ``<title>`` tooltip, which is what a person hovers and what a test counts.
A ``None`` value is a non-finite measurement: it is drawn as a red cross on the top edge rather
than dropped, because "the deviation became NaN" is the most important point on the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

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
              guides: tuple[Guide, ...] = (), width: int = 440, height: int = 210) -> str:
    """One SVG line plot. ``categories`` name the x positions; ``highlight`` marks one of them
    (the run the report is about) with a dashed line."""
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

    out = [(f'<svg xmlns="http://www.w3.org/2000/svg" id="{escape(plot_id)}" '
            f'data-testid="plot" data-kind="{escape(kind)}" class="plot" role="img" '
            f'viewBox="0 0 {width} {total_h}" width="{width}" height="{total_h}" '
            f'aria-label="{escape(title)}">'),
           f"<title>{escape(title)}</title>",
           (f'<text class="plot-title" x="{width / 2}" y="16" text-anchor="middle">'
            f"{escape(title)}</text>")]
    for t in ticks:
        y = py(t)
        out.append(f'<line class="grid" x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}"/>'
                   f'<text class="tick" x="{x0 - 5}" y="{y + 3.5:.1f}" text-anchor="end">'
                   f"{escape(fmt(t))}</text>")
    step = max(1, math.ceil(len(categories) / 12))
    for i, cat in enumerate(categories):
        x = px(i)
        out.append(f'<line class="axis" x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y0 + 4}"/>')
        if i % step == 0 or i == len(categories) - 1:
            out.append(f'<text class="tick" x="{x:.1f}" y="{y0 + 15}" text-anchor="middle">'
                       f"{escape(cat)}</text>")
    if highlight is not None and 0 <= highlight < len(categories):
        x = px(highlight)
        out.append(f'<line class="current" x1="{x:.1f}" x2="{x:.1f}" y1="{y1}" y2="{y0}">'
                   f"<title>the run this report is about</title></line>")
    for g in guides:
        y = py(g.y)
        out.append(f'<line class="guide" x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" '
                   f'stroke="{g.color}"/><text class="guide-label" x="{x1 - 2}" '
                   f'y="{y - 3:.1f}" text-anchor="end" fill="{g.color}">{escape(g.label)}</text>')
    out.append(f'<line class="axis" x1="{x0}" x2="{x1}" y1="{y0}" y2="{y0}"/>'
               f'<line class="axis" x1="{x0}" x2="{x0}" y1="{y1}" y2="{y0}"/>'
               f'<text class="axis-label" x="{(x0 + x1) / 2}" y="{y0 + 32}" '
               f'text-anchor="middle">{escape(x_label)}</text>'
               f'<text class="axis-label" transform="translate(14 {(y0 + y1) / 2}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    for k, s in enumerate(series):
        # Devices that agree exactly would hide each other: spread them a few pixels apart.
        dodge = (k - (len(series) - 1) / 2) * 4.0
        pts = sorted(s.points.items())
        run = [f"{px(i, dodge):.1f},{py(v):.1f}" for i, v in pts if v is not None]
        if len(run) > 1:
            out.append(f'<polyline class="series" data-series="{escape(s.name)}" fill="none" '
                       f'stroke="{s.color}" points="{" ".join(run)}"/>')
        for i, v in pts:
            tip = f"{s.name} · {categories[i]}: {'non-finite' if v is None else fmt(v)}"
            tip += f" ({s.tips[i]})" if s.tips.get(i) else ""
            x = px(i, dodge)
            attrs = (f'data-series="{escape(s.name)}" data-x="{escape(categories[i])}" '
                     f'data-y="{"nan" if v is None else repr(v)}"')
            if v is None:
                out.append(f'<g class="point nonfinite" {attrs}><title>{escape(tip)}</title>'
                           f'<path d="M{x - 4:.1f},{y1 - 4} l8,8 m0,-8 l-8,8" '
                           f'stroke="#d00" stroke-width="2"/></g>')
            else:
                out.append(f'<circle class="point" {attrs} cx="{x:.1f}" cy="{py(v):.1f}" '
                           f'r="3.5" fill="{s.color}"><title>{escape(tip)}</title></circle>')
    for k, s in enumerate(series):
        lx = x0 + (k % cols) * (x1 - x0) / 2
        ly = height + LEGEND_ROW * (k // cols) + 4
        out.append(f'<g class="legend-item"><rect x="{lx:.1f}" y="{ly}" width="10" '
                   f'height="10" fill="{s.color}"/><text class="legend" x="{lx + 14:.1f}" '
                   f'y="{ly + 9}">{escape(s.name)}</text></g>')
    out.append("</svg>")
    return "\n".join(out)
