"""How much of what matters a compacted context keeps, and the per-strategy aggregates. Pure.

A fact is *kept* when the text of the compacted messages (every message, as ``message_text``
renders it: the kept prefix, the summary with its ledger, the verbatim tail) mentions it. Matching
is ``facts.mentions``: case-, whitespace- and path-separator-insensitive, with the fact's aliases
and the error/quantity leniencies of its kind. On top of that a fact also matches when the only
difference is quoting (``KeyError: 'x'`` against ``KeyError: "x"`` or ``KeyError: x``).

- ``gold_fact_recall``: the dataset's facts, with the ones missed (id, kind, text);
- ``extracted_fact_recall``: the facts ``facts.extract_facts`` finds in what the strategy removed
  or rewrote, and how many are still mentioned. The ledger is built by the same extractor, so
  this measure favours ledger strategies: it is reported apart from gold recall for that reason;
- ``compression_ratio``: tokens after over tokens before (lower is more compressed);
- ``aggregate``: per-strategy means (rows with errors counted, never averaged in), and missed
  gold facts counted by kind, and the summaries' verdicts counted; with ``--repeat``, each run's
  mean gold recall too (``spread`` summarises them). Costs only when a priced model made calls
  (``priced_calls``): an offline run has no money to report.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, get_args

from pydantic import BaseModel, Field

from ..core.facts import FactKind, extract_facts, mentions, normalize_summary, score_summary
from ..core.messages import message_digest, message_text
from .dataset import GoldFact
from .pricing import Price, RequestTokens, price_for, request_cost, total_cost
from .records import FactRecall, MissedFact, ResultRow

_FACT_KINDS: frozenset[str] = frozenset(get_args(FactKind))
_QUOTES = re.compile("[\"'`\u2018\u2019\u201c\u201d\u00ab\u00bb]")


def context_text(messages: Iterable[Mapping[str, Any]]) -> str:
    """Everything a model reads in ``messages``, one message per paragraph."""
    return "\n\n".join(message_text(m) for m in messages)


def _unquote(text: str) -> str:
    return _QUOTES.sub("", text)


class _Haystack:
    """A context normalised once, with and without quote characters."""

    def __init__(self, text: str) -> None:
        self.quoted = normalize_summary(text)
        self.unquoted = normalize_summary(_unquote(text))

    def mentions(self, text: str, aliases: Sequence[str] = (), kind: str | None = None) -> bool:
        fact_kind: FactKind | None = kind if kind in _FACT_KINDS else None  # type: ignore[assignment]
        if mentions(self.quoted, text, aliases, kind=fact_kind):
            return True
        bare = _unquote(text)
        if not bare.strip():
            return False
        return mentions(self.unquoted, bare, [_unquote(a) for a in aliases], kind=fact_kind)


def fact_kept(text: str, fact: GoldFact) -> bool:
    """Whether ``text`` mentions ``fact`` (or one of its aliases)."""
    return _Haystack(text).mentions(fact.text, fact.aliases, fact.kind)


def gold_fact_recall(text: str, facts: Sequence[GoldFact]) -> FactRecall:
    """The share of ``facts`` that ``text`` mentions, and the ones it misses, in fact order."""
    haystack = _Haystack(text)
    missed = [
        MissedFact(id=fact.id, kind=fact.kind, text=fact.text)
        for fact in facts
        if not haystack.mentions(fact.text, fact.aliases, fact.kind)
    ]
    return _recall(len(facts), missed)


def _recall(total: int, missed: list[MissedFact]) -> FactRecall:
    kept = total - len(missed)
    return FactRecall(total=total, kept=kept, recall=kept / total if total else None, missed=missed)


def compacted_span(
    original: Sequence[Mapping[str, Any]], compacted: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The original messages that do not reach the model unchanged: removed or rewritten."""
    sent = {message_digest(m) for m in compacted}
    return [m for m in original if message_digest(m) not in sent]


def extracted_fact_recall(
    original: Sequence[Mapping[str, Any]], compacted: Sequence[Mapping[str, Any]]
) -> FactRecall:
    """Of the facts the extractor finds in ``compacted_span``, the share still mentioned."""
    facts = extract_facts(compacted_span(original, compacted))
    text = context_text(compacted)
    score = score_summary(text, facts)
    missed = {fact.key for fact in score.missed}
    # A second chance for quoting differences, as for gold facts.
    haystack = _Haystack(text)
    still = [f for f in facts if f.key in missed and not haystack.mentions(f.text, (), f.kind)]
    return _recall(len(facts), [MissedFact(kind=f.kind, text=f.text) for f in still])


def compression_ratio(tokens_before: int, tokens_after: int) -> float:
    """``tokens_after / tokens_before`` (1.0 for an empty request)."""
    return tokens_after / tokens_before if tokens_before > 0 else 1.0


def mean(values: Iterable[float | None]) -> float | None:
    """The mean of the values that are not None, or None when there are none."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def row_cost(row: ResultRow, prices: Mapping[str, Price]) -> float | None:
    """Estimated US dollars of a row: its model calls plus the next request with the compacted
    context (output not counted). None when a model involved has no price or the row failed."""
    if row.status != "ok" or row.tokens_after is None:
        return None
    requests: list[tuple[str, RequestTokens]] = [
        (
            call.model,
            RequestTokens(
                prompt_tokens=call.prompt_tokens,
                reusable_prefix_tokens=call.reusable_prefix_tokens,
                output_tokens=call.output_tokens,
            ),
        )
        for call in row.calls
    ]
    requests.append(
        (
            row.agent_model,
            RequestTokens(
                prompt_tokens=row.tokens_after,
                reusable_prefix_tokens=row.next_reusable_prefix_tokens,
            ),
        )
    )
    costs = []
    for model, tokens in requests:
        price = price_for(model, prices)
        if price is None:
            return None
        costs.append(request_cost(price, tokens))
    return total_cost(costs).usd


class StrategyAggregate(BaseModel):
    """One strategy's results over every case it ran on."""

    label: str
    """The strategy name, or ``given:<name>`` for a given summary."""
    rows: int
    errors: int
    infeasible: int = 0
    """Rows where what the strategy must keep does not fit the budget."""
    met_budget: int
    """Rows whose compacted context fits the budget."""
    gold_recall: float | None
    recoverable_recall: float | None = None
    """Mean share of the missed gold facts one recall search gives back (``recoverable``), over
    the rows that missed some."""
    extracted_recall: float | None
    compression_ratio: float | None
    tokens_after: float | None
    summary_tokens: float | None
    cost_usd: float | None
    """Mean estimated cost per case (rows without a price left out); None unless a model with a
    known price made calls in the run (``priced_calls``)."""
    latency_s: float | None
    probe_accuracy: float | None = None
    probe_accuracy_full: float | None = None
    probe_gap: float | None = None
    probe_accuracy_recall: float | None = None
    missed_by_kind: dict[str, int] = Field(default_factory=dict)
    """Missed gold facts, counted by kind over every case."""
    verdicts: dict[str, int] = Field(default_factory=dict)
    """What became of the summaries the model wrote (``accepted``, ``repaired``, ``replaced``),
    counted over every case; empty when the strategy wrote none."""
    cases: int = 0
    """Distinct cases among the rows (``rows`` is cases x runs with ``--repeat``)."""
    runs: int = 1
    """Runs of the strategy over the cases (``--repeat``; 1 for an offline strategy)."""
    gold_recall_runs: list[float] = Field(default_factory=list)
    """Each run's mean gold recall, in run order (runs without one left out)."""


class Spread(BaseModel):
    """How a measure varied across runs."""

    runs: int
    min: float
    median: float
    max: float
    mean: float
    sd: float
    """Sample standard deviation (0 for one run)."""


def spread(values: Sequence[float]) -> Spread | None:
    """Min, median, max, mean and standard deviation of ``values``; None when empty."""
    if not values:
        return None
    return Spread(
        runs=len(values),
        min=min(values),
        median=statistics.median(values),
        max=max(values),
        mean=statistics.fmean(values),
        sd=statistics.stdev(values) if len(values) > 1 else 0.0,
    )


def priced_calls(rows: Iterable[ResultRow], prices: Mapping[str, Price] | None) -> bool:
    """Whether some row's model calls went to a model ``prices`` has a price for: costs are
    reported only then."""
    if prices is None:
        return False
    models = {call.model for row in rows for call in row.calls}
    return any(price_for(model, prices) is not None for model in models)


def missed_by_kind(rows: Iterable[ResultRow]) -> dict[str, int]:
    """Missed gold facts counted by kind, kinds sorted by name."""
    counts: Counter[str] = Counter()
    for row in rows:
        if row.status == "ok" and row.gold is not None:
            counts.update(fact.kind for fact in row.gold.missed)
    return dict(sorted(counts.items()))


def verdict_counts(rows: Iterable[ResultRow]) -> dict[str, int]:
    """The verdicts of the rows that succeeded, counted, verdicts sorted by name."""
    counts: Counter[str] = Counter()
    for row in rows:
        if row.status == "ok":
            counts.update(row.verdicts)
    return dict(sorted(counts.items()))


def aggregate(
    rows: Iterable[ResultRow], prices: Mapping[str, Price] | None = None
) -> list[StrategyAggregate]:
    """Per-strategy means over ``rows``, in order of first appearance.

    Means are taken over the rows that succeeded (errors are counted, never averaged in) and,
    for each metric, over the rows where it is defined: a case without gold facts has no gold
    recall, a run without probes no probe accuracy. Costs need ``prices`` and a priced model
    that made calls (``priced_calls``).
    """
    rows = list(rows)
    priced = priced_calls(rows, prices)
    groups: dict[str, list[ResultRow]] = {}
    for row in rows:
        groups.setdefault(row.label, []).append(row)
    out: list[StrategyAggregate] = []
    for label, group in groups.items():
        ok = [row for row in group if row.status == "ok"]
        costs = [row_cost(row, prices) for row in ok] if priced and prices is not None else []
        repeats = sorted({row.repeat for row in group})
        by_run = [
            mean(row.gold.recall if row.gold else None for row in ok if row.repeat == repeat)
            for repeat in repeats
        ]
        out.append(
            StrategyAggregate(
                label=label,
                rows=len(group),
                errors=sum(1 for row in group if row.status == "error"),
                infeasible=sum(1 for row in group if row.status == "infeasible"),
                met_budget=sum(1 for row in ok if row.met_budget),
                gold_recall=mean(row.gold.recall if row.gold else None for row in ok),
                recoverable_recall=mean(
                    row.recoverable.recall if row.recoverable else None for row in ok
                ),
                extracted_recall=mean(
                    row.extracted.recall if row.extracted else None for row in ok
                ),
                compression_ratio=mean(row.compression_ratio for row in ok),
                tokens_after=mean(row.tokens_after for row in ok),
                summary_tokens=mean(row.summary_tokens for row in ok),
                cost_usd=mean(costs),
                latency_s=mean(row.latency_s for row in ok),
                probe_accuracy=mean(row.probe_accuracy for row in ok),
                probe_accuracy_full=mean(row.probe_accuracy_full for row in ok),
                probe_gap=mean(row.probe_gap for row in ok),
                probe_accuracy_recall=mean(row.probe_accuracy_recall for row in ok),
                missed_by_kind=missed_by_kind(ok),
                verdicts=verdict_counts(ok),
                cases=len({row.case_id for row in group}),
                runs=len(repeats),
                gold_recall_runs=[recall for recall in by_run if recall is not None],
            )
        )
    return out
