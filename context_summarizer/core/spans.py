"""Spans: the runs of raw messages a compaction replaced, named so the model can ask for them
back. Pure.

A span is one slot's run ``[start, end)`` of raw messages. Its id is a digest of those messages
(``span_id``): the same run of the same conversation has the same id in every request and after
every restart, and no other run has it. Its one-line index (``index_line``) says what the run
holds (its messages, the files, commands and errors in it), so a summary can list what may be
recalled (``core.recall``) without carrying it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .facts import Fact, rank_facts
from .messages import message_digest

ID_PREFIX = "span-"
INDEX_KINDS: tuple[tuple[str, str], ...] = (("path", "files"), ("command", "commands"))
"""The fact kinds an index line names, with their labels, before errors."""
MAX_PER_KIND = 4
MAX_ITEM_CHARS = 60
MAX_INDEX_CHARS = 400


@dataclass(frozen=True)
class Span:
    """Raw messages ``[start, end)`` of a conversation, replaced by one summary."""

    id: str
    start: int
    end: int

    def covers(self, index: int) -> bool:
        """Whether raw message ``index`` is in the span."""
        return self.start <= index < self.end


def span_id(messages: Iterable[Mapping[str, Any]]) -> str:
    """The id of the span made of ``messages``: ``span-`` and 12 hex digits of a SHA-256 over
    their digests."""
    digest = hashlib.sha256()
    for message in messages:
        digest.update(message_digest(message).encode("ascii"))
        digest.update(b"\n")
    return ID_PREFIX + digest.hexdigest()[:12]


def spans_of(ranges: Iterable[tuple[int, int]], raw: Sequence[Mapping[str, Any]]) -> list[Span]:
    """The spans of the raw ranges ``[start, end)`` (a checkpoint's slots), in raw order; a
    range past the end of ``raw`` (another conversation's checkpoint) is left out."""
    spans = [
        Span(span_id(raw[start:end]), start, end)
        for start, end in ranges
        if 0 <= start < end <= len(raw)
    ]
    return sorted(spans, key=lambda span: span.start)


def index_line(span: Span, raw: Sequence[Mapping[str, Any]]) -> str:
    """One line saying what ``span`` holds: its id, its messages (1-based, as a person counts
    them) and the first files, commands and errors in it, most important first."""
    facts = rank_facts(raw[span.start : span.end])
    parts = [f"{span.id}: messages {span.start + 1}-{span.end}"]
    for kind, label in (*INDEX_KINDS, ("error", "errors")):
        named = _named(facts, kind)
        if named:
            parts.append(f"{label}: {', '.join(named)}")
    line = "; ".join(parts)
    if len(line) > MAX_INDEX_CHARS:
        line = line[: MAX_INDEX_CHARS - 1] + "…"
    return line


def _named(facts: Sequence[Fact], kind: str) -> list[str]:
    """The first ``MAX_PER_KIND`` facts of ``kind``, each shortened to ``MAX_ITEM_CHARS``."""
    out: list[str] = []
    for fact in facts:
        if fact.kind != kind:
            continue
        text = " ".join(fact.text.split())
        if len(text) > MAX_ITEM_CHARS:
            text = text[: MAX_ITEM_CHARS - 1] + "…"
        if text not in out:
            out.append(text)
        if len(out) == MAX_PER_KIND:
            break
    return out
