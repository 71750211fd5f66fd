"""A session as an operator reads it: its requests, and each compaction with its summaries, the
facts each summary missed, and (when the conversation was recorded) what each summary replaced.

Pure: built from what a store returns (``list_session``, ``session_requests``, ``recordings``).
``summarizer show`` prints it; ``/ui`` serves it as JSON.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from .activity import Recording, RequestRecord, SessionRow, namespace_label, roll_up
from .checkpoints import Checkpoint, Slot
from .facts import ledger_facts, score_summary
from .redaction import redact, redact_slot


class SummaryView(BaseModel):
    """One summary a compaction wrote: the raw messages ``[start, end)`` it stands for."""

    start: int
    end: int
    summary: str
    ledger: list[dict[str, Any]] = Field(default_factory=list)
    score: float | None = None
    failure: str | None = None
    missed: list[str] = Field(default_factory=list)
    """Ledger facts the summary's own text does not mention (the ledger still carries them)."""
    replaced: list[dict[str, Any]] | None = None
    """The messages it replaced, when the conversation was recorded."""


class CompactionView(BaseModel):
    """One compaction of the session (one checkpoint)."""

    checkpoint_id: str
    created_at: float
    trigger: str
    model: str
    summary_model: str
    tokens_before: int
    tokens_after: int
    reported_tokens_before: int | None = None
    reported_tokens_after: int | None = None
    latency_s: float | None = None
    """Seconds the compaction took, from the request that made it (when logged)."""
    ahead: bool = False
    """Whether its summaries were drafted ahead of time (``latency_s``: the request's wait)."""
    score: float | None = None
    failure: str | None = None
    summaries: list[SummaryView]
    """The summaries this compaction wrote (not those it carried from earlier ones)."""


class SessionView(BaseModel):
    """Everything known of one session in one namespace."""

    namespace: str
    session: str
    row: SessionRow | None
    """The roll-up of its requests (None when no request of it was logged)."""
    requests: list[RequestRecord]
    compactions: list[CompactionView]
    recorded: bool
    """Whether its conversation was recorded (``--record``)."""
    recall_calls: int = 0
    """Recall tool calls answered for its requests."""
    recalled: dict[str, int] = Field(default_factory=dict)
    """Each span its requests read back with the recall tool, and in how many requests."""


def session_view(
    namespace: str,
    session: str,
    checkpoints: Sequence[Checkpoint],
    requests: Sequence[RequestRecord],
    recording: Recording | None = None,
) -> SessionView:
    """The view of one session from its checkpoints (oldest first), request records and
    recording."""
    rows = roll_up(requests)
    latency = {r.checkpoint_id: r.compaction_s for r in requests if r.compacted}
    ahead = {r.checkpoint_id for r in requests if r.compacted and r.ahead}
    messages = recording.messages if recording is not None else None
    compactions = []
    seen: set[tuple[int, int, str]] = set()
    for checkpoint in checkpoints:
        new = [s for s in checkpoint.slots if (s.start, s.end, s.summary) not in seen]
        seen.update((s.start, s.end, s.summary) for s in checkpoint.slots)
        compactions.append(
            CompactionView(
                checkpoint_id=checkpoint.id,
                created_at=checkpoint.created_at,
                trigger=checkpoint.trigger,
                model=checkpoint.model,
                summary_model=checkpoint.summary_model,
                tokens_before=checkpoint.tokens_before,
                tokens_after=checkpoint.tokens_after,
                reported_tokens_before=checkpoint.reported_tokens_before,
                reported_tokens_after=checkpoint.reported_tokens_after,
                latency_s=latency.get(checkpoint.id),
                ahead=checkpoint.id in ahead,
                score=checkpoint.score,
                failure=redact(checkpoint.failure),
                summaries=[_summary_view(slot, messages) for slot in new],
            )
        )
    return SessionView(
        namespace=namespace,
        session=session,
        row=rows[0] if rows else None,
        requests=list(requests),
        compactions=compactions,
        recorded=recording is not None,
        recall_calls=sum(r.recall_calls for r in requests),
        recalled=dict(Counter(span for r in requests for span in r.recalled)),
    )


def _summary_view(stored: Slot, messages: list[dict[str, Any]] | None) -> SummaryView:
    # A checkpoint written before keys were kept out of them is shown redacted all the same
    # (credential-shaped strings: the keys themselves are not known here).
    slot = redact_slot(stored)
    facts = ledger_facts(slot.ledger)
    missed = score_summary(slot.summary, facts).missed if slot.summary else facts
    return SummaryView(
        start=slot.start,
        end=slot.end,
        summary=slot.summary,
        ledger=slot.ledger,
        score=slot.score,
        failure=slot.failure,
        missed=[fact.text for fact in missed],
        replaced=messages[slot.start : slot.end] if messages is not None else None,
    )


def row_json(row: SessionRow) -> dict[str, Any]:
    """``row`` as JSON for an operator or a tenant: the namespace as its label (never the hash),
    and the cache share."""
    data = row.model_dump(mode="json", exclude={"namespace"})
    data.update(namespace=row.label, cache_share=row.cache_share)
    return data


def view_json(view: SessionView) -> dict[str, Any]:
    """``view`` as JSON, with the namespace only as its label (never the hash) in the view, its
    row and its requests."""
    data = view.model_dump(mode="json", exclude={"namespace", "row"})
    data["namespace"] = namespace_label(view.namespace)
    data["row"] = row_json(view.row) if view.row is not None else None
    for request in data["requests"]:
        request.pop("namespace", None)
    return data
