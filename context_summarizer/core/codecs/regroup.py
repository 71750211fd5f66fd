"""Chat messages back into an API's wire items, shared by the codecs whose wire items hold
several blocks (Anthropic's ``messages[].content``, Gemini's ``contents[].parts``). Pure.

Consecutive chat messages decoded from the same wire item become that item again: the client's
own object when all its blocks are there, else the item with the kept blocks (the client's block
objects). A tool message whose result the client sent, shortened by the engine, replaces its
block in its own item (``shortened``); any other message the engine wrote is translated whole
(``new_item``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..messages import Message
from . import Decoded

Shortened = Callable[[Mapping[str, Any], Message], dict[str, Any]]
"""The client's result block with the engine's shortened result (the block, the tool message)."""
NewItem = Callable[[Decoded, Message], Any]
"""A message the engine wrote, as a wire item."""


def regroup(
    decoded: Decoded,
    messages: Sequence[Message],
    *,
    blocks_key: str,
    shortened: Shortened,
    new_item: NewItem,
) -> list[Any]:
    """The wire items for the engine's ``messages`` chosen from ``decoded``; each item's blocks
    are under ``blocks_key``. The leading messages that stand for a top-level field
    (``Decoded.system_items``) are left out while the engine kept them."""
    start = 0
    while start < len(messages) and start < decoded.system_items:
        if messages[start] is not decoded.messages[start]:
            break
        start += 1
    out: list[Any] = []
    group: _Group | None = None
    for message in messages[start:]:
        piece = _piece(decoded, message, blocks_key, shortened)
        if group is not None and piece.index is not None and piece.index == group.index:
            group.pieces.append(piece)
            continue
        if group is not None:
            out.append(group.render(decoded, blocks_key, new_item))
        group = _Group(piece)
    if group is not None:
        out.append(group.render(decoded, blocks_key, new_item))
    return out


class _Piece:
    """One chat message's wire form: blocks of wire item ``index`` (None: a new item)."""

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


def _piece(decoded: Decoded, message: Message, blocks_key: str, shortened: Shortened) -> _Piece:
    origin = decoded.origins.get(id(message))
    if origin is not None and origin.items:
        return _Piece(origin.items[0], origin.blocks, message)
    if message.get("role") == "tool":
        found = _result_at(decoded, message.get("tool_call_id"))
        if found is not None:
            index, number = found
            original = decoded.items[index][blocks_key][number]
            return _Piece(index, (number,), message, {number: shortened(original, message)})
    return _Piece(None, None, message)


def _result_at(decoded: Decoded, call_id: Any) -> tuple[int, int] | None:
    """Where the client's tool result for ``call_id`` is: its wire item and block."""
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
    """Consecutive pieces of one wire item (or one new item), rendered as one."""

    def __init__(self, piece: _Piece) -> None:
        self.index = piece.index
        self.pieces = [piece]

    def render(self, decoded: Decoded, blocks_key: str, new_item: NewItem) -> Any:
        if self.index is None:
            return new_item(decoded, self.pieces[0].message)
        original = decoded.items[self.index]
        if any(piece.blocks is None for piece in self.pieces):
            return original  # an item carried whole
        numbers: list[int] = []
        replaced: dict[int, dict[str, Any]] = {}
        for piece in self.pieces:
            numbers.extend(piece.blocks or ())
            replaced.update(piece.replaced)
        blocks = original[blocks_key]
        if not replaced and numbers == list(range(len(blocks))):
            return original
        return {**original, blocks_key: [replaced.get(n, blocks[n]) for n in numbers]}
