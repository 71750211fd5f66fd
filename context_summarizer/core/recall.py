"""Recall: the exact raw text of the spans a compaction replaced (``core.spans``), searched by
text or regular expression, or fetched by span id. Pure.

Every answer is bounded: at most ``max_hits`` excerpts of ``context_chars`` around each match,
at most ``max_chars`` in all, and each match of a regular expression gets ``REGEX_TIMEOUT``
seconds (a catastrophic pattern stops there and is reported as such; ``regex``'s own timeout, the
one clock the core lets a library read, as a bound, never as a result). What comes
back is exact text, each excerpt with its span and message (1-based), never a paraphrase.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from .messages import message_text
from .spans import Span

MAX_QUERY_CHARS = 500
REGEX_TIMEOUT = 0.05
"""Seconds one match of a regular expression may take by default (``regex``'s own timeout): a
search is at most ``max_hits + 1`` of them. Wall-clock time, so a loaded machine reaches it
sooner: the model is told to simplify its pattern, never given a wrong answer."""


@dataclass(frozen=True)
class RecallHit:
    """One exact excerpt: the span and raw message (0-based) it is from, and its role."""

    span: str
    message: int
    role: str
    text: str
    start: int
    """Offset of ``text`` in the message's text."""
    whole: bool
    """Whether ``text`` is the message's whole text."""


@dataclass(frozen=True)
class RecallAnswer:
    """What a recall call returns: the hits, or why there are none (``error``)."""

    hits: list[RecallHit] = field(default_factory=list)
    more: bool = False
    """Whether matches or text were left out by the bounds."""
    error: str | None = None

    @property
    def chars(self) -> int:
        """Characters of excerpt text returned."""
        return sum(len(hit.text) for hit in self.hits)

    def render(self) -> str:
        """The tool result the model reads."""
        if self.error is not None:
            return f"recall failed: {self.error}"
        if not self.hits:
            return "recall: nothing in the replaced spans matches."
        blocks = []
        for hit in self.hits:
            where = f"[{hit.span}, message {hit.message + 1}, {hit.role}"
            where += "]" if hit.whole else f", from character {hit.start + 1}]"
            blocks.append(f"{where}\n{hit.text}")
        if self.more:
            blocks.append("(more matched than is shown: narrow the query, or fetch a span)")
        return "\n\n".join(blocks)


def search(
    spans: Sequence[Span],
    raw: Sequence[Mapping[str, Any]],
    query: str,
    *,
    is_regex: bool = False,
    max_hits: int = 8,
    max_chars: int = 4_000,
    context_chars: int = 200,
    timeout: float | None = REGEX_TIMEOUT,
) -> RecallAnswer:
    """Excerpts of the spans' raw messages matching ``query``: case-insensitive text, or a
    regular expression (``is_regex``), in raw order, ``context_chars`` either side of each
    match (never past its message). Matching runs over the spans' text at once and stops after
    ``max_hits`` excerpts. Each match of a regular expression gets at most ``timeout`` seconds
    (None: no limit, for a caller that trusts its patterns); text is matched without one (a
    literal cannot backtrack), so its answer never depends on the machine's load."""
    if not query.strip():
        return RecallAnswer(error="the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        return RecallAnswer(error=f"the query is longer than {MAX_QUERY_CHARS} characters")
    try:
        pattern = regex.compile(
            query if is_regex else regex.escape(query), regex.IGNORECASE | regex.V1
        )
    except regex.error as exc:
        return RecallAnswer(error=f"the pattern does not compile: {exc}")
    haystack = _Haystack(spans, raw)
    hits: list[RecallHit] = []
    budget = max_chars
    last_end = -1
    matches = pattern.finditer(haystack.text, timeout=timeout if is_regex else None)
    while True:
        try:
            match = next(matches, None)
        except TimeoutError:
            return RecallAnswer(
                hits, more=True, error="the pattern took too long to match; simplify it"
            )
        if match is None:
            return RecallAnswer(hits)
        place = haystack.place(match.start())
        if place is None or match.start() < last_end:
            continue  # in a separator, or inside the excerpt before
        span, index, offset, text = place
        low = max(0, match.start() - offset - context_chars)
        high = min(len(text), match.end() - offset + context_chars)
        if len(hits) == max_hits or budget <= 0:
            return RecallAnswer(hits, more=True)
        piece = text[low:high][:budget]
        budget -= len(piece)
        last_end = offset + low + len(piece)
        whole = low == 0 and low + len(piece) == len(text)
        hits.append(RecallHit(span.id, index, _role(raw[index]), piece, low, whole))
        if len(piece) < high - low:
            return RecallAnswer(hits, more=True)


class _Haystack:
    """The spans' messages' text, joined, and where each message's text lies in it."""

    SEPARATOR = "\n\u0000\n"

    def __init__(self, spans: Sequence[Span], raw: Sequence[Mapping[str, Any]]) -> None:
        pieces: list[str] = []
        self.starts: list[int] = []
        self.places: list[tuple[Span, int, int, str]] = []
        at = 0
        for span in spans:
            for index in range(span.start, min(span.end, len(raw))):
                text = message_text(raw[index])
                self.starts.append(at)
                self.places.append((span, index, at, text))
                pieces.append(text)
                at += len(text) + len(self.SEPARATOR)
        self.text = self.SEPARATOR.join(pieces)

    def place(self, position: int) -> tuple[Span, int, int, str] | None:
        """The span, raw index, offset and text of the message at ``position`` (None: in a
        separator)."""
        found = bisect.bisect_right(self.starts, position) - 1
        if found < 0:
            return None
        span, index, offset, text = self.places[found]
        return (span, index, offset, text) if position < offset + len(text) else None


def fetch(
    spans: Sequence[Span],
    raw: Sequence[Mapping[str, Any]],
    span: str,
    *,
    offset: int = 0,
    max_chars: int = 8_000,
) -> RecallAnswer:
    """The raw messages of the span with id ``span``, in order, from its ``offset``-th message
    (0-based), up to ``max_chars``."""
    found = next((s for s in spans if s.id == span), None)
    if found is None:
        known = ", ".join(s.id for s in spans) or "none"
        return RecallAnswer(error=f"no span {span!r} in this conversation (spans: {known})")
    hits: list[RecallHit] = []
    budget = max_chars
    first = found.start + max(0, offset)
    for index in range(first, min(found.end, len(raw))):
        if budget <= 0:
            return RecallAnswer(hits, more=True)
        text = message_text(raw[index])
        piece = text[:budget]
        budget -= len(piece)
        hits.append(RecallHit(found.id, index, _role(raw[index]), piece, 0, piece == text))
        if piece != text:
            return RecallAnswer(hits, more=True)
    return RecallAnswer(hits)


def _role(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    return role if isinstance(role, str) else "message"
