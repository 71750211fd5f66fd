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

_STRIP = frozenset({"cache_control"})
"""Block keys that are delivery hints, not conversation: never part of a chat message."""


def stripped(block: Mapping[str, Any]) -> dict[str, Any]:
    """``block`` without its delivery hints (``cache_control``)."""
    return {key: value for key, value in block.items() if key not in _STRIP}


def encode_messages(decoded: Decoded, messages: Sequence[Message]) -> list[Any]:
    """The ``messages`` field for the engine's ``messages`` chosen from ``decoded``."""
    start = 0
    while start < len(messages) and start < decoded.system_items:
        if messages[start] is not decoded.messages[start]:
            break
        start += 1
    out: list[Any] = []
    group: _Group | None = None
    for message in messages[start:]:
        piece = _piece(decoded, message)
        if group is not None and piece.index is not None and piece.index == group.index:
            group.add(piece)
            continue
        if group is not None:
            out.append(group.render(decoded))
        group = _Group(piece)
    if group is not None:
        out.append(group.render(decoded))
    return out


class _Piece:
    """One chat message's wire form: blocks of wire message ``index`` (None: a new message)."""

    __slots__ = ("blocks", "index", "message", "replaced")

    def __init__(
        self,
        index: int | None,
        blocks: tuple[int, ...] | None,
        message: Message,
        replaced: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.index = index
        self.blocks = blocks
        self.message = message
        self.replaced = replaced or {}


def _piece(decoded: Decoded, message: Message) -> _Piece:
    origin = decoded.origins.get(id(message))
    if origin is not None and origin.items:
        return _Piece(origin.items[0], origin.blocks, message)
    if message.get("role") == "tool":
        found = _tool_result_at(decoded, message.get("tool_call_id"))
        if found is not None:
            index, number = found
            original = decoded.items[index]["content"][number]
            block = {**stripped(original), "content": _wire_content(message.get("content"))}
            return _Piece(index, (number,), message, {number: block})
    return _Piece(None, None, message)


def _tool_result_at(decoded: Decoded, call_id: Any) -> tuple[int, int] | None:
    for message in decoded.messages:
        origin = decoded.origins.get(id(message))
        if (
            origin is not None
            and origin.blocks is not None
            and message.get("role") == "tool"
            and message.get("tool_call_id") == call_id
        ):
            return origin.items[0], origin.blocks[0]
    return None


class _Group:
    """Consecutive pieces of one wire message (or one new message), rendered as one."""

    def __init__(self, piece: _Piece) -> None:
        self.index = piece.index
        self.pieces = [piece]

    def add(self, piece: _Piece) -> None:
        self.pieces.append(piece)

    def render(self, decoded: Decoded) -> Any:
        if self.index is None:
            return _new_message(self.pieces[0].message)
        original = decoded.items[self.index]
        if any(piece.blocks is None for piece in self.pieces):
            return original  # a message carried whole
        numbers: list[int] = []
        replaced: dict[int, dict[str, Any]] = {}
        for piece in self.pieces:
            numbers.extend(piece.blocks or ())
            replaced.update(piece.replaced)
        content = original["content"]
        if not replaced and numbers == list(range(len(content))):
            return original
        blocks = [replaced.get(n, content[n]) for n in numbers]
        return {**original, "content": blocks}


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
