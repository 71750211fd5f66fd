"""What compaction costs with provider caches: recorded sessions replayed, every request priced.

Method. Each session (the 20 cases of ``datasets/coding-sessions.jsonl``, and long scripted
``CodingSession`` runs) is replayed as the agent lived it, under each compaction strategy
(``benchmarks.cache_replay``: production's self-summary, a from-scratch summarizer, observation
masking rolling and stepped, no compaction): at each assistant message the agent sends what the
strategy keeps of the messages before it, and that message is the reply (its output tokens);
summary requests go in between. Every request is then priced under two cache models
(``benchmarks.cache_accounting``, with ``summarizer.evaluation.pricing``'s ``request_cost`` and
shipped prices):

- **OpenAI** (``gpt-5``, automatic): a request reads from the cache the longest leading run of
  messages (tools and system prompt included) that an earlier request of the session already
  sent byte for byte, found over message digest chains with the test upstream's ``PrefixCache``;
  ``request_cost`` applies the 1,024-token minimum and the 128-token steps. Writes cost nothing.
- **Anthropic** (``claude-sonnet-4``, explicit): only prefixes that ended at an earlier request's
  *breakpoint* are in the cache (breakpoints: the end of every agent request, right after the
  summary message of a compacted context, the end of a self-summary request; none on a
  from-scratch request, which nothing ever reads back, so a breakpoint would only turn its input
  into 1.25x writes). A request reads the longest such prefix that it starts with and that
  lies within 20 content blocks before one of its own breakpoints (Anthropic's lookback; a
  block here is a message's text, each tool call, each tool result). The rest of a request with
  a breakpoint is written at 1.25x; one without breakpoints is plain input.

Assumptions: caches never expire or miss within a session (agent turns come seconds apart);
matching is message-granular (two different messages sharing leading text earn nothing);
``tool_choice: "none"`` on the self-summary request does not change the cached prefix (the
project's own test upstream assumes the same); every token is counted with o200k_base, Claude's
too. *Billed input-equivalent tokens* are a session's cost in dollars divided by the model's
price of one uncached input token: a cached read counts 0.1, an Anthropic write 1.25, an output
token 8 (gpt-5) or 5 (claude-sonnet-4). The *lower bound* is the raw session sent append-only
with perfect caching (each request reads everything the previous one sent, no minimum, no steps;
the new tokens are plain input, or writes at Anthropic): the cheapest way to keep the whole
history, computed whatever the window.

    python -m benchmarks.cache_cost [--quick] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from summarizer.core.model_limits import lookup_limits
from summarizer.evaluation.pricing import Price, default_prices, price_for

from .cache_accounting import (
    SessionCost,
    Shapes,
    bill_requests,
    lower_bound_bills,
    session_cost,
)
from .cache_replay import (
    FROM_SCRATCH,
    MASK_KEEP_TURNS,
    MASKING_ROLLING,
    NO_COMPACTION,
    SELF_SUMMARY,
    STRATEGIES,
    SUMMARY_TOKENS,
    Session,
    coding_session,
    dataset_sessions,
    replay_all,
    replay_budget,
    replay_counter,
    session_tokens,
)
from .results import Floor, Section, markdown_table, print_section

TITLE = "What compaction costs with provider caches"
COMMAND = "python -m benchmarks.cache_cost"

DATASET = Path(__file__).resolve().parent.parent / "datasets" / "coding-sessions.jsonl"
"""The shipped evaluation dataset (20 cases)."""
DATASET_WINDOW = 16_000
"""The dataset's cases hold 20k-50k tokens: in 16k they compact several times each."""
LONG_WINDOW = 128_000
"""The window the long sessions are replayed in."""
LONG_SESSIONS = ((250, 7), (330, 11), (400, 13))
"""(turns, seed) of the long ``CodingSession`` runs: about 305k, 395k and 485k raw tokens."""
QUICK_LONG_SESSIONS = ((120, 7),)
"""Quick mode's one small long session (about 150k tokens: two compactions in 128k)."""
QUICK_DATASET_CASES = 2
"""Quick mode replays the first cases of the dataset only."""
MODELS = ("gpt-5", "claude-sonnet-4")
"""The priced models: OpenAI's automatic cache, Anthropic's explicit one."""
SELF_LIMIT = 0.5
"""Floor: self-summary's summary requests cost at most this share of from-scratch's."""
CACHE_SHARE_LIMIT = 0.9
"""Floor: at least this share of self-summary's prompt tokens come from the cache."""
RESULTS_FILE = "cache-cost.json"
"""Every session's figures, written into ``out_dir``."""


# --- measuring ------------------------------------------------------------------------------------

LOWER_BOUND = "lower bound"
"""The row of the raw session sent append-only with perfect caching."""
ROWS = (*STRATEGIES, LOWER_BOUND)
"""The rows of each strategy table, in order."""


@dataclass(frozen=True)
class CacheModel:
    """A priced model, its cache style and its real context window."""

    model: str
    price: Price
    window: int

    @property
    def label(self) -> str:
        """E.g. ``gpt-5 (automatic cache)``."""
        return f"{self.model} ({self.price.cache} cache)"


def cache_models() -> list[CacheModel]:
    """The two priced models, from the shipped price table and model registry."""
    found: list[CacheModel] = []
    for model in MODELS:
        price = price_for(model, default_prices())
        if price is None:
            raise LookupError(f"no price for {model} in the shipped table")
        found.append(CacheModel(model, price, lookup_limits(model).context_window))
    return found


@dataclass
class Corpus:
    """A set of sessions replayed in one window, and their costs."""

    name: str
    window: int
    sessions: list[Session]
    raw_tokens: list[int]
    costs: dict[str, dict[str, list[SessionCost]]]
    """cache model -> row (strategy or lower bound) -> one cost per session."""
    lookback_cost: dict[str, float] = field(default_factory=dict)
    """Explicit cache only: strategy -> the share of its cost (over all sessions) that the
    lookback limit adds, against an unlimited lookback."""


def measure(name: str, sessions: Sequence[Session], window: int) -> Corpus:
    """Replay and price every session of a corpus."""
    models = cache_models()
    costs: dict[str, dict[str, list[SessionCost]]] = {
        m.model: {row: [] for row in ROWS} for m in models
    }
    limited: dict[str, float] = dict.fromkeys(STRATEGIES, 0.0)
    unlimited: dict[str, float] = dict.fromkeys(STRATEGIES, 0.0)
    for session in sessions:
        replays = replay_all(session, window=window)
        shapes = Shapes(replay_counter())
        for strategy, replay in replays.items():
            for m in models:
                bills = bill_requests(replay.requests, m.price, shapes)
                if m.price.cache == "explicit":
                    free = bill_requests(replay.requests, m.price, shapes, lookback_blocks=10**9)
                    limited[strategy] += sum(b.cost.usd for b in bills)
                    unlimited[strategy] += sum(b.cost.usd for b in free)
                fits_window = m.window if strategy == NO_COMPACTION else None
                costs[m.model][strategy].append(
                    session_cost(
                        bills,
                        m.price,
                        compactions=replay.compactions,
                        narrowed=replay.narrowed,
                        window=fits_window,
                    )
                )
        raw = replays[NO_COMPACTION].requests
        for m in models:
            bills = lower_bound_bills(raw, m.price, shapes)
            costs[m.model][LOWER_BOUND].append(session_cost(bills, m.price, compactions=0))
    lookback = {k: 1 - _ratio(unlimited[k], v) for k, v in limited.items() if v > unlimited[k]}
    raw_tokens = [session_tokens(s) for s in sessions]
    return Corpus(name, window, list(sessions), raw_tokens, costs, lookback)


# --- reporting ------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _tokens(value: float) -> str:
    return f"{value:,.0f}"


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def compaction_ratio(corpus: Corpus, model: str, *, prompt_only: bool = False) -> float:
    """Self-summary's summary requests over from-scratch's, per session on average."""
    own = corpus.costs[model][SELF_SUMMARY]
    other = corpus.costs[model][FROM_SCRATCH]
    if prompt_only:
        return _ratio(
            _mean([c.compaction_prompt_input_equivalent for c in own]),
            _mean([c.compaction_prompt_input_equivalent for c in other]),
        )
    return _ratio(
        _mean([c.compaction_input_equivalent for c in own]),
        _mean([c.compaction_input_equivalent for c in other]),
    )


def session_ratio(corpus: Corpus, model: str) -> float:
    """Self-summary's whole-session cost over from-scratch's."""
    return _ratio(
        _mean([c.input_equivalent for c in corpus.costs[model][SELF_SUMMARY]]),
        _mean([c.input_equivalent for c in corpus.costs[model][FROM_SCRATCH]]),
    )


def _compactions_cell(row: str, costs: Sequence[SessionCost]) -> str:
    if row == LOWER_BOUND:
        return "-"
    cell = f"{_mean([c.compactions for c in costs]):.1f}"
    if row == MASKING_ROLLING:
        narrowed = sum(c.narrowed for c in costs) / max(1, sum(c.requests for c in costs))
        cell += f" (M < {MASK_KEEP_TURNS} on {narrowed:.0%} of requests)"
    return cell


def strategy_table(corpus: Corpus, model: CacheModel) -> str:
    """One row per strategy: means per session under ``model``."""
    rows: list[list[str]] = []
    by_row = corpus.costs[model.model]
    bound = _mean([c.input_equivalent for c in by_row[LOWER_BOUND]])
    for row in ROWS:
        costs = by_row[row]
        if row == NO_COMPACTION and not all(c.fits for c in costs):
            fitting = sum(c.fits for c in costs)
            note = f"n/a (does not fit: {len(costs) - fitting} of {len(costs)} sessions)"
            rows.append([row, note, "", "", "", ""])
            continue
        billed = _mean([c.input_equivalent for c in costs])
        summaries = row in (SELF_SUMMARY, FROM_SCRATCH)
        rows.append(
            [
                row,
                _tokens(billed),
                f"{_ratio(billed, bound):.2f}×",
                f"{_mean([c.cache_share for c in costs]):.1%}",
                f"{_mean([c.compaction_share for c in costs]):.1%}" if summaries else "-",
                _compactions_cell(row, costs),
            ]
        )
    header = [
        "strategy",
        "billed input-eq. tokens / session",
        "x lower bound",
        "prompt tokens from cache",
        "cost on summary requests",
        "compactions / session",
    ]
    return markdown_table(header, rows)


def ratio_table(corpora: Sequence[Corpus], models: Sequence[CacheModel]) -> str:
    """Self-summary against from-scratch: the summary requests, and the whole session."""
    rows: list[list[str]] = []
    for corpus in corpora:
        for m in models:
            own = corpus.costs[m.model][SELF_SUMMARY]
            other = corpus.costs[m.model][FROM_SCRATCH]
            rows.append(
                [
                    corpus.name,
                    m.label,
                    _tokens(_mean([c.compaction_input_equivalent for c in own])),
                    _tokens(_mean([c.compaction_input_equivalent for c in other])),
                    f"**{compaction_ratio(corpus, m.model):.2f}×**",
                    f"{compaction_ratio(corpus, m.model, prompt_only=True):.2f}×",
                    f"{session_ratio(corpus, m.model):.2f}×",
                ]
            )
    header = [
        "sessions",
        "cache",
        "self-summary: summary requests / session",
        "from-scratch: summary requests / session",
        "summary requests, self / scratch",
        "their prompts only, self / scratch",
        "whole session, self / scratch",
    ]
    return markdown_table(header, rows, align="llrrrrr")


def floors(corpora: Sequence[Corpus], models: Sequence[CacheModel]) -> list[Floor]:
    """(a) self-summary's summary requests cost at most half of from-scratch's; (b) at least 90%
    of self-summary's prompt tokens come from the cache (mean over sessions)."""
    found: list[Floor] = []
    for corpus in corpora:
        for m in models:
            ratio = compaction_ratio(corpus, m.model)
            found.append(
                Floor(
                    name=f"{corpus.name}, {m.label}: self-summary's summary requests against "
                    "from-scratch's (input-eq. tokens per session)",
                    measured=f"{ratio:.2f}× (whole session: {session_ratio(corpus, m.model):.2f}×)",
                    limit=f"≤ {SELF_LIMIT}×",
                    met=ratio <= SELF_LIMIT,
                )
            )
    for corpus in corpora:
        for m in models:
            shares = [c.cache_share for c in corpus.costs[m.model][SELF_SUMMARY]]
            share = _mean(shares)
            found.append(
                Floor(
                    name=f"{corpus.name}, {m.label}: self-summary's prompt tokens served from "
                    "cache (mean over sessions)",
                    measured=f"{share:.1%} (lowest session {min(shares):.1%})",
                    limit=f"≥ {CACHE_SHARE_LIMIT:.0%}",
                    met=share >= CACHE_SHARE_LIMIT,
                )
            )
    return found


def corpus_intro(corpus: Corpus) -> str:
    """Sizes, window and budget of a corpus."""
    budget = replay_budget(corpus.window)
    raw = corpus.raw_tokens
    return (
        f"{len(raw)} session{'s' if len(raw) > 1 else ''} of {min(raw):,}-{max(raw):,} raw "
        f"tokens (mean {_mean(raw):,.0f}), "
        f"replayed in a {corpus.window:,}-token window: compaction at {budget.trigger_tokens:,} "
        f"tokens down to {budget.target_tokens:,} (the `CompactionConfig` defaults: 0.8 and 0.4 "
        f"of the window less a reply reserve of {budget.reserve_output_tokens:,})."
    )


def _markdown(docstring: str) -> str:
    """Docstring prose as Markdown: single backticks, each paragraph or bullet on one line."""
    paragraphs = []
    for paragraph in docstring.strip().replace("``", "`").split("\n\n"):
        lines = [line.strip() for line in paragraph.splitlines()]
        items: list[str] = []
        for line in lines:
            if line.startswith("- ") or not items:
                items.append(line)
            else:
                items[-1] += " " + line
        paragraphs.append("\n".join(items))
    return "\n\n".join(paragraphs)


def report(corpora: Sequence[Corpus], models: Sequence[CacheModel]) -> str:
    """The section body."""
    parts = [_markdown(__doc__.split("\n\n", 1)[1].rsplit("\n\n", 1)[0])]
    for corpus in corpora:
        parts.append(f"**{corpus.name}.** {corpus_intro(corpus)}")
        for m in models:
            parts.append(f"*{m.label}, real window {m.window:,}:*\n\n" + strategy_table(corpus, m))
    parts.append(
        "**Self-summary against from-scratch** (input-eq. tokens per session; the floor is "
        "judged on the bold column, the summary requests with their output):\n\n"
        + ratio_table(corpora, models)
    )
    parts.append(notes(corpora))
    missed = floor_notes(corpora, models)
    if missed:
        parts.append(missed)
    return "\n\n".join(parts)


def _lookback_note(corpora: Sequence[Corpus]) -> str:
    found = [
        f"{strategy} on the {corpus.name.lower()} (+{share:.1%})"
        for corpus in corpora
        for strategy, share in corpus.lookback_cost.items()
    ]
    if not found:
        return "Anthropic's 20-block lookback never changed a figure here."
    return (
        "Anthropic's 20-block lookback raised only these costs, against an unlimited lookback: "
        + ", ".join(found)
        + "."
    )


def notes(corpora: Sequence[Corpus]) -> str:
    """How to read the tables."""
    return (
        f"Notes. Every summary is a deterministic stand-in of {SUMMARY_TOKENS:,} output tokens for "
        "both summarizing strategies, and from-scratch's compacted context is self-summary's own "
        "(same cut, kept tail, summary message and fact ledger), so the two differ only in the "
        "summary requests: self-summary's is the live conversation plus one instruction, "
        "from-scratch's a new prompt holding the replaced span as a transcript, which no cache "
        "holds. Both pay the same output. *Cost on summary requests* is their share of the "
        "session's cost; the first agent request after each compaction also misses the cache "
        "(a rewritten context), which is counted with the agent requests, not there. The 16k "
        "window is what makes the dataset's 20k-50k-token cases compact several times each; "
        "there the prefix every compacted context shares with earlier requests (tools, system "
        "prompt, task: about 500 tokens) is under both caches' 1,024-token minimum. The rolling "
        "masking row re-masks one more output on most turns, which changes the prompt from that "
        "message on: the automatic cache still serves what comes before it, but no earlier "
        "breakpoint is a prefix of the new prompt, so at Anthropic it reads from the cache only "
        "on the turns where nothing new gets masked (a client that also put a breakpoint before "
        "the next output due to be masked would read the rest; that placement is not "
        f"modelled). {_lookback_note(corpora)} The stepped masking row is the cheapest because "
        "it asks no model and its compacted context is small; what masking loses in quality is the "
        "evaluator's subject (`summarizer eval`), not this section's. The lower bound keeps the "
        "whole history, so strategies that drop or mask content can cost less than it."
    )


def _uncached_breakdown(costs: Sequence[SessionCost], price: Price) -> str:
    """Where a strategy's uncached prompt tokens are, over all sessions."""
    prompt = sum(c.prompt_tokens for c in costs)
    uncached = prompt - sum(c.cached_tokens for c in costs)
    rewrite = sum(c.rewrite_uncached_tokens for c in costs)
    summary = sum(c.summary_uncached_tokens for c in costs)
    compactions = sum(c.compactions for c in costs)
    agents = sum(c.requests - c.summary_requests for c in costs)
    agent_prompt = prompt - sum(c.summary_prompt_tokens for c in costs)
    rest = uncached - rewrite - summary
    rounding = (
        f", up to {price.cache_step - 1} of them lost to the {price.cache_step}-token steps"
        if price.cache == "automatic"
        else ""
    )
    return (
        f"{_ratio(uncached, prompt):.1%} of self-summary's prompt tokens are not read from the "
        f"cache: {_ratio(rewrite, prompt):.1%} (of all its prompt tokens) in the first agent "
        f"request after each compaction (one every {_ratio(agents, compactions):.0f} agent "
        f"requests), a rewritten context no cache holds; {_ratio(summary, prompt):.1%} in the "
        "summary requests (the newest turn and the instruction); "
        f"{_ratio(rest, prompt):.1%} in the other agent requests, whose newest messages (the "
        f"last reply and its tool results) leave {_ratio(rest, agents - compactions):,.0f} "
        f"tokens uncached on average{rounding}, against a context of "
        f"{_ratio(agent_prompt, agents):,.0f} tokens on average."
    )


def floor_notes(corpora: Sequence[Corpus], models: Sequence[CacheModel]) -> str:
    """Why each missed floor is missed, from the measured figures (empty when all are met)."""
    lines: list[str] = []
    for corpus in corpora:
        for m in models:
            own = corpus.costs[m.model][SELF_SUMMARY]
            scratch = corpus.costs[m.model][FROM_SCRATCH]
            where = f"{corpus.name}, {m.model}"
            if compaction_ratio(corpus, m.model) > SELF_LIMIT:
                output = _mean(
                    [
                        c.compaction_input_equivalent - c.compaction_prompt_input_equivalent
                        for c in scratch
                    ]
                )
                total = _mean([c.compaction_input_equivalent for c in scratch])
                lines.append(
                    f"- {where}, summary requests: both strategies pay {output:,.0f} input-eq. "
                    f"tokens of summary output per session, {_ratio(output, total):.0%} of "
                    "from-scratch's summary requests, so even with free prompts self-summary "
                    f"could not go under {_ratio(output, total):.2f}×; on the prompts alone it "
                    f"costs {compaction_ratio(corpus, m.model, prompt_only=True):.2f}× "
                    "from-scratch's. The replaced spans are small in this window, the output "
                    "is not."
                )
            share = _mean([c.cache_share for c in own])
            if share < CACHE_SHARE_LIMIT:
                lines.append(f"- {where}, cache share: {_uncached_breakdown(own, m.price)}")
    if not lines:
        return ""
    return "Floors missed, and why:\n\n" + "\n".join(lines)


def _rounded(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in figures.items()}


def to_json(corpora: Sequence[Corpus]) -> dict[str, Any]:
    """Every session's figures, for ``RESULTS_FILE``."""
    return {
        corpus.name: {
            "window": corpus.window,
            "sessions": [
                {
                    "name": session.name,
                    "raw_tokens": raw,
                    "costs": {
                        model: {row: _rounded(asdict(costs[row][k])) for row in ROWS}
                        for model, costs in corpus.costs.items()
                    },
                }
                for k, (session, raw) in enumerate(
                    zip(corpus.sessions, corpus.raw_tokens, strict=True)
                )
            ],
        }
        for corpus in corpora
    }


def run(*, quick: bool, out_dir: Path) -> Section:
    """Replay both corpora and price them (quick: 2 dataset cases and one small long session)."""
    dataset = dataset_sessions(DATASET, limit=QUICK_DATASET_CASES if quick else None)
    plans = QUICK_LONG_SESSIONS if quick else LONG_SESSIONS
    long = [coding_session(turns, seed) for turns, seed in plans]
    corpora = [
        measure("Dataset cases", dataset, DATASET_WINDOW),
        measure("Long scripted sessions", long, LONG_WINDOW),
    ]
    models = cache_models()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULTS_FILE).write_text(json.dumps(to_json(corpora), separators=(",", ":")) + "\n")
    return Section(
        title=TITLE,
        command=COMMAND,
        body=report(corpora, models),
        floors=floors(corpora, models),
        files=[RESULTS_FILE],
    )


def main() -> None:
    """Command line: print the section body and its floors."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 dataset cases, 1 small session")
    parser.add_argument("--out-dir", type=Path, default=None, help=f"where {RESULTS_FILE} goes")
    args = parser.parse_args()
    started = time.perf_counter()
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-cache-"))
    section = run(quick=args.quick, out_dir=out_dir)
    print_section(section)
    print(f"\nper-session figures: {out_dir / RESULTS_FILE}")
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
