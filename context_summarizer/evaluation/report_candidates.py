"""How ``--candidates`` is reported: per case the reward's spread, overall whether the reward
ranks the candidates as gold recall does (``ranking``). The same lines go to the terminal and,
as a short section, to ``report.md``."""

from __future__ import annotations

from .ranking import RankingSummary
from .report_tables import md_text


def _share(agreeing: int, pairs: int) -> str:
    if not pairs:
        return "n/a (no pair without a tie)"
    return f"{agreeing / pairs:.0%} ({agreeing} of {pairs} pairs)"


def overall_lines(ranking: RankingSummary) -> list[str]:
    """The figures across cases, one per line."""
    spread = "n/a" if ranking.mean_spread is None else f"{ranking.mean_spread:.3f}"
    return [
        f"{ranking.candidates} candidates of {len(ranking.cases)} cases; "
        f"mean reward spread {spread}",
        "mean per-case Spearman, reward vs summary gold recall: " + ranking.rho_summary.text(),
        "mean per-case Spearman, reward vs gold recall: " + ranking.rho_gold.text(),
        "mean per-case Spearman, facts part vs summary gold recall: " + ranking.rho_facts.text(),
        "pairs ordered alike by reward and summary gold recall: "
        + _share(ranking.agreeing, ranking.pairs),
    ]


def case_lines(ranking: RankingSummary) -> list[str]:
    """One line per case: its candidates and their reward range."""
    return [
        f"{case.case_id}: {case.candidates} candidates, reward "
        f"{case.reward_min:.3f}..{case.reward_max:.3f}"
        for case in ranking.cases
    ]


def candidate_summary_lines(ranking: RankingSummary, notes: list[str]) -> list[str]:
    """The terminal summary of the candidates."""
    lines = ["Candidate summaries (--candidates):"]
    lines += [f"  {line}" for line in case_lines(ranking)]
    lines += [f"  skipped {note}" for note in notes]
    lines += [f"  {line}" for line in overall_lines(ranking)]
    return lines


def candidates_markdown(ranking: RankingSummary) -> str:
    """``report.md``'s section on the candidates."""
    rows = [
        f"| {md_text(case.case_id)} | {case.candidates} | {case.reward_min:.3f} | "
        f"{case.reward_max:.3f} | {_rho(case.rho_summary)} | {_rho(case.rho_gold)} |"
        for case in ranking.cases
    ]
    return "\n".join(
        [
            "## Candidate summaries",
            "",
            "Several answers to each case's first summary request: does the reward rank them "
            "as gold recall does? (Spearman per case, averaged over the cases where both vary; "
            "summary gold recall counts only the gold facts the context misses without the "
            "run's summary message, text and ledger.)",
            "",
            *(f"- {md_text(line)}" for line in overall_lines(ranking)),
            "",
            "| case | candidates | reward min | reward max | Spearman vs summary gold recall "
            "| Spearman vs gold recall |",
            "|---|---:|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )


def _rho(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
