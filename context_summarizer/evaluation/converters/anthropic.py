"""Anthropic Messages content (``text``, ``thinking``, ``tool_use``, ``tool_result`` blocks) as
Chat Completions messages.

- an assistant message's text blocks become its content, its ``tool_use`` blocks its
  ``tool_calls`` (``input`` as JSON ``arguments``), with ``""`` content when it has no text (some
  OpenAI-compatible servers reject ``null``); ``thinking`` and ``redacted_thinking`` blocks are
  dropped: Chat Completions has no place for them, and Anthropic's API itself drops earlier
  turns' thinking from the context;
- each ``tool_result`` block becomes a ``role: tool`` message answering its ``tool_use_id``, its
  text (text parts joined by newlines; an image part as ``[image]``);
- a user message's other blocks become one user message (text joined; an image as ``[image]``).

``AnthropicBuilder`` takes messages one at a time in the order a transcript stores them, where
one assistant message may be split over several records (same message id) and its tool results
may follow before its last block; ``openai_messages`` then pairs calls and results.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
"""Block types left out of the converted messages."""


def block_text(value: Any) -> str:
    """The text of a content value: a string, or the text of its blocks (images as
    ``[image]``), joined by newlines."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        return "" if value is None else json.dumps(value, ensure_ascii=False)
    pieces = []
    for block in value:
        if isinstance(block, str):
            pieces.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text":
            pieces.append(str(block.get("text") or ""))
        elif isinstance(block, Mapping) and block.get("type") == "image":
            pieces.append("[image]")
    return "\n".join(piece for piece in pieces if piece)


class AnthropicBuilder:
    """Chat Completions messages built from Anthropic messages added in transcript order."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        """The messages so far (``finish`` flushes the last assistant message's results)."""
        self.dropped_thinking = 0
        """How many thinking blocks were left out."""
        self._assistant: dict[str, Any] | None = None
        self._assistant_id: str | None = None
        self._results: list[dict[str, Any]] = []

    def add_assistant(self, content: Any, message_id: str | None) -> None:
        """An assistant message, or (same ``message_id`` as the open one) more of its blocks."""
        if self._assistant is None or message_id is None or message_id != self._assistant_id:
            self._flush()
            self._assistant = {"role": "assistant", "content": ""}
            self._assistant_id = message_id
        message = self._assistant
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        for block in blocks:
            kind = block.get("type") if isinstance(block, Mapping) else None
            if kind in THINKING_BLOCKS:
                self.dropped_thinking += 1
            elif kind == "text" and isinstance(block, Mapping):
                text = str(block.get("text") or "")
                if text.strip():
                    joined = f"{message['content']}\n\n{text}" if message["content"] else text
                    message["content"] = joined.strip()
            elif kind == "tool_use" and isinstance(block, Mapping):
                call = {
                    "id": str(block.get("id")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name")),
                        "arguments": json.dumps(block.get("input") or {}, ensure_ascii=False),
                    },
                }
                message.setdefault("tool_calls", []).append(call)

    def add_user(self, content: Any) -> list[Mapping[str, Any]]:
        """A user message: its tool results answer the open assistant message's calls, its other
        blocks become a user message. Returns the ``tool_result`` blocks, for the caller."""
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        results = [b for b in blocks if isinstance(b, Mapping) and b.get("type") == "tool_result"]
        for result in results:
            self._results.append(
                {
                    "role": "tool",
                    "tool_call_id": str(result.get("tool_use_id")),
                    "content": block_text(result.get("content")),
                }
            )
        rest = [
            b for b in blocks if not (isinstance(b, Mapping) and b.get("type") == "tool_result")
        ]
        text = block_text(rest)
        if text.strip():
            self._flush()
            self.messages.append({"role": "user", "content": text})
        return results

    def finish(self) -> list[dict[str, Any]]:
        """Every message, the last assistant message and its results flushed."""
        self._flush()
        return self.messages

    def _flush(self) -> None:
        if self._assistant is not None:
            self.messages.append(self._assistant)
        self.messages.extend(self._results)
        self._assistant, self._assistant_id, self._results = None, None, []
