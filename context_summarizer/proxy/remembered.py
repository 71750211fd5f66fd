"""What the fast path remembers of a chat body (``Remembered``) and of its request's locating
(``Settled``): held by ``fast_path.FastPath`` and carried by the ``ChatRequest`` built from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .model_routes import ModelRoute


@dataclass(eq=False, slots=True)
class Remembered:
    """A remembered body: its bytes, where its last message ends and its ``]`` closing
    ``messages`` stands, and its parse (read-only once remembered)."""

    raw: bytes
    end: int
    close: int
    body: dict[str, Any]
    key: tuple[str, str | None, bytes]
    settled: Settled | None = None
    """Its request's figures, once located with no compaction due."""


@dataclass(frozen=True, slots=True)
class Settled:
    """What locating a remembered body's request found: the route it went to, its counted size
    (uncalibrated, fixed tokens included) and its trigger. A body that extends it by text alone
    can be bounded from these without counting (``proxy.lane``)."""

    route: ModelRoute
    raw_tokens: int
    trigger_tokens: int
    checkpoint_id: str | None
    """The checkpoint it stood on."""
    compactions: int
    """The proxy's count of compactions when it was located (``CompactionTally.count``)."""
