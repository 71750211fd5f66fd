"""One summary attempt's answer, judged: the problems the online checks find, the share of the
run's facts it names, and what a stricter retry may ask of it."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from .facts import Fact, score_summary
from .results import SummaryOutcome
from .summary_checks import Problem, SummarySource, summary_problem
from .tokens import TokenCounter

logger = logging.getLogger("summarizer")


@dataclass(frozen=True)
class Answer:
    """One attempt's answer, judged."""

    text: str | None
    problem: Problem | None
    score: float | None
    outcome: SummaryOutcome
    tokens: int = 0

    def words_allowed(self, cap: int) -> int:
        """How many words fit in ``cap`` tokens, at this answer's tokens per word (1.5 when it
        has no words), with two fifths spare: a retry full of paths and identifiers needs more
        tokens per word than the answer before it."""
        words = len((self.text or "").split())
        per_word = max(1.0, self.tokens / words) if words and self.tokens else 1.5
        return max(1, int(0.6 * cap / per_word))

    def good(self, min_score: float) -> bool:
        """Whether the answer can be used: no problem, and a score of at least ``min_score``."""
        return self.problem is None and self.score is not None and self.score >= min_score


def facts_within(texts: Sequence[str], budget: int, counter: TokenCounter) -> list[str]:
    """The first of ``texts`` (the ledger's order: the most important first) whose tokens add up
    to at most ``budget``: a retry is never asked to name more than its cap can hold."""
    kept: list[str] = []
    for text in texts:
        budget -= counter.count_text(text) + 1
        if budget < 0:
            break
        kept.append(text)
    return kept


def warn_if_cap_ignored(outcome: SummaryOutcome, cap: int, cap_key: str) -> None:
    """Log a server that wrote past the summary's cap: it does not read the cap's field."""
    written = outcome.completion_tokens
    if written is not None and written > cap:
        logger.warning(
            "the upstream wrote a %d-token summary under a cap of %d in %r: it ignores that "
            "field; set summary_cap_field (SUMMARIZER_SUMMARY_CAP_FIELD) to the one it reads",
            written,
            cap,
            cap_key,
        )


def judge(
    outcome: SummaryOutcome,
    facts: Sequence[Fact],
    counter: TokenCounter,
    cap: int,
    source: SummarySource,
) -> Answer:
    """``outcome`` judged against the run's ``facts`` and the summary's ``cap``."""
    if outcome.error is not None:
        return Answer(None, "error", None, outcome)
    text = (outcome.text or "").strip()
    tokens = counter.count_text(text) if text else 0
    problem = summary_problem(
        text,
        outcome.finish_reason,
        max_tokens=cap,
        tokens=tokens,
        tool_called=outcome.tool_called,
        source=source,
    )
    score = score_summary(text, facts).recall if text else None
    return Answer(text or None, problem, score, outcome, tokens)
