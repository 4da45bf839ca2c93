"""Inline SVG charts for the HTML report: no JavaScript, no fonts or files to fetch.

Two shapes cover the report: a line chart (one or more series, optional zero line) and a
horizontal bar chart (optionally with an interval whisker per bar).
Each returns one `<svg>` element with an `id` and `class="plot"`, so
tests (and a headless browser) can find every plot.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = ["line_chart", "bar_chart", "nice_ticks"]

WIDTH, HEIGHT = 640, 300
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 36, 48
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high] (about `count` of them)."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = [round(start, 10)]
    while ticks[-1] < high - step * 1e-9:  # the last tick reaches or passes `high`
        ticks.append(round(start + len(ticks) * step, 10))
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"


def line_chart(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    element_id: str,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
    zero_line: bool = False,
    steps: bool = False,
    dashed: Sequence[str] = (),
) -> str:
    """A line chart of (x, y) points per named series.

    Args:
        series: (name, points) pairs; points are drawn in the given order.
        element_id: the svg element's id.
        title, x_label, y_label: texts on the chart.
        y_range: fixed y axis limits (default: the data's range).
        zero_line: draw a dashed line at y = 0.
        steps: draw each series as a step function (value holds until the next x).
        dashed: names of series drawn dashed (one that may lie on top of another stays visible).
    """
    points = [p for _, pts in series for p in pts]
    xs = [p[0] for p in points] or [0.0, 1.0]
    ys = [p[1] for p in points] or [0.0, 1.0]
    y_low, y_high = y_range if y_range else (min(min(ys), 0.0) if zero_line else min(ys), max(ys))
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs)), nice_ticks(y_low, y_high)
    x0, x1, y0, y1 = x_ticks[0], x_ticks[-1], y_ticks[0], y_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def sx(x: float) -> float:
        return LEFT + (x - x0) / ((x1 - x0) or 1.0) * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - (y - y0) / ((y1 - y0) or 1.0) * plot_h

    parts = [f'<svg id="{escape(element_id)}" class="plot" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img">',
             f"<title>{escape(title)}</title>",
             f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-weight="bold">{escape(title)}</text>']
    for t in y_ticks:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#ddd"/>'
                     f'<text x="{LEFT - 6}" y="{sy(t) + 4:.1f}" text-anchor="end" font-size="11">{_fmt(t)}</text>')
    for t in x_ticks:
        parts.append(f'<text x="{sx(t):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" font-size="11">{_fmt(t)}</text>')
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#333"/>'
                 f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" stroke="#333"/>')
    if zero_line and y0 <= 0 <= y1:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{sy(0):.1f}" y2="{sy(0):.1f}" '
                     'stroke="#666" stroke-dasharray="4 3"/>')
    for number, (name, pts) in enumerate(series):
        path = []
        for i, (x, y) in enumerate(pts):
            if steps and i:
                path.append(f"{sx(x):.1f},{sy(pts[i - 1][1]):.1f}")
            path.append(f"{sx(x):.1f},{sy(y):.1f}")
        color = COLORS[number % len(COLORS)]
        dash = ' stroke-dasharray="7 4"' if name in dashed else ""
        parts.append(f'<polyline class="series" data-series="{escape(name)}" fill="none" stroke="{color}" '
                     f'stroke-width="2"{dash} points="{" ".join(path)}"/>')
        for x, y in pts if len(pts) <= 60 else ():
            parts.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{color}"/>')
        if len(series) > 1:
            parts.append(f'<text x="{WIDTH - RIGHT - 4}" y="{TOP + 14 + 14 * number}" text-anchor="end" '
                         f'font-size="11" fill="{color}">{escape(name)}</text>')
    parts.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 8}" text-anchor="middle" font-size="12">'
                 f"{escape(x_label)}</text>")
    parts.append(f'<text x="14" y="{TOP + plot_h / 2}" text-anchor="middle" font-size="12" '
                 f'transform="rotate(-90 14 {TOP + plot_h / 2})">{escape(y_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bar_chart(rows: Sequence[tuple[str, float, str]], *, element_id: str, title: str,
              intervals: Sequence[tuple[float, float] | None] | None = None) -> str:
    """Horizontal bars: (label, value in [0, 1], text shown after the bar) per row.

    Args:
        intervals: optional (low, high) in [0, 1] per row, drawn as a whisker across the bar's end.
    """
    bar_h, gap, label_w = 22, 8, 190
    height = TOP + len(rows) * (bar_h + gap) + 12
    span = WIDTH - label_w - 90
    parts = [f'<svg id="{escape(element_id)}" class="plot" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img">',
             f"<title>{escape(title)}</title>",
             f'<text x="{WIDTH / 2}" y="20" text-anchor="middle" font-weight="bold">{escape(title)}</text>']
    for i, (label, value, text) in enumerate(rows):
        y = TOP + i * (bar_h + gap)
        width = max(0.0, min(1.0, value)) * span
        text_x = label_w + width + 6
        parts.append(f'<text x="{label_w - 8}" y="{y + bar_h * 0.7:.1f}" text-anchor="end" font-size="12">'
                     f"{escape(label)}</text>"
                     f'<rect class="bar" x="{label_w}" y="{y}" width="{width:.1f}" height="{bar_h}" '
                     f'fill="{COLORS[i % len(COLORS)]}"/>')
        interval = intervals[i] if intervals and i < len(intervals) else None
        if interval is not None:
            low, high = (label_w + max(0.0, min(1.0, v)) * span for v in interval)
            mid = y + bar_h / 2
            parts.append(f'<path class="ci" d="M{low:.1f},{mid:.1f}H{high:.1f}M{low:.1f},{mid - 5:.1f}V{mid + 5:.1f}'
                         f'M{high:.1f},{mid - 5:.1f}V{mid + 5:.1f}" stroke="#222" stroke-width="1.5" fill="none"/>')
            text_x = max(text_x, high + 6)  # the text follows the whisker, not over it
        parts.append(f'<text x="{text_x:.1f}" y="{y + bar_h * 0.7:.1f}" font-size="12">{escape(text)}</text>')
    parts.append("</svg>")
    return "".join(parts)
