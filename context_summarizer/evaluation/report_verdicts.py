"""One plain line per strategy that opens every report: what it kept, at what size and cost.

Each line is built from the strategy's aggregate and says only what was measured: gold recall
and compression when cases were scored, how many cases were not (errors, infeasible at the
budget) or ended over it, how far gold recall moved across runs when the strategy ran more than
once (``--repeat``), what became of the model's summaries when it wrote any, probe accuracy when
probes ran, the estimated cost when a priced model made calls and every model involved has a
price. The strategy with the
best gold recall is marked (ties: the lower tokens after/before; all still tied are marked), when
more than one strategy has a gold recall to compare.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .metrics import StrategyAggregate, spread

_TOLERANCE = 1e-9
"""Recalls and ratios closer than this are equal (means of the same fractions in another order)."""


@dataclass(frozen=True)
class Verdict:
    """A strategy's one-line verdict."""

    label: str
    text: str
    best: bool

    @property
    def line(self) -> str:
        """``label: text`` on one line."""
        return f"{self.label}: {self.text}"


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def best_labels(aggregates: Sequence[StrategyAggregate]) -> set[str]:
    """The strategies with the best gold recall, ties broken by the lower tokens after/before;
    empty unless at least two strategies have a gold recall."""
    scored = [a for a in aggregates if a.gold_recall is not None]
    if len(scored) < 2:
        return set()
    top = max(a.gold_recall for a in scored if a.gold_recall is not None)
    leaders = [a for a in scored if a.gold_recall is not None and a.gold_recall >= top - _TOLERANCE]
    ratios = [a.compression_ratio for a in leaders if a.compression_ratio is not None]
    if ratios:
        least = min(ratios)
        leaders = [
            a
            for a in leaders
            if a.compression_ratio is not None and a.compression_ratio <= least + _TOLERANCE
        ]
    return {a.label for a in leaders}


def _size(a: StrategyAggregate) -> str:
    ratio = f"{a.compression_ratio:.2f}x tokens" if a.compression_ratio is not None else None
    if a.gold_recall is not None:
        kept = f"kept {a.gold_recall:.1%} of gold facts"
        return f"{kept} at {ratio}" if ratio else kept
    return f"{ratio} (no gold facts to score)" if ratio else "no gold facts to score"


def _coverage(a: StrategyAggregate, scored: int, same_cases: bool) -> str | None:
    failed = [
        *([_plural(a.errors, "error", "errors")] if a.errors else []),
        *([f"{a.infeasible} infeasible at this budget"] if a.infeasible else []),
    ]
    cases = a.cases or a.rows
    if failed:
        counted = _plural(a.rows, "case", "cases") if a.runs == 1 else f"{a.rows} rows"
        return f"{scored} of {counted} scored ({', '.join(failed)})"
    return None if same_cases else _plural(cases, "case", "cases")


def _runs(a: StrategyAggregate) -> str | None:
    values = spread(a.gold_recall_runs) if a.runs > 1 else None
    if values is None:
        return None
    return (
        f"gold recall {values.min:.1%} to {values.max:.1%} over {values.runs} runs "
        f"(median {values.median:.1%})"
    )


def _summaries(a: StrategyAggregate) -> str | None:
    written = sum(a.verdicts.values())
    if not written:
        return None
    noun = "summary" if written == 1 else "summaries"
    return (
        f"{a.verdicts.get('repaired', 0)} of {written} {noun} repaired, "
        f"{a.verdicts.get('replaced', 0)} replaced"
    )


def _probes(a: StrategyAggregate) -> str | None:
    if a.probe_accuracy is None:
        return None
    full = (
        f" ({a.probe_accuracy_full:.0%} with the full context)"
        if a.probe_accuracy_full is not None
        else ""
    )
    return f"answered {a.probe_accuracy:.0%} of probes{full}"


def verdict(a: StrategyAggregate, *, best: bool = False, same_cases: bool = True) -> Verdict:
    """``a``'s verdict; ``same_cases`` False names its case count (strategies ran on different
    numbers of cases, so their figures are not over the same cases)."""
    scored = a.rows - a.errors - a.infeasible
    clauses: list[str | None]
    if scored <= 0:
        failed = [
            *([_plural(a.errors, "error", "errors")] if a.errors else []),
            *([f"{a.infeasible} infeasible at this budget"] if a.infeasible else []),
        ]
        clauses = [f"no case scored ({', '.join(failed) or 'no rows'})"]
    else:
        over = scored - a.met_budget
        clauses = [
            _size(a),
            _coverage(a, scored, same_cases),
            f"{over} over budget" if over > 0 else None,
            _runs(a),
            _summaries(a),
            _probes(a),
            f"${a.cost_usd:.4f} per case (estimated)" if a.cost_usd is not None else None,
        ]
    if best:
        clauses.append("best recall")
    return Verdict(label=a.label, text="; ".join(c for c in clauses if c), best=best)


def verdicts(aggregates: Sequence[StrategyAggregate]) -> list[Verdict]:
    """One verdict per strategy, in the aggregates' order."""
    best = best_labels(aggregates)
    same_cases = len({a.cases or a.rows for a in aggregates}) <= 1
    return [verdict(a, best=a.label in best, same_cases=same_cases) for a in aggregates]
