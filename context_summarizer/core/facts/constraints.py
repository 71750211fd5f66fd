"""What the user asked, in the user's own words (``user_constraints``): the ``constraint`` facts.

A user message is the user's own when it is not an observation: not a tool's output (an agent
that acts in its text, as mini-swe-agent and SWE-agent do, gets its outputs back as user
messages: the message after an assistant message with a fenced block is one), not a note an
agent writes in the user's name (``<task-notification>``, ``<system-reminder>``, ``[Request
interrupted by user]``, SWE-agent's ``(Open file: ...)`` prompt), and not a summary. A short
message counts whole; of a longer one, the sentences that constrain (``must``, ``never``,
``don't``, ``only``, ``make sure``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..messages import message_text
from .errors import _bound

_SHORT = 200
_LONG_HEAD = 4_000  # only a long message's head is read for constraining sentences
_MAX_PER_MESSAGE = 5
_NOT_TYPED = ("<", "[Request interrupted", "Caveat:", "OBSERVATION", "Observation:", "(Open file:")
_SENTENCE_RE = re.compile(r"[^.!?\n]{8,240}[.!?]?")
_CONSTRAINS_RE = re.compile(
    r"(?i)\b(?:must|never|don'?t|do not|always|only|avoid|make sure|should not|shouldn'?t"
    r"|without|instead|prefer|keep)\b"
)


def _acts_in_text(message: Mapping[str, Any]) -> bool:
    return (
        message.get("role") == "assistant"
        and not message.get("tool_calls")
        and "```" in message_text(message)
    )


def user_constraints(
    messages: Sequence[Mapping[str, Any]], skip: Sequence[bool]
) -> Iterator[tuple[int, str]]:
    """``(message index, text)`` of each constraint in ``messages``; ``skip[i]`` marks the
    messages not to read (summaries)."""
    for index, message in enumerate(messages):
        if message.get("role") != "user" or skip[index]:
            continue
        if index > 0 and _acts_in_text(messages[index - 1]):
            continue  # the output of the action before it
        text = message_text(message).strip()
        if not text or text.startswith(_NOT_TYPED):
            continue
        if len(text) <= _SHORT:
            yield index, " ".join(text.split())
            continue
        found = 0
        for sentence in _SENTENCE_RE.finditer(text[:_LONG_HEAD]):
            if found == _MAX_PER_MESSAGE:
                break
            if _CONSTRAINS_RE.search(sentence[0]):
                found += 1
                yield index, _bound(" ".join(sentence[0].split()))
