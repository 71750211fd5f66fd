"""What the proxy saw of each session: one ``RequestRecord`` per managed request, and the
per-session roll-up (``SessionRow``) that ``summarizer sessions`` and ``/ui`` list.

Pure: the stores keep the records, the proxy writes them, the CLI and the page read them. A
record holds counts and names only (the tenant's namespace hash, the session, the model), never
message text or a credential; conversations are kept only when recording is on (``Recording``),
with known secrets redacted first (``redact``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .redaction import REDACTED, redact

__all__ = [
    "ANONYMOUS_LABEL",
    "REDACTED",
    "Recording",
    "RequestRecord",
    "SessionRow",
    "namespace_label",
    "redact",
    "roll_up",
]

ANONYMOUS_LABEL = "keyless"


class RequestRecord(BaseModel):
    """One managed request of a session, as it went upstream."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    session: str
    at: float
    """When the request arrived (Unix seconds)."""
    model: str
    api: str = "chat"
    """The front door: ``chat``, ``messages`` or ``responses``."""
    tokens_before: int = Field(ge=0)
    """What would have gone upstream without this request's compaction (earlier checkpoints
    applied), estimated and calibrated: the line a compaction drops from."""
    tokens_sent: int = Field(ge=0)
    """What went upstream after any rewrite, estimated (calibrated)."""
    tokens_saved: int | None = Field(default=None, ge=0)
    """What compaction kept it from sending: the conversation as the client sent it minus
    ``tokens_sent``, estimated alike (0 when no checkpoint applied, or the answer was not a
    success; None: logged before this was recorded). ``summarizer_tokens_saved_total``
    counts the same figure."""
    window: int = Field(ge=0)
    reported_tokens: int | None = None
    """The provider's ``prompt_tokens`` (``input_tokens``) for this request, when it said."""
    cached_tokens: int | None = None
    """Of those, the ones the provider reported read from its prompt cache."""
    compacted: bool = False
    """Whether this request performed a compaction."""
    checkpoint_id: str | None = None
    """The checkpoint its rewrite used (new or earlier), if any."""
    status: int = 200
    """The HTTP status the client got."""
    latency_s: float = 0.0
    """Seconds from arrival to the end of the answer, compaction included."""
    compaction_s: float | None = None
    """Seconds this request's compaction took (None: it did not compact)."""
    ahead: bool = False
    """Whether that compaction adopted summaries drafted ahead of time (``compaction_s`` is
    then only what the request waited)."""
    recall_calls: int = Field(default=0, ge=0)
    """Recall tool calls the proxy answered for this request."""
    recalled: list[str] = Field(default_factory=list)
    """The spans those calls read back (``span-`` ids), each once, in order."""


class SessionRow(BaseModel):
    """A session's roll-up: what ``summarizer sessions`` prints a line of."""

    namespace: str
    session: str
    model: str
    """The model of the session's latest request."""
    requests: int
    compactions: int
    tokens_now: int
    """Tokens sent by the latest request."""
    tokens_peak: int
    window: int
    reported_tokens: int
    cached_tokens: int
    first_seen: float
    last_seen: float

    @property
    def cache_share(self) -> float | None:
        """Share of provider-reported prompt tokens read from cache (None: none reported)."""
        return self.cached_tokens / self.reported_tokens if self.reported_tokens else None

    @property
    def label(self) -> str:
        """The namespace as shown to an operator (never a credential)."""
        return namespace_label(self.namespace)


class Recording(BaseModel):
    """A session's latest conversation, kept only when recording is on: what
    ``summarizer export`` turns into evaluation cases."""

    namespace: str
    session: str
    model: str
    at: float
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None


def namespace_label(namespace: str) -> str:
    """``keyless`` for the shared keyless namespace, else ``key-`` and 8 hex digits of the
    namespace hash (itself a keyed hash of the credential)."""
    if not namespace.startswith("key-"):
        return ANONYMOUS_LABEL
    return namespace[:12]


def roll_up(records: Iterable[RequestRecord]) -> list[SessionRow]:
    """The per-session rows of ``records`` (any order), newest activity first."""
    rows: dict[tuple[str, str], SessionRow] = {}
    for record in sorted(records, key=lambda r: r.at):
        key = (record.namespace, record.session)
        row = rows.get(key)
        reported = record.reported_tokens or 0
        cached = record.cached_tokens or 0
        if row is None:
            rows[key] = SessionRow(
                namespace=record.namespace,
                session=record.session,
                model=record.model,
                requests=1,
                compactions=int(record.compacted),
                tokens_now=record.tokens_sent,
                tokens_peak=record.tokens_sent,
                window=record.window,
                reported_tokens=reported,
                cached_tokens=cached,
                first_seen=record.at,
                last_seen=record.at,
            )
            continue
        rows[key] = row.model_copy(
            update={
                "model": record.model,
                "requests": row.requests + 1,
                "compactions": row.compactions + int(record.compacted),
                "tokens_now": record.tokens_sent,
                "tokens_peak": max(row.tokens_peak, record.tokens_sent),
                "window": record.window,
                "reported_tokens": row.reported_tokens + reported,
                "cached_tokens": row.cached_tokens + cached,
                "last_seen": record.at,
            }
        )
    return sorted(rows.values(), key=lambda row: row.last_seen, reverse=True)
