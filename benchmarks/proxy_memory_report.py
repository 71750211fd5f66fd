"""The memory section's tables, floors and notes, from what the runs measured."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from context_summarizer.core.caches import ChainCache
from context_summarizer.core.engine import ContextEngine
from context_summarizer.core.tokens import TiktokenCounter

from .proxy_memory_footprints import Footprint
from .proxy_memory_runs import REVISITS, Figures, Point
from .proxy_memory_sessions import KEYS
from .results import Floor, markdown_table

PLATEAU_SHARE = 0.05
"""Floor: RSS growth over the last half of the counts, as a share of the last RSS, at most."""
RESTART_RATIO = 1.10
"""Floor: run B's RSS after its new sessions over run A's at as many, at most."""
MIB = 1024 * 1024


def _default(function: Any, name: str) -> Any:
    return inspect.signature(function).parameters[name].default


def _per_entry(footprint: Footprint | None, bound: int) -> tuple[str, str]:
    """Measured bytes per entry, and that times the bound, as table cells."""
    if footprint is None or footprint.entries == 0:
        return "", ""
    each = footprint.bytes / footprint.entries
    return f"{each / 1024:.1f} KiB", f"{each * bound / MIB:.0f} MiB"


def cache_bounds(page_cache_kib: int, footprints: dict[str, Footprint]) -> list[list[str]]:
    """Every in-process cache on the proxy's request path: where it is set, its bound, and
    (for the three that grow with sessions) its measured size per entry and at the bound."""
    from context_summarizer.proxy import chat_context

    chain_size = _default(ChainCache, "size")
    memo_size = _default(ContextEngine, "memo_size")
    counter_size = _default(TiktokenCounter, "cache_size")
    return [
        [
            "prefix chains (`ChainCache`): each entry holds a whole request's messages, "
            "digests and prefix hashes",
            "`context_summarizer/core/caches.py` `ChainCache(size=...)`, built by "
            "`ContextEngine.__init__`",
            f"{chain_size} conversations",
            *_per_entry(footprints.get("chains"), chain_size),
        ],
        [
            "latest checkpoint per session (`ContextEngine._latest`)",
            "`context_summarizer/core/engine.py` `ContextEngine(memo_size=...)`",
            f"{memo_size:,} checkpoints",
            *_per_entry(footprints.get("latest"), memo_size),
        ],
        [
            "token count per message digest (`TiktokenCounter._messages`)",
            "`context_summarizer/core/tokens/counters.py` `TiktokenCounter(cache_size=...)`; one "
            "counter "
            "per encoding, process-wide (`context_summarizer/loaders/tokenizers.py` "
            "`make_counter`)",
            f"{counter_size:,} messages",
            *_per_entry(footprints.get("tokens"), counter_size),
        ],
        [
            "token count per tool-definition list (`TiktokenCounter._tools`)",
            "`context_summarizer/core/tokens/counting.py` `_ChatCounter.__init__`",
            f"min(cache_size, 256) = {min(counter_size, 256)} lists",
            "",
            "",
        ],
        [
            "per-session compaction locks (`ContextManager._alocks`)",
            "`context_summarizer/library/sessions.py`, a `WeakValueDictionary`",
            "sessions with a compaction running or waiting",
            "",
            "",
        ],
        [
            "calibration ratio per tenant and model (`Calibration._sums`)",
            "`context_summarizer/core/tokens/calibration.py` `Calibration(max_entries=...)`",
            "4,096 (namespace, model) pairs, least recently used dropped",
            "",
            "",
        ],
        [
            "models warned about (`ExchangeServices.warned_models`)",
            "`context_summarizer/proxy/chat_context.py` `_MAX_WARNED_MODELS`",
            f"{chat_context._MAX_WARNED_MODELS:,} model names",
            "",
            "",
        ],
        [
            "SQLite page cache (one connection)",
            "`context_summarizer/stores/sqlite.py` sets none: SQLite's default `PRAGMA cache_size`",
            f"{page_cache_kib:,} KiB",
            "",
            f"{page_cache_kib / 1024:.0f} MiB",
        ],
    ]


def _mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def _point_rows(points: Sequence[Point]) -> list[list[str]]:
    rows = []
    previous: Point | None = None
    for p in points:
        added = p.sessions - previous.sessions if previous is not None else 0
        slope = f"{(p.rss - previous.rss) / added / 1024:.1f}" if previous and added > 0 else ""
        rows.append(
            [
                p.label,
                _mib(p.rss),
                _mib(p.hwm),
                slope,
                _mib(p.db_bytes),
                str(p.rows),
                f"{p.elapsed:.1f}",
            ]
        )
        previous = p
    return rows


_HEADER = [
    "point",
    "RSS (MiB)",
    "peak RSS (MiB)",
    "per session (KiB)",
    "SQLite (MiB)",
    "checkpoints",
    "elapsed (s)",
]


def floors(figures: Figures, counts: Sequence[int]) -> list[Floor]:
    """The plateau floor and the restart floor (see ``benchmarks.proxy_memory``'s docstring)."""
    by_count = {p.sessions: p for p in figures.run_a if p.label.endswith(" sessions")}
    half = max(c for c in counts if c <= counts[-1] // 2)
    last = by_count[counts[-1]]
    growth = last.rss - by_count[half].rss
    restarted = next(p for p in figures.run_b if p.label.endswith("new sessions"))
    first = by_count[REVISITS]
    return [
        Floor(
            name=f"RSS growth from {half:,} to {counts[-1]:,} sessions, "
            f"as a share of RSS at {counts[-1]:,}",
            measured=f"{growth / MIB:+.1f} MiB = {growth / last.rss:+.1%}",
            limit=f"≤ {PLATEAU_SHARE:.0%}",
            met=growth <= PLATEAU_SHARE * last.rss,
        ),
        Floor(
            name=f"RSS of a proxy restarted over {counts[-1]:,} stored sessions, after "
            f"{REVISITS} new sessions, against the first proxy's at {REVISITS}",
            measured=f"{_mib(restarted.rss)} / {_mib(first.rss)} MiB = "
            f"{restarted.rss / first.rss:.2f}×",
            limit=f"≤ {RESTART_RATIO:.2f}×",
            met=restarted.rss <= RESTART_RATIO * first.rss,
        ),
    ]


def _filling(figures: Figures, sessions: int) -> list[str]:
    """A note on each growing cache still under its bound after ``sessions`` sessions."""
    caches = {
        "chains": ("chain cache", _default(ChainCache, "size")),
        "latest": ("checkpoint memo", _default(ContextEngine, "memo_size")),
        "tokens": ("token-count cache", _default(TiktokenCounter, "cache_size")),
    }
    notes = []
    for key, (label, bound) in caches.items():
        footprint = figures.footprints.get(key)
        if footprint is None or footprint.entries == 0:
            continue
        per_session = footprint.entries / figures.footprint_sessions
        if per_session * sessions < bound:
            kib = footprint.bytes / figures.footprint_sessions / 1024
            notes.append(
                f"At {sessions:,} sessions the {label} holds ~{per_session * sessions:,.0f} of "
                f"its {bound:,} entries ({per_session:.0f} per session): it still grows by "
                f"~{kib:.1f} KiB per session, until ~{bound / per_session:,.0f} sessions."
            )
    return [" ".join(notes), ""] if notes else []


def report(figures: Figures, counts: Sequence[int]) -> str:
    """The section body: method, both runs' tables, the cache bounds."""
    by_count = {p.sessions: p for p in figures.run_a if p.label.endswith(" sessions")}
    last, ten = by_count[counts[-1]], by_count.get(REVISITS)
    lines = [
        f"`summarizer serve` in its own process with a SQLite store, context window "
        f"{figures.window:,} tokens (trigger 80 %, target 40 %); the test upstream on 127.0.0.1 "
        f"answers summary requests with `summary_responder`. Each session is a distinct "
        f"tool-using coding-agent conversation of {figures.mean_tokens:,.0f} tokens on average "
        f"(its own task, repository, files and tool outputs from its own seed), sent once: it "
        f"compacts and leaves one checkpoint in SQLite. Sessions rotate over {len(KEYS)} API "
        f"keys (credential namespaces); the warm-up uses a fifth and stores one more checkpoint. "
        f"RSS is `VmRSS` of the proxy process, peak RSS its `VmHWM`; SQLite is the database "
        f"file plus its WAL; per session is the RSS growth since the previous row over the "
        f"sessions added.",
        "",
        f"**Run A**: one proxy, sessions added up to {counts[-1]:,} "
        f"({figures.seconds_a:.0f} s). Then the {REVISITS} oldest sessions send one more turn; "
        f"each is rewritten from its stored checkpoint (same checkpoint id, no new compaction).",
        "",
        markdown_table(_HEADER, _point_rows(figures.run_a)),
        "",
        f"**Run B**: a fresh proxy over run A's store ({figures.seconds_b:.0f} s): the same "
        f"warm-up, {REVISITS} new sessions, then the {REVISITS} oldest sessions of run A, found "
        f"in the store by a process that never saw them.",
        "",
        markdown_table(_HEADER, _point_rows(figures.run_b)),
        "",
    ]
    if ten is not None:
        lines += [
            f"RSS at {counts[-1]:,} sessions against {REVISITS}: "
            f"{_mib(last.rss)} / {_mib(ten.rss)} MiB = {last.rss / ten.rss:.2f}×. "
            f"Store: {_mib(last.db_bytes)} MiB with its WAL for {last.rows:,} checkpoints, whose "
            f"JSON bodies average {last.body_bytes / last.rows / 1024:.1f} KiB.",
            "",
        ]
    lines += _filling(figures, last.sessions)
    lines += [
        "In-process caches on the proxy's path, their default bounds, and what the three that "
        "grow with sessions hold:",
        "",
        markdown_table(
            ["cache", "set in", "bound", "per entry", "at the bound"],
            cache_bounds(figures.page_cache_kib, figures.footprints),
            align="lllrr",
        ),
        "",
        f"Per entry: the traced bytes a cache frees when emptied after "
        f"{figures.footprint_sessions} sessions of this size went through a `ContextManager` "
        f"configured as the proxy's, in this process under `tracemalloc` "
        f"({figures.seconds_footprints:.0f} s); a chain-cache entry grows with its "
        f"conversation's length. Also bounded, by what they are keyed on: Prometheus label sets "
        f"(route, status, trigger), one tokenizer and one token counter per encoding, prompt "
        f"templates per version, `sqlite3`'s statement cache (128).",
    ]
    return "\n".join(lines)
