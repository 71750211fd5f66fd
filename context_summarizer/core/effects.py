"""What reaches the engine, and what it asks the outside world to do.

``Turn`` is one request of a conversation as the engine sees it, from any front door (the proxy,
``wrap``, ``ContextManager``, the evaluator). The engine's work is generators that *yield*
effects and receive their results, like the summary call always was:

- ``SummarizeCall`` -> ``SummaryOutcome`` (``results``): one summary request to the model;
- ``FindCheckpoint`` -> ``Found``: the best stored checkpoint this conversation extends;
- ``SaveCheckpoint`` -> ``Saved``: write a new checkpoint;
- ``RecordUsage`` -> None: the provider's token count for a compacted request.

A driver (``context_summarizer.library.drive``) performs them: storage, the model and threads belong
to the edges.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .checkpoints import Checkpoint
from .messages import Message
from .results import SummarizeCall

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Turn:
    """One request of a conversation: the raw history an agent sent, and what goes with it."""

    messages: Sequence[Message]
    """The agent's whole history, the caller's own message objects."""
    model: str
    tools: Sequence[Mapping[str, Any]] | None = None
    session: str | None = None
    """A session named by the caller; None derives one from the conversation."""
    request: Mapping[str, Any] = field(default_factory=dict)
    """The rest of the request body (its reply cap counts in the budget)."""
    namespace: str = ""
    """The tenant: sessions, checkpoints and calibration never cross namespaces."""
    compact_threshold: int | None = None
    """A client's own trigger for this request (the Responses API's ``context_management``
    ``compact_threshold``): compaction is due past it even below the configured trigger."""
    compact_now: bool = False
    """Compact this request whatever its size (a client's "compact now"): as if the trigger
    were crossed at its present size, down to the target in the same proportion."""
    instructions: str | None = None
    """Instructions of the caller's for the summaries written for this request, added after
    the configured ones (``CompactionConfig.summary_instructions``)."""
    recall: str | None = None
    """The recall tool's name when the caller offers the tool once the conversation has a
    compaction (``core.recall_tool``): its definition counts in the budget and each summary
    lists the span it replaced under it. None: recall is off."""
    secrets: Sequence[str] = field(default=(), repr=False)
    """Keys to keep out of the checkpoints this turn writes (the request's own credential, the
    server's upstream keys): redacted there, with credential-shaped strings (``redaction``)."""


@dataclass(frozen=True, slots=True)
class FindCheckpoint:
    """Find the best checkpoint for a prefix of the conversation hashed by ``chain``: the
    candidates are ``{chain[i]: i + 1}`` for ``i >= start`` (``checkpoints.prefix_candidates``).

    ``unchanged_since``: when the store's generation still equals it, nothing was written since
    the engine last looked, and only the prefixes from ``fresh_start`` on (the new ones) need
    asking. The performer builds only the candidates it asks for: per request that is the few
    new prefixes, not the whole conversation.
    """

    namespace: str
    chain: Sequence[str]
    start: int = 0
    unchanged_since: int | None = None
    fresh_start: int | None = None


@dataclass(frozen=True, slots=True)
class Found:
    """The answer to ``FindCheckpoint``: what was found, and the store's generation when the
    lookup began (so a write during it makes the engine's memo stale, never wrong)."""

    checkpoint: Checkpoint | None
    generation: int | None


@dataclass(frozen=True, slots=True)
class SaveCheckpoint:
    """Store ``checkpoint`` (whole, or not at all)."""

    checkpoint: Checkpoint


@dataclass(frozen=True, slots=True)
class Saved:
    """The answer to ``SaveCheckpoint``: the store's generation after the write."""

    generation: int | None


@dataclass(frozen=True, slots=True)
class RecordUsage:
    """Record the provider's prompt tokens for the request a compaction rewrote."""

    namespace: str
    checkpoint_id: str
    reported_tokens_after: int


Effect = SummarizeCall | FindCheckpoint | SaveCheckpoint | RecordUsage
"""Everything the engine asks a driver to do."""

Effects = Generator[Effect, Any, T]
"""A piece of the engine's work: yields effects, receives their results, returns a ``T``."""
