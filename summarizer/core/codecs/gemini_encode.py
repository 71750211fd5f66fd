"""Encoding for the Gemini codec: the engine's chat messages back into ``contents``. Pure.

Consecutive chat messages from the same content become that content again: the client's own
object when all its parts are there, else the content with the kept parts (the client's part
objects). A message the engine wrote is translated: a summary (or any other new message but an
assistant one) becomes a ``user`` content of one text part; a shortened tool result replaces its
part in its own content, the part's ``functionResponse.response`` becoming ``{"output": <the
shortened text>}`` (``{"error": ...}`` for an error result); a new assistant message becomes a
``model`` content of text and ``functionCall`` parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..bounded_json import loads_bounded
from ..messages import Message, content_text
from . import Decoded


def field_of(value: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` that ``value`` holds (not None), or None: the REST API reads a
    field in camelCase and in snake_case alike."""
    for name in names:
        found = value.get(name)
        if found is not None:
            return found
    return None


def encode_contents(decoded: Decoded, messages: Sequence[Message]) -> list[Any]:
    """The ``contents`` field for the engine's ``messages`` chosen from ``decoded``."""
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
            group.pieces.append(piece)
            continue
        if group is not None:
            out.append(group.render(decoded))
        group = _Group(piece)
    if group is not None:
        out.append(group.render(decoded))
    return out


class _Piece:
    """One chat message's wire form: parts of content ``index`` (None: a new content)."""

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
        found = _response_at(decoded, message.get("tool_call_id"))
        if found is not None:
            index, number = found
            original = decoded.items[index]["parts"][number]
            return _Piece(index, (number,), message, {number: _shortened(original, message)})
    return _Piece(None, None, message)


def _response_at(decoded: Decoded, call_id: Any) -> tuple[int, int] | None:
    """Where the client's tool result for ``call_id`` is: its content and part."""
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


def _shortened(original: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """The client's ``functionResponse`` part with the engine's shortened result."""
    key = "functionResponse" if "functionResponse" in original else "function_response"
    response = dict(original[key])
    outcome = "error" if message.get("is_error") else "output"
    response["response"] = {outcome: content_text(message)}
    response.pop("parts", None)  # the shortened text stands for the media as well
    return {**original, key: response}


class _Group:
    """Consecutive pieces of one content (or one new content), rendered as one."""

    def __init__(self, piece: _Piece) -> None:
        self.index = piece.index
        self.pieces = [piece]

    def render(self, decoded: Decoded) -> Any:
        if self.index is None:
            return _new_content(decoded, self.pieces[0].message)
        original = decoded.items[self.index]
        if any(piece.blocks is None for piece in self.pieces):
            return original  # a content carried whole
        numbers: list[int] = []
        replaced: dict[int, dict[str, Any]] = {}
        for piece in self.pieces:
            numbers.extend(piece.blocks or ())
            replaced.update(piece.replaced)
        parts = original["parts"]
        if not replaced and numbers == list(range(len(parts))):
            return original
        return {**original, "parts": [replaced.get(n, parts[n]) for n in numbers]}


def _new_content(decoded: Decoded, message: Message) -> dict[str, Any]:
    """A message the engine wrote (a summary; a tool result without its content), in wire form."""
    role = message.get("role")
    if role == "tool":
        response = {
            "name": _call_name(decoded, message.get("tool_call_id")),
            "response": {"output": content_text(message)},
        }
        return {"role": "user", "parts": [{"functionResponse": response}]}
    parts: list[dict[str, Any]] = []
    text = content_text(message)
    if text:
        parts.append({"text": text})
    for call in (message.get("tool_calls") or ()) if role == "assistant" else ():
        function = call.get("function", {})
        try:
            arguments = loads_bounded(function.get("arguments") or "{}")
        except ValueError:  # not JSON, or nested past the body's limits
            arguments = {"arguments": function.get("arguments")}
        parts.append({"functionCall": {"name": function.get("name"), "args": arguments}})
    if not parts:
        parts.append({"text": ""})
    return {"role": "model" if role == "assistant" else "user", "parts": parts}


def _call_name(decoded: Decoded, call_id: Any) -> str:
    """The function name of the call ``call_id`` in ``decoded`` (empty when unknown)."""
    for message in decoded.messages:
        for call in message.get("tool_calls") or ():
            if call.get("id") == call_id:
                return str(call.get("function", {}).get("name", ""))
    return ""
