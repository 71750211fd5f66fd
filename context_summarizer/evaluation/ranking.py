"""Whether a reward ranks a case's candidate summaries as gold recall does. Pure.

Within one case every candidate answers the same summary request, so ranks compare like with
like: ``spearman`` is the rank correlation of two scores over a case's candidates (average ranks
for ties; None when either score is constant, as the correlation is undefined then), and
``pairwise_agreement`` counts the candidate pairs both scores order the same way (pairs either
score ties are left out). ``rank_cases`` summarises many cases: the mean per-case correlation
over the cases where it is defined, with how many those are, and the share of agreeing pairs
over all cases.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def average_ranks(values: Sequence[float]) -> list[float]:
    """1-based ranks of ``values``, tied values sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for position in range(start, end + 1):
            ranks[order[position]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rank correlation of ``x`` and ``y`` (Pearson's over average ranks); None
    when there are fewer than two pairs or either side is constant."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} values against {len(y)}: one each expected")
    if len(x) < 2:
        return None
    rx, ry = average_ranks(x), average_ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


def pairwise_agreement(x: Sequence[float], y: Sequence[float]) -> tuple[int, int]:
    """``(agreeing, counted)``: of the pairs neither side ties, how many both order alike."""
    if len(x) != len(y):
        raise ValueError(f"{len(x)} values against {len(y)}: one each expected")
    agreeing = counted = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 or dy == 0:
                continue
            counted += 1
            agreeing += (dx > 0) == (dy > 0)
    return agreeing, counted


@dataclass(frozen=True)
class Scored:
    """One candidate's scores (None: not measured, e.g. a case without gold facts)."""

    reward: float
    facts: float
    """The reward's facts part alone."""
    summary_gold_recall: float | None
    gold_recall: float | None


@dataclass(frozen=True)
class CaseRanking:
    """How a case's candidates rank under the reward and under gold recall."""

    case_id: str
    candidates: int
    reward_min: float
    reward_max: float
    rho_summary: float | None
    """Reward vs ``summary_gold_recall`` (None: undefined for this case)."""
    rho_gold: float | None
    """Reward vs ``gold_recall``."""
    rho_facts: float | None
    """The reward's facts part vs ``summary_gold_recall``."""
    agreeing: int
    pairs: int
    """Candidate pairs ordered by both reward and ``summary_gold_recall`` (no tie in either)."""

    @property
    def spread(self) -> float:
        """``reward_max - reward_min``."""
        return self.reward_max - self.reward_min


def _paired(xs: Sequence[float], ys: Sequence[float | None]) -> tuple[list[float], list[float]]:
    kept = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    return [x for x, _ in kept], [y for _, y in kept]


def rank_case(case_id: str, scored: Sequence[Scored]) -> CaseRanking:
    """The ranking figures of one case's candidates (at least one)."""
    rewards = [s.reward for s in scored]
    summary_x, summary_y = _paired(rewards, [s.summary_gold_recall for s in scored])
    facts_x, facts_y = _paired([s.facts for s in scored], [s.summary_gold_recall for s in scored])
    agreeing, pairs = pairwise_agreement(summary_x, summary_y)
    return CaseRanking(
        case_id=case_id,
        candidates=len(scored),
        reward_min=min(rewards),
        reward_max=max(rewards),
        rho_summary=spearman(summary_x, summary_y),
        rho_gold=spearman(*_paired(rewards, [s.gold_recall for s in scored])),
        rho_facts=spearman(facts_x, facts_y),
        agreeing=agreeing,
        pairs=pairs,
    )


@dataclass(frozen=True)
class Mean:
    """A mean over the cases where a figure is defined, and how many those are."""

    value: float | None
    cases: int

    def text(self) -> str:
        """``0.62 (4 cases)``, or ``n/a (0 cases)``."""
        shown = "n/a" if self.value is None else f"{self.value:.2f}"
        return f"{shown} ({self.cases} case{'s' if self.cases != 1 else ''})"


def mean_of(values: Sequence[float | None]) -> Mean:
    """The mean of the defined ``values``."""
    defined = [v for v in values if v is not None]
    return Mean(statistics.fmean(defined) if defined else None, len(defined))


@dataclass(frozen=True)
class RankingSummary:
    """The cases' rankings, and their summary across cases."""

    cases: list[CaseRanking]
    candidates: int
    mean_spread: float | None
    rho_summary: Mean
    rho_gold: Mean
    rho_facts: Mean
    agreeing: int
    pairs: int

    @property
    def agreement(self) -> float | None:
        """The share of agreeing pairs (None: no pair without a tie)."""
        return self.agreeing / self.pairs if self.pairs else None


def rank_cases(cases: Sequence[tuple[str, Sequence[Scored]]]) -> RankingSummary:
    """Rank each case's candidates (cases without one are left out) and summarise."""
    ranked = [rank_case(case_id, scored) for case_id, scored in cases if scored]
    return RankingSummary(
        cases=ranked,
        candidates=sum(c.candidates for c in ranked),
        mean_spread=statistics.fmean(c.spread for c in ranked) if ranked else None,
        rho_summary=mean_of([c.rho_summary for c in ranked]),
        rho_gold=mean_of([c.rho_gold for c in ranked]),
        rho_facts=mean_of([c.rho_facts for c in ranked]),
        agreeing=sum(c.agreeing for c in ranked),
        pairs=sum(c.pairs for c in ranked),
    )
