"""The files of ``--candidates`` (``candidates``): ``candidate_requests.jsonl``, one
``CandidateRequest`` per case, and ``candidates.jsonl``, one ``CandidateLine`` per candidate.

Both are appended and flushed line by line; reading keeps the last line per key (case, or case
and index), skipping lines an interrupt cut short. ``rank_stored`` ranks what a directory holds.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from ..core.errors import ConfigurationError
from ..core.summary_records import SummaryRecord
from .dataset import Case
from .ranking import RankingSummary, Scored, rank_cases

logger = logging.getLogger("summarizer.eval")

CANDIDATES_FILE = "candidates.jsonl"
REQUESTS_FILE = "candidate_requests.jsonl"

Model = TypeVar("Model", bound=BaseModel)


class CandidateLine(BaseModel):
    """One candidate summary, as ``candidates.jsonl`` keeps it."""

    case_id: str
    index: int
    temperature: float
    seed: int
    model: str
    request: dict[str, Any]
    """The summary request as the engine sent it (without ``temperature`` and ``seed``)."""
    summary: str | None = None
    finish_reason: str | None = None
    tokens: int = 0
    """The summary's tokens, as the reward counts them."""
    reward: float | None = None
    parts: dict[str, Any] | None = None
    """``Reward.parts()``: facts share, facts named, brevity, problem, ..."""
    gold_recall: float | None = None
    summary_gold_recall: float | None = None
    error: str | None = None
    """Why the call failed (the next run asks again)."""


class CandidateRequest(BaseModel):
    """A case's summary request and what scoring its answers needs."""

    case_id: str
    request: dict[str, Any]
    record: SummaryRecord
    """The engine's record of the run the request summarizes: its facts and cap."""
    messages: list[dict[str, Any]]
    """The engine's compacted context."""
    position: int
    """Where the run's summary message is in ``messages``."""


def read_jsonl(path: Path, model: type[Model], key: Callable[[Model], Any]) -> dict[Any, Model]:
    """The last line per key of a JSONL file of ``model``; unreadable lines skipped."""
    found: dict[Any, Model] = {}
    if not path.exists():
        return found
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            try:
                item = model.model_validate(json.loads(text))
            except ValueError:
                logger.warning("%s:%d: unreadable line skipped", path, number)
                continue
            found[key(item)] = item
    return found


def read_candidates(out: Path) -> dict[tuple[str, int], CandidateLine]:
    """The candidates of ``out``: the last line per ``(case_id, index)``."""
    return read_jsonl(out / CANDIDATES_FILE, CandidateLine, lambda c: (c.case_id, c.index))


def check_candidates(out: Path, temperature: float, model: str | None) -> None:
    """``ConfigurationError`` when ``out`` holds candidates of another temperature or model."""
    for line in read_candidates(out).values():
        if line.temperature != temperature or (model is not None and line.model != model):
            raise ConfigurationError(
                f"{out / CANDIDATES_FILE} holds candidates at temperature {line.temperature} "
                f"of {line.model!r}; use a new --out directory, or the same settings to resume"
            )


def scored(line: CandidateLine) -> Scored | None:
    """A line's scores for ranking (None: it failed or was not scored)."""
    if line.error is not None or line.reward is None or line.parts is None:
        return None
    return Scored(
        reward=line.reward,
        facts=float(line.parts.get("facts", 0.0)),
        summary_gold_recall=line.summary_gold_recall,
        gold_recall=line.gold_recall,
    )


def rank_stored(out: Path, cases: Iterable[Case], count: int) -> RankingSummary:
    """The ranking of the candidates in ``out`` with index below ``count``, in case order."""
    stored = read_candidates(out)
    per_case: list[tuple[str, Sequence[Scored]]] = []
    for case in cases:
        found = [stored.get((case.id, index)) for index in range(count)]
        per_case.append((case.id, [s for line in found if line and (s := scored(line))]))
    return rank_cases(per_case)
