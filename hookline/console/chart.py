"""Charts drawn on the server as SVG: no chart library, no script, nothing inline the CSP would
refuse (SVG presentation attributes are not styles).

:func:`line_chart` draws one line per series over a shared time axis (the stats page:
deliveries and outcomes per minute; an endpoint's page: its success rate, and its p50 and p95
latency, per minute over a day, where a minute without attempts leaves a gap). Every text
that reaches the SVG is escaped.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

#: Line colours, in series order (the stylesheet's legend uses the same: .series-<n>).
PALETTE = ("#1f8a4c", "#b7791f", "#c23b2b", "#2a5bd7", "#7b4bc4", "#5d6878")
#: Room for the axis labels, pixels: left, right, top, bottom.
MARGIN = (48, 12, 12, 28)
#: Horizontal grid lines (and y labels) drawn.
GRID_LINES = 4


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 5 x 10^n at or above ``value`` (a y-axis top a reader can
    divide), 1 for an empty chart."""
    if value <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 <= value:
        scale *= 10
    while scale > value:
        scale /= 10
    for step in (1, 2, 5, 10):
        if step * scale >= value:
            return step * scale
    return 10 * scale


def _clock(at: float) -> str:
    """A minute's label: ``HH:MM`` in UTC."""
    return time.strftime("%H:%M", time.gmtime(at))


def _segments(values: Sequence[float | None]) -> list[list[tuple[int, float]]]:
    """Runs of consecutive values that are not None, with their indexes: a minute without a
    value (no attempt, so no rate or latency) breaks the line."""
    runs: list[list[tuple[int, float]]] = []
    current: list[tuple[int, float]] = []
    for index, value in enumerate(values):
        if value is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((index, value))
    if current:
        runs.append(current)
    return runs


def line_chart(minutes: Sequence[float], series: Mapping[str, Sequence[float | None]], *,
               width: int = 900, height: int = 260, title: str = "",
               chart_id: str = "stats-chart", peak: float | None = None,
               unit: str = "") -> Markup:
    """An SVG line chart: ``minutes`` (Unix seconds, oldest first) on the x axis, one line per
    ``series`` entry (a value per minute; None leaves a gap), the y axis from 0 to ``peak``
    (default: a round number above the largest value), its labels followed by ``unit``."""
    largest = max((max((v for v in values if v is not None), default=0)
                   for values in series.values()), default=0)
    peak = peak if peak else _nice_ceiling(largest)
    left, right, top, bottom = MARGIN
    # Room for the longest y label (7 px a character at 11 px).
    left = max(left, 10 + 7 * len(f"{peak:g}{unit}"))
    plot_w, plot_h = width - left - right, height - top - bottom
    count = max(len(minutes), 1)

    def x(index: int) -> float:
        return left + (plot_w * index / (count - 1) if count > 1 else plot_w / 2)

    def y(value: float) -> float:
        return top + plot_h - plot_h * min(value, peak) / peak

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{escape(chart_id)}" '
             f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{escape(title)}">']
    if title:
        parts.append(f"<title>{escape(title)}</title>")
    for line in range(GRID_LINES + 1):
        value = peak * line / GRID_LINES
        parts.append(f'<line class="grid" x1="{left}" x2="{width - right}" y1="{y(value):.1f}" '
                     f'y2="{y(value):.1f}"/>')
        parts.append(f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                     f"{value:g}{escape(unit)}</text>")
    step = max(1, count // 6)
    for index in range(0, len(minutes), step):
        parts.append(f'<text x="{x(index):.1f}" y="{height - 8}" text-anchor="middle">'
                     f"{_clock(minutes[index])}</text>")
    parts.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}"/>')
    parts.append(f'<line class="axis" x1="{left}" x2="{width - right}" y1="{top + plot_h}" '
                 f'y2="{top + plot_h}"/>')
    for number, (name, values) in enumerate(series.items()):
        colour = PALETTE[number % len(PALETTE)]
        runs = _segments(values)
        if len(runs) == 1 and len(runs[0]) == len(values) > 1:
            points = " ".join(f"{x(index):.1f},{y(value):.1f}" for index, value in runs[0])
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                         f'data-series="{escape(name)}" points="{points}"><title>'
                         f"{escape(name)}</title></polyline>")
            continue
        # Gaps: one path of runs; a run of one minute is a dot (a round-capped zero line).
        path = " ".join("M" + " L".join(f"{x(index):.1f},{y(value):.1f}"
                                        for index, value in run)
                        + (" h0" if len(run) == 1 else "") for run in runs)
        parts.append(f'<path fill="none" stroke="{colour}" stroke-width="2" '
                     f'stroke-linecap="round" stroke-linejoin="round" '
                     f'data-series="{escape(name)}" d="{path or "M0,0"}"><title>'
                     f"{escape(name)}</title></path>")
    parts.append("</svg>")
    return Markup("".join(parts))
