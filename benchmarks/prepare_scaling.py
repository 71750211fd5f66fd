"""Cost of preparing a turn as the session grows: ``ContextManager.prepare()`` time per turn.

Method. One scripted, deterministic tool-using coding session (``CodingSession``: the same
script and tool executor the demo and tests use; every turn reads a file, searches or runs the
tests and gets a different 40-90 line output) is driven through the library exactly as a
hand-written agent loop drives it: the agent keeps its whole raw history, and each turn it calls
``prepare()`` on that history, "sends" the result, appends the assistant reply and the tool
results to the raw history, and feeds back the usage with ``observe()``. There is no network:
the model's reply is the script's next step, and the summary model is ``summary_responder`` (the
deterministic stand-in the test upstream uses) called in process through
``ContextManager(summarizer=...)``. ``observe()`` is given the library's own estimate as
``prompt_tokens``, as if the provider agreed with the count.

Compaction is configured as a user gets it by default: ``CompactionConfig()`` for ``gpt-4o``
(128k window from the model registry; compact at 80% of the usable window, down to 40%), with
the default in-memory checkpoint store. Every ``prepare()`` call is timed with
``time.perf_counter``, garbage collector on, as it runs in an agent. Turns where ``prepare()``
compacts include the in-process summary call; the stand-in's own time is measured too and
reported beside them.

The raw history is counted with a separate ``TiktokenCounter`` for the model's encoding (its own
cache), so measuring it never warms the library's token cache.

    python -m benchmarks.prepare_scaling [--quick] [--turns 1000] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from summarizer.core.messages import Message
from summarizer.core.results import SummarizeCall, SummaryOutcome
from summarizer.core.tokens import TiktokenCounter, encoding_for_model
from summarizer.evaluation.charts import PALETTE
from summarizer.library.manager import ContextManager
from summarizer.loaders.tokenizers import load_encoding
from summarizer.testing.scenario import CodingSession
from summarizer.testing.summaries import summary_responder

from .results import Floor, Section, markdown_table, percentile, print_section

TITLE = "Cost of preparing a turn as the session grows"
COMMAND = "python -m benchmarks.prepare_scaling"

MODEL = "gpt-4o"
FULL_TURNS = 1_000
QUICK_TURNS = 60
QUICK_WINDOW = 16_000
"""Quick mode's window: small enough that its 60 turns compact too (same code path)."""
EDGE = 100
"""Turns compared at each end of the session for the floor."""
FLOOR_RATIO = 3.0
CHART = "prepare_scaling.svg"

_THOUGHTS = (
    "Reading {target} to see how the discount reaches the total.",
    "Checking {target} for where rounding happens.",
    "Looking at {target} again; the order of discount and tax matters here.",
    "Let me confirm what {target} does with a missing discount code.",
    "{target} should tell whether the tax is computed on the discounted amount.",
    "Comparing {target} with the failing assertion.",
)


@dataclass(frozen=True)
class Turn:
    """One agent turn: how long ``prepare()`` took and the sizes around it."""

    index: int
    """Turn number, from 0."""
    seconds: float
    """Wall time of the ``prepare()`` call."""
    summary_seconds: float
    """Of which, time inside the in-process summary stand-in (0 on non-compaction turns)."""
    compacted: bool
    """Whether this ``prepare()`` performed a compaction."""
    raw_tokens: int
    """Tokens of the raw history passed to ``prepare()`` (messages only)."""
    sent_tokens: int
    """The library's estimate of the request it returned (messages, tools, priming)."""
    raw_messages: int
    """Messages in the raw history passed to ``prepare()``."""


@dataclass(frozen=True)
class Bucket:
    """Statistics of consecutive turns ``first`` to ``last`` (inclusive)."""

    first: int
    last: int
    raw_tokens_end: int
    median_sent_tokens: float
    """Median size of the requests ``prepare()`` returned in the bucket."""
    compactions_so_far: int
    compactions: int
    median_ms: float
    p95_ms: float
    max_ms: float
    median_plain_ms: float | None
    """Median of the bucket's turns without a compaction (None if every turn compacted)."""


def buckets(turns: Sequence[Turn], size: int) -> list[Bucket]:
    """``turns`` cut into consecutive runs of ``size`` (the last may be shorter), summarised."""
    out: list[Bucket] = []
    so_far = 0
    for start in range(0, len(turns), size):
        chunk = turns[start : start + size]
        ms = [t.seconds * 1000 for t in chunk]
        plain = [t.seconds * 1000 for t in chunk if not t.compacted]
        compactions = sum(1 for t in chunk if t.compacted)
        so_far += compactions
        out.append(
            Bucket(
                first=chunk[0].index,
                last=chunk[-1].index,
                raw_tokens_end=chunk[-1].raw_tokens,
                median_sent_tokens=statistics.median(t.sent_tokens for t in chunk),
                compactions_so_far=so_far,
                compactions=compactions,
                median_ms=statistics.median(ms),
                p95_ms=percentile(ms, 0.95),
                max_ms=max(ms),
                median_plain_ms=statistics.median(plain) if plain else None,
            )
        )
    return out


def edge_ratio(turns: Sequence[Turn], edge: int, *, plain: bool = False) -> float:
    """Median ``prepare()`` time of the last ``edge`` turns over that of the first ``edge``;
    ``plain`` leaves compaction turns out of both medians."""
    first = [t for t in turns[:edge] if not (plain and t.compacted)]
    last = [t for t in turns[-edge:] if not (plain and t.compacted)]
    if not first or not last:
        return math.nan
    return statistics.median(t.seconds for t in last) / statistics.median(t.seconds for t in first)


# --- the session --------------------------------------------------------------------------------


def _tool_calls(step: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``(name, arguments)`` pairs of one ``CodingSession`` step (one call or parallel)."""
    if isinstance(step, tuple):
        return [(str(step[0]), step[1])]
    if isinstance(step, list):
        return [(str(name), arguments) for name, arguments in step]
    raise TypeError(f"not a tool-call step: {step!r}")


def assistant_turn(session: CodingSession, turn: int, step: Any) -> list[Message]:
    """The assistant message for ``step`` at ``turn`` and the tool messages answering it."""
    calls = _tool_calls(step)
    rng = random.Random(f"{session.seed}:thought:{turn}")
    target = " and ".join(
        str(arguments.get("path") or arguments.get("pattern") or arguments.get("command"))
        for _, arguments in calls
    )
    assistant: Message = {
        "role": "assistant",
        "content": rng.choice(_THOUGHTS).format(target=target),
        "tool_calls": [
            {
                "id": f"call_{turn}_{k}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(dict(arguments))},
            }
            for k, (name, arguments) in enumerate(calls)
        ],
    }
    results: list[Message] = [
        {
            "role": "tool",
            "tool_call_id": f"call_{turn}_{k}",
            "content": session.execute(turn, name, arguments),
        }
        for k, (name, arguments) in enumerate(calls)
    ]
    return [assistant, *results]


class _StandIn:
    """The summary model: ``summary_responder`` in process, timing itself."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        started = time.perf_counter()
        reply = summary_responder(call.body)
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        self.calls += 1
        return SummaryOutcome(
            text=reply.content, finish_reason=reply.derived_finish_reason(), latency_s=elapsed
        )


def drive(turns: int, *, model: str = MODEL, **config: Any) -> list[Turn]:
    """Run a ``turns``-turn session through ``ContextManager`` and time every ``prepare()``.

    ``config``: ``CompactionConfig`` fields (none: the defaults).
    """
    session = CodingSession(turns=turns)
    steps = session.steps
    stand_in = _StandIn()
    manager = ContextManager(summarizer=stand_in, **config)
    raw_counter = TiktokenCounter(load_encoding(encoding_for_model(model)))
    history: list[Message] = [session.system, session.task]
    raw_tokens = raw_counter.count_messages(history)
    out: list[Turn] = []
    try:
        for turn in range(turns):
            summary_before = stand_in.seconds
            started = time.perf_counter()
            result = manager.prepare(history, model=model, tools=session.tools)
            seconds = time.perf_counter() - started
            out.append(
                Turn(
                    index=turn,
                    seconds=seconds,
                    summary_seconds=stand_in.seconds - summary_before,
                    compacted=result.compacted,
                    raw_tokens=raw_tokens,
                    sent_tokens=result.report.estimated_tokens,
                    raw_messages=len(history),
                )
            )
            # The "provider" agrees with the estimate: calibration stays at 1.0.
            usage = {"prompt_tokens": result.report.raw_estimated_tokens}
            manager.observe(result, usage, model=model)
            added = assistant_turn(session, turn, steps[turn])
            history.extend(added)
            raw_tokens += raw_counter.count_messages(added)
    finally:
        manager.close()
    return out


# --- the chart ----------------------------------------------------------------------------------


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


# --- the section --------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def report(
    turns: Sequence[Turn], *, quick: bool, window_note: str, seconds: float
) -> tuple[str, list[Floor]]:
    """The section's Markdown body and floor for a measured session."""
    edge = min(EDGE, max(1, len(turns) // 3))
    size = EDGE if not quick else max(1, len(turns) // 6)
    ratio = edge_ratio(turns, edge)
    plain_ratio = edge_ratio(turns, edge, plain=True)
    compactions = [t for t in turns if t.compacted]
    rows = [
        [
            f"{b.first + 1}–{b.last + 1}",
            f"{b.raw_tokens_end:,}",
            f"{b.median_sent_tokens:,.0f}",
            f"{b.compactions_so_far} (+{b.compactions})",
            _ms(b.median_ms),
            _ms(b.p95_ms),
            _ms(b.max_ms),
            _ms(b.median_plain_ms),
        ]
        for b in buckets(turns, size)
    ]
    table = markdown_table(
        [
            "turns",
            "raw tokens at end",
            "median tokens sent",
            "compactions so far",
            "median ms",
            "p95 ms",
            "max ms",
            "median ms, no compaction",
        ],
        rows,
    )
    compaction_line = "no compaction happened."
    if compactions:
        own = [(t.seconds - t.summary_seconds) * 1000 for t in compactions]
        total = [t.seconds * 1000 for t in compactions]
        stand_in = [t.summary_seconds * 1000 for t in compactions]
        first = ", ".join(str(t.index + 1) for t in compactions[:3])
        more = ", …" if len(compactions) > 3 else ""
        compaction_line = (
            f"{len(compactions)} compaction turns (turns {first}{more}): `prepare()` took a "
            f"median {_ms(statistics.median(total))} ms (max {_ms(max(total))}) on those, of "
            f"which the summary stand-in a median {_ms(statistics.median(stand_in))} ms and the "
            f"library itself {_ms(statistics.median(own))} ms."
        )
    last = turns[-1]
    body = "\n\n".join(
        [
            f"A scripted {len(turns):,}-turn tool-using coding session (`CodingSession`: file "
            "reads, searches and test runs with varied 40–90 line outputs) driven through "
            "`ContextManager` as an agent loop drives it: each turn `prepare()` on the whole raw "
            "history, append the reply and tool results, `observe()` the usage. "
            f"Model `{MODEL}`, {window_note}, default `CompactionConfig` and in-memory store; "
            "the summary model is the deterministic `summary_responder`, called in process "
            "(no network). Each `prepare()` is timed with `time.perf_counter`.",
            f"Raw history at the last turn: {last.raw_tokens:,} tokens in "
            f"{last.raw_messages:,} messages; the request sent then: {last.sent_tokens:,} "
            f"tokens. {compaction_line}",
            f"**Median `prepare()` time, last {edge} turns / first {edge}: {ratio:.2f}×** "
            f"(compaction turns included, with their in-process summary call; without them: "
            f"{plain_ratio:.2f}×). Total wall time of the session: {seconds:.1f} s.",
            table,
            "Per 100-turn bucket (quick mode: per sixth of the session): median, p95 and max "
            "over all its turns, compaction turns included; the last column leaves them out. "
            "A turn's work follows the request sent, which compaction keeps inside the window, "
            "and what is new since the last turn; the first bucket is a little cheaper because "
            "its requests are smaller before the first compaction. What still grows with the "
            "whole raw history is a C-speed copy and comparison of the message list in the "
            "prefix-chain cache.",
            f"![prepare() time per turn and history size]({CHART})",
        ]
    )
    floor = Floor(
        f"prepare() median, last {edge} turns / first {edge}",
        f"{ratio:.2f}×",
        f"≤ {FLOOR_RATIO:g}×",
        ratio <= FLOOR_RATIO,
    )
    return body, [floor]


def run(*, quick: bool, out_dir: Path, turns: int | None = None) -> Section:
    """Run the section: ``quick`` is 60 turns in a 16k window, else 1,000 turns in gpt-4o's."""
    count = turns if turns is not None else (QUICK_TURNS if quick else FULL_TURNS)
    config: dict[str, Any] = {"context_window": QUICK_WINDOW} if quick else {}
    window_note = (
        f"a {QUICK_WINDOW:,}-token window (quick mode, so that it compacts)"
        if quick
        else "its registry window of 128k tokens"
    )
    started = time.perf_counter()
    measured = drive(count, **config)
    seconds = time.perf_counter() - started
    out_dir.mkdir(parents=True, exist_ok=True)
    title = f"prepare() per turn, {count:,}-turn session, {MODEL}"
    (out_dir / CHART).write_text(chart(measured, title=title), encoding="utf-8")
    body, floors = report(measured, quick=quick, window_note=window_note, seconds=seconds)
    return Section(
        title=TITLE,
        command=COMMAND,
        body=body,
        floors=floors,
        files=[CHART],
    )


def main() -> None:
    """Command line: run the section and print its body and floors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 turns in a 16k window")
    parser.add_argument("--turns", type=int, default=None, help="override the turn count")
    parser.add_argument("--out-dir", type=Path, default=None, help="where the chart goes")
    args = parser.parse_args()
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    section = run(quick=args.quick, out_dir=out_dir, turns=args.turns)
    print_section(section)
    print(f"\nchart: {out_dir / CHART}")


if __name__ == "__main__":
    main()
