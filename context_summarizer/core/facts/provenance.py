"""Which messages are summaries (``is_summary_message``), so that the ledger never takes a fact
from one: a summary is what a model wrote about turns, not what the agent and its tools said,
and extracting from it would launder the model's inventions into "verbatim" facts.

A summary reaches the raw history when a client keeps the messages it was sent (the engine's
summary message, rewritten in) or when the agent compacts by itself (Claude Code's continuation
message). Both are recognised by how they open; the engine's also by its ledger header.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..messages import content_text
from .ledger import LEDGER_HEADER

SUMMARY_OPENINGS: tuple[str, ...] = (
    "[Context summary]",  # the engine's summary message (prompts/*/summary_frame.md)
    "This session is being continued from a previous conversation",  # Claude Code's compaction
)
"""How a summary message opens (after leading whitespace)."""

_SUMMARY_ROLES = frozenset({"user", "system", "developer"})
_OPENING_CHARS = 200


def is_summary_message(message: Mapping[str, Any]) -> bool:
    """Whether ``message`` is a summary standing for earlier turns, not something said.

    A user, system or developer message whose text opens with one of ``SUMMARY_OPENINGS`` or
    holds a line that is exactly ``LEDGER_HEADER`` (only the engine writes that line). Assistant
    and tool messages never are: what the agent or a tool said is always a source of facts.
    """
    if message.get("role") not in _SUMMARY_ROLES:
        return False
    text = content_text(message)
    if text.lstrip()[:_OPENING_CHARS].startswith(SUMMARY_OPENINGS):
        return True
    return LEDGER_HEADER in text and any(
        line.strip() == LEDGER_HEADER for line in text.splitlines()
    )
