"""Cutting tool outputs to their head and tail: the degradation step the planner takes over the
trigger, and the one the engine takes on the final turn once the summaries are written
(``records.cut_final_turn``) when the request is still over the window."""

from __future__ import annotations

from collections.abc import Sequence

from ..messages import Message, message_text
from .view import CountFn, ViewItem

MIN_KEPT_OUTPUT_TOKENS = 128
"""A tool output cut to fit keeps at least this much of its head and tail."""


def truncate_message(
    message: Message, *, keep_tokens: int, original_tokens: int, marker: str
) -> Message:
    """A copy of a tool message cut to its head and tail, about ``keep_tokens`` tokens in all."""
    text = message_text(message)
    # Characters per token measured on this very text keeps the cut close to the budget.
    chars_per_token = max(1.0, len(text) / max(1, original_tokens))
    keep_chars = max(0, int(keep_tokens * chars_per_token))
    head = text[: keep_chars // 2]
    tail = text[len(text) - keep_chars // 2 :] if keep_chars // 2 else ""
    note = marker.format(elided_tokens=max(0, original_tokens - keep_tokens))
    replaced = dict(message)
    replaced["content"] = head + note + tail
    return replaced


def cut_outputs(
    view: Sequence[ViewItem],
    outputs: Sequence[int],
    *,
    size: int,
    goal: int,
    count: CountFn,
    marker: str,
) -> tuple[dict[int, Message], int]:
    """Tool outputs of ``view`` (indices ``outputs``) cut to their head and tail, largest
    first, each at most once, until a request of ``size`` tokens is down to ``goal``: the
    replacements by view index, and the size reached."""
    cuts: dict[int, Message] = {}
    for i in sorted(outputs, key=lambda i: view[i].tokens, reverse=True):
        if size <= goal:
            break
        # Room for the marker and recount drift; never below a useful head and tail.
        keep = max(MIN_KEPT_OUTPUT_TOKENS, view[i].tokens - (size - goal) - 64)
        if keep >= view[i].tokens:
            continue
        replaced = truncate_message(
            view[i].message, keep_tokens=keep, original_tokens=view[i].tokens, marker=marker
        )
        new_tokens = count(replaced)
        if new_tokens < view[i].tokens:
            cuts[i] = replaced
            size -= view[i].tokens - new_tokens
    return cuts, size
