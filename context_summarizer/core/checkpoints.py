"""The record of one compaction, and how it rewrites a conversation.

A ``Checkpoint`` was computed from one exact conversation: its first ``basis_count`` raw messages,
identified by ``basis_hash``. It applies to that conversation and to any that *extends* it (the
same messages, then more), never to one that diverges from it: a fork, an edited or retried-
differently turn is planned afresh (and may still reuse an earlier checkpoint of the shared part).

It rewrites by ``slots`` and ``overrides``. Each slot replaces one contiguous run of raw messages
``[start, end)`` with one inserted summary message; every other raw message is sent as is, or as
its ``overrides`` replacement (a tool output cut to its head and tail, or masked by the
``hybrid`` or ``masking`` policy). So the rewritten conversation keeps the raw order of
everything it keeps, and each summary sits exactly where the turns it stands for were.

Invariant: ``rewrite`` is a pure function of the checkpoint and the raw messages, and a checkpoint
survives a JSON round trip (``model_dump_json`` / ``model_validate_json``) unchanged, so the same
raw conversation is rewritten to the same bytes in every request and after every restart; that is
what keeps the provider's prompt cache valid.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

__all__ = ["FORMAT_VERSION", "Checkpoint", "Slot", "prefix_candidates"]

FORMAT_VERSION = 2
"""Checkpoints written by this code. Version 1 (summarizer 0.1.0) recorded a covered prefix
instead of a basis; such records still load (for reading) but are never applied."""


def _new_id() -> str:
    return uuid.uuid4().hex


class Slot(BaseModel):
    """One inserted summary: it replaces raw messages ``[start, end)``."""

    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    start: int = Field(ge=0)
    """First raw index replaced."""
    end: int
    """One past the last raw index replaced."""
    message: dict[str, Any]
    """The exact message sent in place of the replaced run."""
    summary: str = ""
    """The model's summary text, without framing or ledger; or the note standing in for one
    (the mechanical fallback's, or the ``masking`` and ``ledger-only`` policies')."""
    ledger: list[dict[str, Any]] = Field(default_factory=list)
    """Facts as plain dicts ``{"kind": ..., "text": ...}`` carried in ``message``."""
    score: float | None = None
    """Share of the ledger's facts the summary itself mentions, when scored."""
    failure: str | None = None
    """Why the model's summary was not used, when a mechanical fallback stands in."""

    @model_validator(mode="after")
    def _nonempty(self) -> Slot:
        if self.end <= self.start:
            raise ValueError(
                f"a slot must replace at least one message, got [{self.start}, {self.end})"
            )
        return self


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
    basis_count: int = Field(ge=1)
    """How many raw messages the checkpoint was computed from."""
    basis_hash: str
    """``prefix_chain(raw)[basis_count - 1]``: identifies exactly those messages."""
    slots: list[Slot] = Field(default_factory=list)
    """Inserted summaries, by increasing ``start``, disjoint, within the basis."""
    overrides: dict[int, dict[str, Any]] = Field(default_factory=dict)
    """Raw index -> replacement message (a tool output cut to fit, or masked), outside every
    slot."""
    summary: str = ""
    """The summaries this compaction wrote, joined by a blank line (slots hold each)."""
    ledger: list[dict[str, Any]] = Field(default_factory=list)
    """The facts of the summaries this compaction wrote."""
    score: float | None = None
    """The lowest fact score among the summaries this compaction wrote, when scored."""
    tokens_before: int
    """Estimated prompt tokens of the request as it arrived."""
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
    format: int = FORMAT_VERSION
    """The record's format; only ``FORMAT_VERSION`` records are ever applied."""

    @model_validator(mode="before")
    @classmethod
    def _from_version_1(cls, data: Any) -> Any:
        """Read a 0.1.0 record (covered prefix, kept indices, one summary) for display."""
        if not isinstance(data, Mapping) or "basis_count" in data or "covered_count" not in data:
            return data
        out = {k: v for k, v in data.items() if k not in _V1_FIELDS}
        covered = int(data["covered_count"])
        kept = set(data.get("kept_indices") or ())
        message = data.get("summary_message")
        start = next((i for i in range(covered) if i not in kept), None)
        slot = message is not None and start is not None
        overrides = {
            int(k): v
            for k, v in (data.get("overrides") or {}).items()
            if not (slot and start is not None and start <= int(k) < covered)
        }
        # Version 1 did not record the conversation it was computed from; this is for display.
        out["basis_count"] = max([covered, *(k + 1 for k in overrides)])
        out["basis_hash"] = data.get("covered_prefix_hash", "")
        out["slots"] = (
            [
                {
                    "start": start,
                    "end": covered,
                    "message": message,
                    "summary": data.get("summary", ""),
                }
            ]
            if slot
            else []
        )
        out["overrides"] = overrides
        out["format"] = 1
        return out

    @model_validator(mode="after")
    def _check_layout(self) -> Checkpoint:
        previous_end = 0
        for slot in self.slots:
            if slot.start < previous_end or slot.end > self.basis_count:
                raise ValueError(
                    "slots must be ordered, disjoint and within the basis "
                    f"({self.basis_count} messages), got "
                    f"{[(s.start, s.end) for s in self.slots]}"
                )
            previous_end = slot.end
        for index in self.overrides:
            if index < 0 or index >= self.basis_count or self.slot_at(index) is not None:
                raise ValueError(
                    f"override {index} must be a raw index within the basis and outside every slot"
                )
        return self

    @property
    def applicable(self) -> bool:
        """Whether this record may rewrite requests (a current-format record)."""
        return self.format == FORMAT_VERSION

    @property
    def covered_count(self) -> int:
        """One past the last raw index any slot replaces (0 when there is no slot)."""
        return self.slots[-1].end if self.slots else 0

    def replaced(self) -> list[tuple[int, int]]:
        """The raw ranges ``[start, end)`` this checkpoint does not send as they are: each
        slot's run, and each overridden message alone; in raw order (``core.spans``)."""
        ranges = [(slot.start, slot.end) for slot in self.slots]
        ranges += [(index, index + 1) for index in self.overrides]
        return sorted(ranges)

    def slot_at(self, index: int) -> Slot | None:
        """The slot replacing raw message ``index``, if any."""
        for slot in self.slots:
            if slot.start <= index < slot.end:
                return slot
        return None

    def layout(self, length: int) -> list[int | Slot]:
        """The rewritten conversation of ``length`` raw messages: raw indices and slots, in
        order."""
        out: list[int | Slot] = []
        index = 0
        for slot in self.slots:
            out.extend(range(index, slot.start))
            out.append(slot)
            index = slot.end
        out.extend(range(index, length))
        return out

    def to_json(self) -> str:
        """The record as JSON text, for a store.

        Pydantic's fast serializer refuses a lone UTF-16 surrogate (JSON text may carry one as a
        ``\\ud800`` escape, and a conversation may hold one): then the stdlib writes it, escaped,
        so it reads back as the same string. Raises (``ValueError`` or ``TypeError``) only for a
        value JSON cannot hold.
        """
        try:
            return self.model_dump_json()
        except ValueError:
            data = self.model_dump(mode="json")
            return json.dumps(data, ensure_ascii=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Checkpoint:
        """A record read back from ``to_json``'s text."""
        try:
            return cls.model_validate_json(text)
        except ValidationError:
            return cls.model_validate(json.loads(text))

    def rewrite(self, raw: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The messages to send instead of ``raw`` (which must extend the basis).

        Kept messages are the caller's own objects; slot messages and overrides are fresh deep
        copies, so mutating the result never alters the checkpoint.
        """
        if len(raw) < self.basis_count:
            raise ValueError(
                f"checkpoint was computed from {self.basis_count} messages but the conversation "
                f"has only {len(raw)}"
            )

        def pick(item: int | Slot) -> dict[str, Any]:
            if isinstance(item, Slot):
                return copy.deepcopy(item.message)
            override = self.overrides.get(item)
            if override is not None:
                return copy.deepcopy(override)
            return raw[item]  # type: ignore[return-value]

        return [pick(item) for item in self.layout(len(raw))]


_V1_FIELDS = frozenset({"covered_count", "covered_prefix_hash", "kept_indices", "summary_message"})


def prefix_candidates(chain: Sequence[str], start: int = 0) -> dict[str, int]:
    """What to look a checkpoint up by for a conversation whose prefix chain is ``chain``:
    ``{chain[i]: i + 1}`` for ``i >= start`` (a caller that knows a checkpoint computed from
    ``start`` messages asks only for longer ones)."""
    return {chain[index]: index + 1 for index in range(start, len(chain))}
