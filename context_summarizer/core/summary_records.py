"""What one summary of a compaction was made of, for training: the summary request exactly as
sent, each answer the model wrote to it, how the online check judged it, and what became of
the run (``SummaryRecord``).

A compaction's runs each produce one record; the proxy keeps them only with ``--record``
(redacted like the recorded conversation), the evaluator writes them beside its rows, and
``summarizer export --format sft|preference|reward`` turns them into training data. Pure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .summary_checks import Problem

Attempt = Literal["first", "strict"]
"""The model's first answer, or its one stricter retry."""
RunVerdict = Literal["accepted", "repaired", "replaced"]
"""What became of the run's summary (``summaries.Verdict``)."""


class SummaryAttempt(BaseModel):
    """One summary request and the answer to it, judged by the online check."""

    model_config = ConfigDict(frozen=True)

    attempt: Attempt
    request: dict[str, Any]
    """The Chat Completions body as the engine sent it: ``model``, ``messages`` (the live prefix
    then the instruction, last), ``tools`` and ``tool_choice`` when the agent has tools, and the
    cap under its field."""
    summary: str | None
    """The model's answer, stripped; None when it wrote nothing or the call failed."""
    finish_reason: str | None = None
    problem: Problem | None = None
    """What the online check found wrong (None: usable)."""
    score: float | None = None
    """The share of the run's ledger facts the answer names."""
    tokens: int = Field(default=0, ge=0)
    """The answer's tokens, as counted."""
    error: str | None = None
    """Why the call failed, when it did (no credential)."""


class SummaryRecord(BaseModel):
    """One run of a compaction: the facts it was judged against, its attempts, its verdict."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    session: str
    checkpoint_id: str
    """The checkpoint the run's summary went into (``""``: every summary of the compaction
    failed while the request still fit, so none was written)."""
    at: float = Field(default_factory=time.time)
    model: str
    """The model of the conversation (the agent's)."""
    start: int = Field(ge=0)
    """First raw message index the run's summary replaces."""
    end: int
    """One past the last."""
    verdict: RunVerdict
    cap: int = Field(gt=0)
    """The summary's completion cap, in tokens."""
    facts: list[dict[str, Any]] = Field(default_factory=list)
    """The run's ledger (``{"kind", "text", "role"}``): what each answer's ``score`` counts."""
    attempts: list[SummaryAttempt] = Field(min_length=1)

    @property
    def used(self) -> SummaryAttempt | None:
        """The attempt whose summary stands in the checkpoint (None: the fallback stands)."""
        if self.verdict == "replaced":
            return None
        wanted: Attempt = "strict" if self.verdict == "repaired" else "first"
        return next((a for a in self.attempts if a.attempt == wanted), None)


def records_json(records: Sequence[SummaryRecord]) -> list[dict[str, Any]]:
    """``records`` as plain JSON objects."""
    return [record.model_dump(mode="json") for record in records]


def request_prompt(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The messages of a summary request: the live prefix, then the instruction."""
    messages = request.get("messages")
    return [dict(m) for m in messages] if isinstance(messages, list) else []
