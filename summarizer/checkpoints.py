"""The record of one compaction, and how it rewrites a conversation.

A ``Checkpoint`` says: the first ``covered_count`` raw messages of this conversation (identified by
``covered_prefix_hash``) are replaced by ``kept_indices`` verbatim, then ``summary_message``; every
later raw message follows unchanged, except where ``overrides`` substitutes a message.

Invariant: ``rewrite`` is a pure function of the checkpoint and the raw messages, and a
checkpoint survives a JSON round trip (``model_dump_json`` / ``model_validate_json``) unchanged,
so the same raw conversation is rewritten to the same bytes in every request and after every
restart; that is what keeps the provider's prompt cache valid.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["Checkpoint"]


def _new_id() -> str:
    return uuid.uuid4().hex


class Checkpoint(BaseModel):
    """One compaction of a session, immutable once made (see the module docstring)."""

    # ``constants`` keeps Infinity/NaN in a message as themselves instead of turning them into
    # null, so the JSON round trip is exact for anything ``json.loads`` can produce.
    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    id: str = Field(default_factory=_new_id)
    """Unique id (uuid4 hex by default)."""
    namespace: str
    """Hash of the tenant's credential (``""`` in library mode); never the credential itself."""
    session: str
    """The session key within the namespace."""
    covered_count: int = Field(ge=1)
    """How many leading raw messages this checkpoint covers (replaced or kept)."""
    covered_prefix_hash: str
    """``prefix_chain(raw)[covered_count - 1]``: identifies the covered raw prefix."""
    kept_indices: list[int] = Field(default_factory=list)
    """Raw indices below ``covered_count`` kept verbatim before the summary, increasing."""
    summary_message: dict[str, Any] | None
    """The exact message inserted in place of the covered messages that are not kept."""
    overrides: dict[int, dict[str, Any]] = Field(default_factory=dict)
    """Raw index -> replacement message (e.g. an elided tool output); applies to kept and tail."""
    summary: str
    """The model's summary text, without framing or ledger."""
    ledger: list[dict[str, Any]] = Field(default_factory=list)
    """Facts as plain dicts ``{"kind": ..., "text": ...}``."""
    score: float | None = None
    """Share of ledger facts the summary mentions, when scored."""
    tokens_before: int
    """Estimated prompt tokens of the raw request."""
    tokens_after: int
    """Estimated prompt tokens of the rewritten request."""
    reported_tokens_before: int | None = None
    """Prompt tokens the provider reported for the raw request, once known."""
    reported_tokens_after: int | None = None
    """Prompt tokens the provider reported for the rewritten request, once known."""
    model: str
    """The model the conversation talks to."""
    summary_model: str
    """The model that wrote the summary."""
    trigger: str
    """Why compaction ran: ``"threshold"``, ``"context_length_exceeded"``, ``"manual"``, ..."""
    failure: str | None = None
    """Set when summarization failed and a deterministic fallback was used instead."""
    parent_id: str | None = None
    """The previous checkpoint of the session, if any."""
    created_at: float = Field(default_factory=time.time)
    """Unix time of creation."""

    @model_validator(mode="after")
    def _check_indices(self) -> Checkpoint:
        previous = -1
        for index in self.kept_indices:
            if not previous < index < self.covered_count:
                raise ValueError(
                    "kept_indices must be strictly increasing and below covered_count "
                    f"({self.covered_count}), got {self.kept_indices}"
                )
            previous = index
        negative = [i for i in self.overrides if i < 0]
        if negative:
            raise ValueError(f"overrides keys must be raw indices >= 0, got {negative}")
        return self

    def layout(self, length: int) -> list[int | None]:
        """Raw indices of the rewritten conversation of ``length`` raw messages, in order;
        None marks the summary message."""
        head: list[int | None] = list(self.kept_indices)
        if self.summary_message is not None:
            head.append(None)
        return head + list(range(self.covered_count, length))

    def rewrite(self, raw: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The messages to send instead of ``raw`` (whose covered prefix must match).

        Kept and tail messages are the caller's own objects; ``summary_message`` and overrides
        are fresh deep copies, so mutating the result never alters the checkpoint.
        """
        if len(raw) < self.covered_count:
            raise ValueError(
                f"checkpoint covers {self.covered_count} messages but the conversation "
                f"has only {len(raw)}"
            )

        def pick(index: int | None) -> dict[str, Any]:
            if index is None:
                return copy.deepcopy(self.summary_message)  # type: ignore[arg-type]
            override = self.overrides.get(index)
            if override is not None:
                return copy.deepcopy(override)
            return raw[index]  # type: ignore[return-value]

        out = [pick(i) for i in self.layout(len(raw))]
        return out
