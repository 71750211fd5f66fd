"""The prepare-scaling chart: ``prepare()`` time per turn and the history's size, as SVG."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from html import escape

from context_summarizer.evaluation.charts import PALETTE

from .prepare_scaling_session import Turn

CHART = "prepare_scaling.svg"
"""The chart's file name, written into the section's ``out_dir``."""


def _rolling_median(values: Sequence[float], window: int) -> list[float]:
    half = window // 2
    return [statistics.median(values[max(0, i - half) : i + half + 1]) for i in range(len(values))]


def chart(turns: Sequence[Turn], *, title: str, width: int = 1000, height: int = 440) -> str:
    """A self-contained SVG: ``prepare()`` ms per turn (log scale, left axis; compaction turns as
    red diamonds, a rolling median as a line) and raw-history / sent tokens (right axis)."""
    left, right, top, bottom = 64.0, 270.0, 36.0, 48.0
    plot_w, plot_h = width - left - right, height - top - bottom
    ms = [max(t.seconds * 1000, 1e-3) for t in turns]
    low = math.floor(math.log10(min(ms)))
    high = max(low + 1, math.ceil(math.log10(max(ms))))
    tokens_max = max(1, max(t.raw_tokens for t in turns))
    token_step = int(10 ** max(0, math.floor(math.log10(tokens_max))))
    if tokens_max / token_step < 3:
        token_step //= 2 if token_step >= 2 else 1
    tokens_top = math.ceil(tokens_max / token_step) * token_step
    last = max(1, turns[-1].index)
    blue, red, grey, green = PALETTE[0], PALETTE[1], PALETTE[8], PALETTE[2]

    def sx(turn: float) -> float:
        return left + plot_w * turn / last

    def sy_ms(value: float) -> float:
        return top + plot_h * (1 - (math.log10(value) - low) / (high - low))

    def sy_tok(value: float) -> float:
        return top + plot_h * (1 - value / tokens_top)

    def f(value: float) -> str:
        return f"{value:.1f}"

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title, quote=True)}" '
        'font-family="sans-serif" font-size="12">',
        f"<title>{escape(title)}</title>",
        '<rect width="100%" height="100%" fill="#fff"/>',
        f'<text x="{f(left)}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for exponent in range(low, high + 1):
        y = sy_ms(10.0**exponent)
        label = f"{10.0**exponent:g}"
        parts.append(
            f'<line x1="{f(left)}" y1="{f(y)}" x2="{f(left + plot_w)}" y2="{f(y)}" '
            f'stroke="#ddd"/><text x="{f(left - 6)}" y="{f(y + 4)}" text-anchor="end">'
            f"{label}</text>"
        )
    for i in range(6):
        value = tokens_top * i / 5
        parts.append(
            f'<text x="{f(left + plot_w + 6)}" y="{f(sy_tok(value) + 4)}" fill="{grey}">'
            f"{value / 1000:g}k</text>"
        )
    x_step = max(1, 10 ** math.floor(math.log10(last)) // (2 if last < 300 else 1))
    for turn in range(0, last + 1, x_step):
        x = sx(turn)
        parts.append(
            f'<line x1="{f(x)}" y1="{f(top)}" x2="{f(x)}" y2="{f(top + plot_h)}" stroke="#eee"/>'
            f'<text x="{f(x)}" y="{f(top + plot_h + 16)}" text-anchor="middle">{turn}</text>'
        )
    parts.append(
        f'<rect x="{f(left)}" y="{f(top)}" width="{f(plot_w)}" height="{f(plot_h)}" '
        'fill="none" stroke="#888"/>'
        f'<text x="{f(left + plot_w / 2)}" y="{height - 10}" text-anchor="middle">'
        "turn</text>"
        f'<text transform="translate(16 {f(top + plot_h / 2)}) rotate(-90)" '
        'text-anchor="middle">prepare() time, ms (log scale)</text>'
        f'<text transform="translate({f(left + plot_w + 52)} {f(top + plot_h / 2)}) '
        f'rotate(90)" text-anchor="middle" fill="{grey}">tokens</text>'
    )
    for key, color, dash in (("raw_tokens", grey, ""), ("sent_tokens", green, "4 3")):
        points = " ".join(f"{f(sx(t.index))},{f(sy_tok(getattr(t, key)))}" for t in turns)
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="1.5"{dashed}/>'
        )
    for t, value in zip(turns, ms, strict=True):
        if not t.compacted:
            parts.append(
                f'<circle cx="{f(sx(t.index))}" cy="{f(sy_ms(value))}" r="1.8" fill="{blue}" '
                'fill-opacity="0.5"/>'
            )
    window = max(3, min(25, len(turns) // 10) | 1)
    rolling = _rolling_median(ms, window)
    points = " ".join(
        f"{f(sx(t.index))},{f(sy_ms(v))}" for t, v in zip(turns, rolling, strict=True)
    )
    parts.append(f'<polyline points="{points}" fill="none" stroke="{blue}" stroke-width="2"/>')
    for t, value in zip(turns, ms, strict=True):
        if t.compacted:
            x, y = sx(t.index), sy_ms(value)
            parts.append(
                f'<path d="M{f(x)} {f(y - 5)}L{f(x + 5)} {f(y)}L{f(x)} {f(y + 5)}L{f(x - 5)} '
                f'{f(y)}Z" fill="{red}"><title>turn {t.index}: compaction, {value:.1f} ms '
                f"(summary stand-in {t.summary_seconds * 1000:.1f} ms)</title></path>"
            )
    legend = [
        ("dot", blue, "prepare(), one turn"),
        ("line", blue, f"rolling median ({window} turns)"),
        ("diamond", red, "compaction turn"),
        ("line", grey, "raw history tokens"),
        ("dash", green, "tokens sent"),
    ]
    lx = left + plot_w + 70
    for i, (kind, color, label) in enumerate(legend):
        y = top + 8 + i * 20
        if kind == "dot":
            mark = f'<circle cx="{f(lx + 6)}" cy="{f(y)}" r="3" fill="{color}"/>'
        elif kind == "diamond":
            mark = (
                f'<path d="M{f(lx + 6)} {f(y - 5)}L{f(lx + 11)} {f(y)}L{f(lx + 6)} {f(y + 5)}'
                f'L{f(lx + 1)} {f(y)}Z" fill="{color}"/>'
            )
        else:
            dash = ' stroke-dasharray="4 3"' if kind == "dash" else ""
            mark = (
                f'<line x1="{f(lx)}" y1="{f(y)}" x2="{f(lx + 12)}" y2="{f(y)}" stroke="{color}" '
                f'stroke-width="2"{dash}/>'
            )
        parts.append(mark + f'<text x="{f(lx + 18)}" y="{f(y + 4)}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
