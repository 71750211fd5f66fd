"""The prepare-scaling section's statistics, table and floor, from the timed turns."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .prepare_scaling_chart import CHART
from .prepare_scaling_session import MODEL, Turn
from .results import Floor, markdown_table, percentile

EDGE = 100
"""Turns compared at each end of the session for the floor."""
FLOOR_RATIO = 3.0
"""Floor: the last ``EDGE`` turns' median ``prepare()`` time over the first's, at most."""


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
