"""The candidates' rank statistics (``evaluation.ranking``) against hand-computed values."""

from __future__ import annotations

import math

import pytest

from context_summarizer.evaluation.ranking import (
    Scored,
    average_ranks,
    pairwise_agreement,
    rank_cases,
    spearman,
)


def test_tied_values_share_the_mean_of_their_ranks() -> None:
    assert average_ranks([10, 20, 20, 30]) == [1.0, 2.5, 2.5, 4.0]
    assert average_ranks([3, 1, 3, 3]) == [3.0, 1.0, 3.0, 3.0]
    assert average_ranks([]) == []


def test_spearman_by_hand() -> None:
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # no ties: 1 - 6 * sum(d^2) / (n (n^2 - 1)) with d = (-1, 1, 0): 1 - 12 / 24
    assert spearman([1, 2, 3], [2, 1, 3]) == pytest.approx(0.5)
    # ties: ranks (1, 2.5, 2.5, 4) and (1, 3, 2, 4): 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(4.5 / math.sqrt(22.5))


def test_spearman_is_undefined_for_a_constant_side_or_a_single_pair() -> None:
    assert spearman([0.5, 0.5, 0.5], [1, 2, 3]) is None
    assert spearman([1, 2, 3], [0.2, 0.2, 0.2]) is None
    assert spearman([1], [1]) is None
    with pytest.raises(ValueError, match="one each"):
        spearman([1, 2], [1])


def test_pairwise_agreement_leaves_out_ties() -> None:
    # (0,1) disagree; (0,2) and (1,2) agree
    assert pairwise_agreement([1, 2, 3], [2, 1, 3]) == (2, 3)
    # the pair tied in x is left out; the other five agree
    assert pairwise_agreement([1, 2, 2, 3], [1, 3, 2, 4]) == (5, 5)
    assert pairwise_agreement([1, 1], [1, 2]) == (0, 0)


def test_rank_cases_averages_over_the_cases_where_both_vary() -> None:
    def scored(reward: float, own: float | None, gold: float | None = None) -> Scored:
        return Scored(reward=reward, facts=reward, summary_gold_recall=own, gold_recall=gold)

    summary = rank_cases(
        [
            ("a", [scored(0.9, 1.0, 1.0), scored(0.5, 0.5, 0.5), scored(0.1, 0.0, 0.5)]),
            ("b", [scored(0.2, 0.5), scored(0.6, 0.5)]),  # summary gold recall constant
            ("c", [scored(0.3, 0.0), scored(0.6, 1.0), scored(0.4, None)]),  # one unmeasured
            ("d", []),  # no candidate: left out
        ]
    )
    assert [case.case_id for case in summary.cases] == ["a", "b", "c"]
    assert summary.candidates == 8
    assert summary.mean_spread == pytest.approx((0.8 + 0.4 + 0.3) / 3)
    assert summary.rho_summary.value == pytest.approx(1.0) and summary.rho_summary.cases == 2
    # gold recall of a: ranks (3, 1.5, 1.5) against reward's (3, 2, 1): sqrt(3) / 2
    assert summary.rho_gold.value == pytest.approx(math.sqrt(3) / 2)
    assert summary.rho_gold.cases == 1
    assert (summary.agreeing, summary.pairs) == (4, 4) and summary.agreement == 1.0
    assert summary.cases[1].rho_summary is None and summary.cases[1].pairs == 0
    assert summary.rho_summary.text() == "1.00 (2 cases)"
    empty = rank_cases([])
    assert empty.mean_spread is None and empty.agreement is None
    assert empty.rho_gold.text() == "n/a (0 cases)"
