"""Inline SVG charts for the HTML report, drawn in Python. Pure: data in, SVG text out.

No script, no external font or stylesheet: each chart is one ``<svg>`` element that renders
alone. Every piece of text from the data is escaped with ``html.escape``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape

PALETTE = (
    "#0072B2",
    "#D55E00",
    "#009E73",
    "#CC79A7",
    "#E69F00",
    "#56B4E9",
    "#000000",
    "#8C564B",
    "#7F7F7F",
    "#BCBD22",
)
"""Colour-blind-safe colours (Okabe-Ito first), one per strategy, reused in order."""


@dataclass(frozen=True)
class Point:
    """One case under one strategy."""

    x: float
    y: float
    title: str


def colors(labels: Sequence[str]) -> dict[str, str]:
    """A colour for each label, in order."""
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(labels)}


def _fmt(value: float) -> str:
    return f"{value:.1f}"


def _legend(labels: Sequence[str], palette: Mapping[str, str], *, x: float, y: float) -> list[str]:
    parts = []
    for i, label in enumerate(labels):
        top = y + i * 18
        parts.append(
            f'<rect x="{_fmt(x)}" y="{_fmt(top)}" width="12" height="12" '
            f'fill="{palette[label]}"/>'
            f'<text x="{_fmt(x + 18)}" y="{_fmt(top + 10)}">{escape(label)}</text>'
        )
    return parts


def scatter(
    series: Mapping[str, Sequence[Point]],
    *,
    x_label: str,
    y_label: str,
    title: str,
    x_reference: float | None = None,
    x_reference_label: str = "",
    width: int = 760,
    height: int = 420,
) -> str:
    """Points per series, each series' mean as a larger ringed marker; y from 0 to 1, x from 0
    to a tenth past the largest x (or ``x_reference``, drawn as a dashed vertical line)."""
    labels = list(series)
    palette = colors(labels)
    left, right, top, bottom = 56.0, 230.0, 34.0, 48.0
    plot_w, plot_h = width - left - right, height - top - bottom
    widest = max([x_reference or 0.0, *(p.x for points in series.values() for p in points)])
    x_max = max(0.1, math.ceil(widest * 1.1 * 10) / 10)

    def sx(value: float) -> float:
        return left + plot_w * min(max(value, 0.0), x_max) / x_max

    def sy(value: float) -> float:
        return top + plot_h * (1.0 - min(max(value, 0.0), 1.0))

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title, quote=True)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<text x="{_fmt(left)}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for i in range(6):
        value = i / 5
        y = sy(value)
        parts.append(
            f'<line x1="{_fmt(left)}" y1="{_fmt(y)}" x2="{_fmt(left + plot_w)}" y2="{_fmt(y)}" '
            'stroke="#ddd"/>'
            f'<text x="{_fmt(left - 6)}" y="{_fmt(y + 4)}" text-anchor="end">{value:.1f}</text>'
        )
        xv = x_max * i / 5
        x = sx(xv)
        parts.append(
            f'<line x1="{_fmt(x)}" y1="{_fmt(top)}" x2="{_fmt(x)}" y2="{_fmt(top + plot_h)}" '
            'stroke="#eee"/>'
            f'<text x="{_fmt(x)}" y="{_fmt(top + plot_h + 16)}" text-anchor="middle">'
            f"{xv:.2f}</text>"
        )
    parts.append(
        f'<rect x="{_fmt(left)}" y="{_fmt(top)}" width="{_fmt(plot_w)}" height="{_fmt(plot_h)}" '
        'fill="none" stroke="#888"/>'
        f'<text x="{_fmt(left + plot_w / 2)}" y="{height - 10}" text-anchor="middle">'
        f"{escape(x_label)}</text>"
        f'<text transform="translate(14 {_fmt(top + plot_h / 2)}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    if x_reference is not None:
        x = sx(x_reference)
        parts.append(
            f'<line x1="{_fmt(x)}" y1="{_fmt(top)}" x2="{_fmt(x)}" y2="{_fmt(top + plot_h)}" '
            'stroke="#555" stroke-dasharray="5 4"/>'
            f'<text x="{_fmt(x + 4)}" y="{_fmt(top + 12)}" fill="#555">'
            f"{escape(x_reference_label)}</text>"
        )
    for label, points in series.items():
        color = palette[label]
        for p in points:
            parts.append(
                f'<circle cx="{_fmt(sx(p.x))}" cy="{_fmt(sy(p.y))}" r="4" fill="{color}" '
                f'fill-opacity="0.45"><title>{escape(p.title)}</title></circle>'
            )
    for label, points in series.items():
        if not points:
            continue
        mx = sum(p.x for p in points) / len(points)
        my = sum(p.y for p in points) / len(points)
        parts.append(
            f'<circle cx="{_fmt(sx(mx))}" cy="{_fmt(sy(my))}" r="8" fill="{palette[label]}" '
            f'stroke="#fff" stroke-width="2"><title>{escape(label)} mean: recall {my:.3f}, '
            f"compression {mx:.3f}</title></circle>"
        )
    parts += _legend(labels, palette, x=left + plot_w + 20, y=top)
    parts.append(
        f'<text x="{_fmt(left + plot_w + 20)}" y="{_fmt(top + len(labels) * 18 + 16)}" '
        'fill="#555">small: one case; large: mean</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def grouped_bars(
    values: Mapping[str, Mapping[str, int]],
    *,
    title: str,
    y_label: str,
    width: int = 760,
    height: int = 380,
) -> str:
    """Bars grouped by category (x), one bar per series in each group: ``values[series][cat]``."""
    labels = list(values)
    palette = colors(labels)
    categories = sorted({cat for counts in values.values() for cat in counts})
    left, right, top, bottom = 56.0, 230.0, 34.0, 60.0
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max([1, *(n for counts in values.values() for n in counts.values())])
    step = max(1, -(-peak // 5))
    y_max = step * 5
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title, quote=True)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        f'<text x="{_fmt(left)}" y="20" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for i in range(6):
        value = step * i
        y = top + plot_h * (1 - value / y_max)
        parts.append(
            f'<line x1="{_fmt(left)}" y1="{_fmt(y)}" x2="{_fmt(left + plot_w)}" y2="{_fmt(y)}" '
            'stroke="#ddd"/>'
            f'<text x="{_fmt(left - 6)}" y="{_fmt(y + 4)}" text-anchor="end">{value}</text>'
        )
    parts.append(
        f'<text transform="translate(14 {_fmt(top + plot_h / 2)}) rotate(-90)" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    if not categories:
        parts.append(
            f'<text x="{_fmt(left + plot_w / 2)}" y="{_fmt(top + plot_h / 2)}" '
            'text-anchor="middle" fill="#555">no missed facts</text>'
        )
    group_w = plot_w / max(1, len(categories))
    bar_w = group_w * 0.8 / max(1, len(labels))
    for c, category in enumerate(categories):
        x0 = left + c * group_w + group_w * 0.1
        for s, label in enumerate(labels):
            count = values[label].get(category, 0)
            bar_h = plot_h * count / y_max
            parts.append(
                f'<rect x="{_fmt(x0 + s * bar_w)}" y="{_fmt(top + plot_h - bar_h)}" '
                f'width="{_fmt(max(1.0, bar_w - 1))}" height="{_fmt(bar_h)}" '
                f'fill="{palette[label]}"><title>{escape(label)}, {escape(category)}: '
                f"{count}</title></rect>"
            )
        parts.append(
            f'<text x="{_fmt(left + c * group_w + group_w / 2)}" y="{_fmt(top + plot_h + 16)}" '
            f'text-anchor="middle">{escape(category)}</text>'
        )
    parts.append(
        f'<line x1="{_fmt(left)}" y1="{_fmt(top + plot_h)}" x2="{_fmt(left + plot_w)}" '
        f'y2="{_fmt(top + plot_h)}" stroke="#888"/>'
    )
    parts += _legend(labels, palette, x=left + plot_w + 20, y=top)
    parts.append("</svg>")
    return "".join(parts)
