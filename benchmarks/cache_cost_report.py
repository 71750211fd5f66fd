"""The cache-cost section's tables, floors and notes, and its per-session JSON."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from context_summarizer.evaluation.pricing import Price

from .cache_accounting import SessionCost
from .cache_cost_measure import (
    LOWER_BOUND,
    ROWS,
    CacheModel,
    Corpus,
    compaction_ratio,
    mean,
    quotient,
    session_ratio,
)
from .cache_replay_session import (
    FROM_SCRATCH,
    MASK_KEEP_TURNS,
    MASKING_ROLLING,
    NO_COMPACTION,
    SELF_SUMMARY,
    SUMMARY_TOKENS,
    replay_budget,
)
from .results import Floor, markdown_table

SELF_LIMIT = 0.5
"""Floor: self-summary's summary requests cost at most this share of from-scratch's."""
CACHE_SHARE_LIMIT = 0.9
"""Floor: at least this share of self-summary's prompt tokens come from the cache."""


def _tokens(value: float) -> str:
    return f"{value:,.0f}"


def _compactions_cell(row: str, costs: Sequence[SessionCost]) -> str:
    if row == LOWER_BOUND:
        return "-"
    cell = f"{mean([c.compactions for c in costs]):.1f}"
    if row == MASKING_ROLLING:
        narrowed = sum(c.narrowed for c in costs) / max(1, sum(c.requests for c in costs))
        cell += f" (M < {MASK_KEEP_TURNS} on {narrowed:.0%} of requests)"
    return cell


def strategy_table(corpus: Corpus, model: CacheModel) -> str:
    """One row per strategy: means per session under ``model``."""
    rows: list[list[str]] = []
    by_row = corpus.costs[model.model]
    bound = mean([c.input_equivalent for c in by_row[LOWER_BOUND]])
    for row in ROWS:
        costs = by_row[row]
        if row == NO_COMPACTION and not all(c.fits for c in costs):
            fitting = sum(c.fits for c in costs)
            note = f"n/a (does not fit: {len(costs) - fitting} of {len(costs)} sessions)"
            rows.append([row, note, "", "", "", ""])
            continue
        billed = mean([c.input_equivalent for c in costs])
        summaries = row in (SELF_SUMMARY, FROM_SCRATCH)
        rows.append(
            [
                row,
                _tokens(billed),
                f"{quotient(billed, bound):.2f}×",
                f"{mean([c.cache_share for c in costs]):.1%}",
                f"{mean([c.compaction_share for c in costs]):.1%}" if summaries else "-",
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
                    _tokens(mean([c.compaction_input_equivalent for c in own])),
                    _tokens(mean([c.compaction_input_equivalent for c in other])),
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
            share = mean(shares)
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
        f"tokens (mean {mean(raw):,.0f}), "
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


def report(corpora: Sequence[Corpus], models: Sequence[CacheModel], *, docstring: str) -> str:
    """The section body, opening with the method: ``docstring`` (``benchmarks.cache_cost``'s)
    without its title line and its command line."""
    parts = [_markdown(docstring.split("\n\n", 1)[1].rsplit("\n\n", 1)[0])]
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
        f"{quotient(uncached, prompt):.1%} of self-summary's prompt tokens are not read from the "
        f"cache: {quotient(rewrite, prompt):.1%} (of all its prompt tokens) in the first agent "
        f"request after each compaction (one every {quotient(agents, compactions):.0f} agent "
        f"requests), a rewritten context no cache holds; {quotient(summary, prompt):.1%} in the "
        "summary requests (the newest turn and the instruction); "
        f"{quotient(rest, prompt):.1%} in the other agent requests, whose newest messages (the "
        f"last reply and its tool results) leave {quotient(rest, agents - compactions):,.0f} "
        f"tokens uncached on average{rounding}, against a context of "
        f"{quotient(agent_prompt, agents):,.0f} tokens on average."
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
                output = mean(
                    [
                        c.compaction_input_equivalent - c.compaction_prompt_input_equivalent
                        for c in scratch
                    ]
                )
                total = mean([c.compaction_input_equivalent for c in scratch])
                lines.append(
                    f"- {where}, summary requests: both strategies pay {output:,.0f} input-eq. "
                    f"tokens of summary output per session, {quotient(output, total):.0%} of "
                    "from-scratch's summary requests, so even with free prompts self-summary "
                    f"could not go under {quotient(output, total):.2f}×; on the prompts alone it "
                    f"costs {compaction_ratio(corpus, m.model, prompt_only=True):.2f}× "
                    "from-scratch's. The replaced spans are small in this window, the output "
                    "is not."
                )
            share = mean([c.cache_share for c in own])
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
