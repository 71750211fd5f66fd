"""Encoding for the Anthropic Messages codec: the engine's chat messages back into ``messages``.
Pure.

Consecutive chat messages from the same wire message become that message again: the client's own
object when all its blocks are there, else a message of the kept blocks (the client's block
objects). A message the engine wrote is translated: a summary becomes a user message of one text
block, a shortened tool result replaces its block in its own turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..bounded_json import loads_bounded
from ..messages import Message
from . import OPAQUE_KEY, Decoded
from .regroup import regroup

_STRIP = frozenset({"cache_control"})
"""Block keys that are delivery hints, not conversation: never part of a chat message."""


def stripped(block: Mapping[str, Any]) -> dict[str, Any]:
    """``block`` without its delivery hints (``cache_control``)."""
    return {key: value for key, value in block.items() if key not in _STRIP}


def encode_messages(decoded: Decoded, messages: Sequence[Message]) -> list[Any]:
    """The ``messages`` field for the engine's ``messages`` chosen from ``decoded``."""
    return regroup(
        decoded,
        messages,
        blocks_key="content",
        shortened=_shortened,
        new_item=lambda decoded, message: _new_message(message),
    )


def _shortened(original: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """The client's ``tool_result`` block with the engine's shortened result."""
    return {**stripped(original), "content": _wire_content(message.get("content"))}


def _new_message(message: Message) -> dict[str, Any]:
    """A message the engine wrote (a summary; a tool result without its turn), in wire form."""
    role = message.get("role")
    if role == "tool":
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.get("tool_call_id"),
            "content": _wire_content(message.get("content")),
        }
        return {"role": "user", "content": [block]}
    # Thinking comes first in an assistant turn, as the API writes it.
    blocks: list[dict[str, Any]] = list(message.get(OPAQUE_KEY) or ())
    content = message.get("content")
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        blocks.extend(_wire_content(content))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        try:
            arguments = loads_bounded(function.get("arguments") or "{}")
        except ValueError:  # not JSON, or nested past the body's limits
            arguments = {"arguments": function.get("arguments")}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": arguments,
            }
        )
    return {"role": "assistant" if role == "assistant" else "user", "content": blocks}


def _wire_content(content: Any) -> Any:
    """Chat content as Anthropic content: a string stays one; text parts become text blocks."""
    if isinstance(content, str) or content is None:
        return content or ""
    blocks: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
    return blocks
