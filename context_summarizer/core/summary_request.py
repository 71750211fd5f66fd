"""Building the self-summary request and the message that carries its answer. Pure, no I/O.

The summary request is the conversation exactly as the model last saw it (same model, same
messages, same tools in the same order) plus one appended user message from ``prompts/``, so the
provider's prefix cache serves everything but that last message. Nothing before the appended
instruction is re-rendered, re-ordered or re-serialised here: the caller's dicts go through as is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .messages import Message

SUMMARY_SECTIONS = (
    "Task and constraints",
    "Current state",
    "Files and identifiers",
    "Decisions",
    "Errors and fixes",
    "Open work and next step",
)


def build_summary_request(
    messages: Sequence[Message],
    *,
    model: str,
    tools: Sequence[Mapping[str, Any]] | None,
    max_summary_tokens: int,
    instruction: str,
    cap_key: str = "max_completion_tokens",
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A Chat Completions body: ``messages`` + one user ``instruction``, no tool use allowed.

    ``tools`` are passed unchanged (the same list object) so their serialisation, and so the
    cached prefix, is the agent's own; ``tool_choice`` is only set when there are tools, since
    the API rejects it otherwise.
    """
    body: dict[str, Any] = {"model": model}
    if extra:
        body.update(extra)
    body["messages"] = [*messages, {"role": "user", "content": instruction}]
    if tools:
        body["tools"] = tools
        body["tool_choice"] = "none"
    body[cap_key] = max_summary_tokens
    return body


def strict_instruction(
    template: str, *, max_words: int, required_facts: Sequence[str], **fields: str
) -> str:
    """The instruction for the one retry after an unusable or fact-poor summary, from
    ``template`` (``PromptSet.self_summary_strict`` or its ``since`` twin, whose ``anchor`` goes in
    ``fields``, as does ``problem``: what was wrong, for templates that say it)."""
    facts = "; ".join(required_facts[:40]) if required_facts else "(none listed)"
    return template.format(max_words=max_words, required_facts=facts, **fields)


def summary_message(summary: str, ledger_text: str, frame: str) -> Message:
    """The user message that replaces the compacted span: ``frame`` (``PromptSet.summary_frame``)
    around the summary and the fact ledger."""
    content = frame.format(summary=summary.strip(), ledger=ledger_text.strip()).rstrip()
    return {"role": "user", "content": content}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n|\n(?=\s*[-*#])")


def cut_at_sentence(text: str, max_tokens: int, count_text: Callable[[str], int]) -> str:
    """``text`` cut to at most ``max_tokens`` at the last sentence or paragraph boundary."""
    if count_text(text) <= max_tokens:
        return text
    # Binary search the longest prefix within budget, then back off to a boundary.
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count_text(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    prefix = text[:lo]
    boundaries = [m.start() for m in _SENTENCE_END.finditer(prefix)]
    if boundaries and boundaries[-1] > len(prefix) // 2:
        prefix = prefix[: boundaries[-1]]
    return prefix.rstrip()
