"""A turn resolved against its checkpoint: the view the model would see, and its size.

Pure: the view is a function of the raw messages and the checkpoint that applies to them.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .budgets import Budget
from .checkpoints import Checkpoint, Slot
from .messages import Message, message_digest
from .planner import MaskPlan, Plan, ViewItem
from .results import TokenReport
from .summaries import RunSummary
from .tokens import TokenCounter


@dataclass
class Located:
    """A turn resolved against the store: its view and its size (engine-internal state)."""

    session: str
    namespace: str
    messages: list[Message]
    model: str
    tools: list[Mapping[str, Any]] | None
    request: Mapping[str, Any]
    budget: Budget
    counter: TokenCounter
    checkpoint: Checkpoint | None
    digests: list[str]
    chain: list[str]
    view: list[ViewItem]
    fixed_tokens: int
    raw_tokens: int
    calibrated_tokens: int
    generation: int | None
    """The store's generation when the checkpoint was looked up (None: unknown)."""
    recall: str | None = None
    """The turn's ``recall``: the tool the summaries drafted for it name their spans under."""
    recall_tokens: int = 0
    """The recall tool's definition, counted: part of ``fixed_tokens`` when the checkpoint the
    turn stands on replaced something (the tool is then offered), and of every request a
    compaction of it makes (``fixed_under``). 0: recall is off."""
    secrets: Sequence[str] = field(default=(), repr=False)
    """The turn's ``secrets``: redacted from any checkpoint drafted for it."""
    instructions: str | None = None
    """The turn's ``instructions`` for the summaries written for it."""

    def fixed_under(self, checkpoint: Checkpoint | None) -> int:
        """The fixed tokens of this turn's request standing on ``checkpoint``: the recall
        tool's definition is in them when the checkpoint replaced something."""
        return self.fixed_tokens - self._offered(self.checkpoint) + self._offered(checkpoint)

    @property
    def compacted_fixed_tokens(self) -> int:
        """The fixed tokens of the request a compaction of this turn makes (the recall tool
        offered, when recall is on)."""
        return self.fixed_tokens - self._offered(self.checkpoint) + self.recall_tokens

    def _offered(self, checkpoint: Checkpoint | None) -> int:
        return self.recall_tokens if checkpoint is not None and checkpoint.replaced() else 0

    @property
    def checkpoint_id(self) -> str | None:
        """The id of the checkpoint this turn stands on (None: none applies)."""
        return self.checkpoint.id if self.checkpoint is not None else None

    def view_under(self, checkpoint: Checkpoint | None) -> tuple[list[ViewItem], int]:
        """This turn's view under ``checkpoint``, and its counted size (fixed tokens included,
        before calibration)."""
        view = view_of(self.messages, self.digests, checkpoint, self.counter)
        return view, self.fixed_under(checkpoint) + sum(item.tokens for item in view)

    def report(self, raw_tokens: int, calibrated: int) -> TokenReport:
        """The token figures of a request of this turn's budget."""
        return TokenReport(
            estimated_tokens=calibrated,
            raw_estimated_tokens=raw_tokens,
            context_window=self.budget.context_window,
            reserve_output_tokens=self.budget.reserve_output_tokens,
            trigger_tokens=self.budget.trigger_tokens,
            target_tokens=self.budget.target_tokens,
        )


@dataclass(frozen=True)
class Draft:
    """A compaction written but not saved: its checkpoint (``tokens_after`` as drafted), the
    view it gives the conversation it was drafted from, and what made it."""

    checkpoint: Checkpoint
    parent_id: str | None
    """The checkpoint the drafted-from request stood on: a draft applies only on the same."""
    summaries: Sequence[RunSummary]
    """What summarizing each new run produced."""
    plan: Plan
    """The plan it followed."""
    masking: MaskPlan
    """What the ``hybrid`` or ``masking`` policy masked first."""
    view: list[ViewItem]
    raw_tokens: int
    """The counted (uncalibrated) size of ``view``."""


@dataclass(frozen=True, slots=True)
class SessionMemo:
    """What the engine last learned of a session's checkpoints."""

    checkpoint: Checkpoint | None
    """The best checkpoint found for the session's conversation, if any."""
    checked: int
    """The store held nothing better for any prefix up to this many messages..."""
    checked_hash: str
    """...of the conversation whose prefix of ``checked`` messages hashes to this..."""
    generation: int | None
    """...as of this store generation (None: the store cannot tell, so it is never trusted)."""
    view: SeenView | None = None
    """The view last measured for the session, which the next request's view extends."""

    def covers(self, chain: Sequence[str]) -> bool:
        """Whether ``chain`` begins with the conversation this memo checked."""
        return self.generation is not None and begins_with(chain, self.checked, self.checked_hash)


@dataclass(frozen=True, slots=True)
class SeenView:
    """A view as measured: the messages it was made of (a copy of the list), the checkpoint and
    counter it was made under, its items and their tokens."""

    messages: list[Message]
    checkpoint: Checkpoint | None
    counter: TokenCounter
    items: list[ViewItem]
    tokens: int
    """The items' tokens, added up (a view that extends this one adds only its new items')."""

    def extended(
        self,
        raw: Sequence[Message],
        digests: Sequence[str],
        checkpoint: Checkpoint | None,
        counter: TokenCounter,
    ) -> list[ViewItem] | None:
        """``view_of(raw, digests, checkpoint, counter)``, counting only the messages after
        this view's, when ``raw`` begins with the very same message objects and the
        checkpoint and counter are the same; None otherwise."""
        known = len(self.messages)
        if (
            checkpoint is not self.checkpoint
            or counter is not self.counter
            or len(raw) < known
            or (checkpoint is not None and known < checkpoint.basis_count)
            or not all(map(operator.is_, self.messages, raw))
        ):
            return None
        # A checkpoint's slots and overrides all lie below its basis, so the layout of a longer
        # conversation is the shorter one's followed by the new messages' own indices.
        return [
            *self.items,
            *(
                ViewItem(raw[i], i, counter.count_message(raw[i], digest=digests[i]))
                for i in range(known, len(raw))
            ),
        ]


def begins_with(chain: Sequence[str], count: int, digest: str) -> bool:
    """Whether the conversation hashed by ``chain`` begins with the ``count`` messages whose
    prefix hashes to ``digest``."""
    return 0 < count <= len(chain) and chain[count - 1] == digest


def extends(chain: Sequence[str], checkpoint: Checkpoint) -> bool:
    """Whether the conversation hashed by ``chain`` begins with the checkpoint's basis."""
    return checkpoint.applicable and begins_with(
        chain, checkpoint.basis_count, checkpoint.basis_hash
    )


def view_of(
    raw: Sequence[Message],
    digests: Sequence[str],
    checkpoint: Checkpoint | None,
    counter: TokenCounter,
) -> list[ViewItem]:
    """The messages the model sees for ``raw`` under ``checkpoint``, each counted."""

    def item(entry: int | Slot) -> ViewItem:
        if isinstance(entry, Slot):
            message = entry.message
            tokens = counter.count_message(message, digest=message_digest(message))
            return ViewItem(message, None, tokens, replaces=(entry.start, entry.end))
        override = checkpoint.overrides.get(entry) if checkpoint is not None else None
        if override is not None:
            digest = message_digest(override)
            return ViewItem(override, entry, counter.count_message(override, digest=digest))
        tokens = counter.count_message(raw[entry], digest=digests[entry])
        return ViewItem(raw[entry], entry, tokens)

    if checkpoint is None:
        return [item(i) for i in range(len(raw))]
    return [item(entry) for entry in checkpoint.layout(len(raw))]
