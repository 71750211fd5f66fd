"""A fact (its kind and its text as it appeared) and the normalised form it is deduplicated and
matched by."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator

FactKind = Literal[
    "path", "url", "identifier", "error", "command", "test", "commit", "quantity", "constraint"
]
"""What a fact is about (``constraint``: what the user asked, in the user's own words)."""

FactRole = Literal[
    "edited", "read", "failed", "passed", "ran", "unresolved", "resolved", "argument"
]
"""What the agent did with a fact, when its actions say so:

- a path ``edited`` (a tool call or a shell command wrote it) or only ``read``;
- a command run, and how it last ended: ``failed``, ``passed``, or ``ran`` (no outcome shown);
  a test ``failed`` when a run reported it failing;
- an error ``unresolved`` (no later run of the command that reported it passed) or
  ``resolved``;
- an identifier passed as a tool call's ``argument`` (an id, a code, a date)."""

_LINE_BREAKS = re.compile(r"[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


class Fact(BaseModel):
    """One fact: its kind and its text as it appeared (single line, stripped, non-empty)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: FactKind
    text: str
    role: FactRole | None = None
    """What the agent did with it (None: only mentioned)."""

    @field_validator("text")
    @classmethod
    def _one_line(cls, value: str) -> str:
        cleaned = _LINE_BREAKS.sub(" ", value).strip()
        if not cleaned:
            raise ValueError("a fact's text must not be empty")
        return cleaned

    @property
    def key(self) -> str:
        """The normalised form used to deduplicate and match (``normalize_fact_text``)."""
        return normalize_fact_text(self.text)


_SYMMETRIC_QUOTES = "\"'`"
_LEAD = ",;:!?*"
_TRAIL = ".,;:!?*"
_CLOSERS = {")": "(", "]": "[", "}": "{", "”": "“", "’": "‘", "»": "«"}
_OPENERS = {opener: closer for closer, opener in _CLOSERS.items()}


def _strip_edges(text: str) -> str:
    """Strip edge punctuation, and quotes or brackets left unbalanced by it (bounded work)."""
    for _ in range(8):
        before = text = text.lstrip(_LEAD).rstrip(_TRAIL).strip()
        first, last, inner = text[:1], text[-1:], text[1:-1]
        pair = _OPENERS.get(first) or (first if first in _SYMMETRIC_QUOTES else None)
        if len(text) > 1 and last == pair and first not in inner and last not in inner:
            text = inner  # a wrapped whole: 'x', `x`, (x), “x”
        elif last in _SYMMETRIC_QUOTES and text.count(last) % 2:
            text = text[:-1]
        elif first in _SYMMETRIC_QUOTES and text.count(first) % 2:
            text = text[1:]
        if text and text[-1] in _CLOSERS and text.count(text[-1]) > text.count(_CLOSERS[text[-1]]):
            text = text[:-1]
        if text and text[0] in _OPENERS and text.count(text[0]) > text.count(_OPENERS[text[0]]):
            text = text[1:]
        if text == before:
            break
    return text.strip()


def normalize_fact_text(text: str) -> str:
    """Casefold, collapse whitespace, ``\\`` to ``/``, strip quotes/punctuation, leading ``./``."""
    text = _strip_edges(" ".join(text.casefold().replace("\\", "/").split()))
    while text.startswith("./"):
        text = _strip_edges(text[2:])
    return text
