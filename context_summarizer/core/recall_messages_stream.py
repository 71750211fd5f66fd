"""One streamed round of the recall loop on the Messages API (``MessagesStream``): Anthropic's
events relayed until the first ``tool_use`` block starts, held from there, read into the whole
message, and released with the recall tool's blocks taken out. Pure.

A round that continues an earlier one (whose held events were dropped and the model asked
again) is the rest of the client's one message: its ``message_start`` (and the pings before its
first block) are dropped and its block indexes follow the blocks the earlier rounds relayed.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from .sse_events import build_event, event_json, event_name

_BLOCK_EVENTS = ("content_block_start", "content_block_delta", "content_block_stop")
NO_ANSWER = "(No answer: the model kept asking for recalled text past what one turn allows.)"
"""The text of a message left with no block once the recall calls are out (the model called
recall alone past the loop's bound): the API refuses an empty assistant message."""


class MessagesStream:
    """A streamed Messages round (``RecallStream``); ``after``: the round it continues."""

    def __init__(self, after: MessagesStream | None = None) -> None:
        self._continues = after is not None
        # Where this round's index 0 is in the client's message.
        self._offset: int = 0 if after is None else after._offset + after._relayed
        self._relayed: int = 0  # blocks this round relayed live
        self._holding = False
        self._held: list[bytes] = []
        self._message: dict[str, Any] = {}
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._delta: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}

    def feed(self, event: bytes) -> list[bytes]:
        """The events to send the client now: none from the first ``tool_use`` block on
        (held), the start of a continuing round dropped and its indexes moved on."""
        payload = event_json(event) or {}
        kind = payload.get("type")
        self._read(kind, payload)
        if not self._holding and kind == "content_block_start" and _is_tool_use(payload):
            self._holding = True
        if self._holding:
            self._held.append(event)
            return []
        if self._continues and (kind == "message_start" or (kind == "ping" and not self._blocks)):
            return []
        if kind == "content_block_start":
            self._relayed += 1
        return [self._moved(event, payload, {})]

    def answer(self) -> dict[str, Any]:
        """The round's message as the non-streamed API gives it: ``message_start``'s message
        with the blocks read, ``tool_use`` inputs parsed (``{}`` when empty or not an object),
        and ``message_delta``'s top-level changes (stop reason...) and usage (cumulative: it
        overrides ``message_start``'s counts, keeping those it does not carry)."""
        message = copy.deepcopy(self._message)
        content = []
        for index in sorted(self._blocks):
            block = copy.deepcopy(self._blocks[index])
            if index in self._json:
                block["input"] = _parsed("".join(self._json[index]))
            content.append(block)
        message["content"] = content
        message.update(self._delta)
        if self._usage:
            message["usage"] = {**(message.get("usage") or {}), **self._usage}
        return message

    def release(self, name: str | None) -> list[bytes]:
        """The held events, the ``tool_use`` blocks of ``name`` taken out and the later blocks'
        indexes closed up; ``stop_reason`` "tool_use" becomes "end_turn" when no call is left
        (None: as held, only moved on where the round continues an earlier one)."""
        removed = {
            index
            for index, block in self._blocks.items()
            if name is not None and _is_block_tool_use(block) and block.get("name") == name
        }
        calls_left = any(
            _is_block_tool_use(block)
            for index, block in self._blocks.items()
            if index not in removed
        )
        shown = self._offset + len(set(self._blocks) - removed)  # blocks the client gets
        out = []
        for event in self._held:
            payload = event_json(event) or {}
            kind = payload.get("type")
            if kind in _BLOCK_EVENTS and payload.get("index") in removed:
                continue
            if kind == "message_delta" and removed and not shown:
                out.extend(_text_block(self._offset, NO_ANSWER))
            changes: dict[str, Any] = {}
            delta = payload.get("delta")
            if (
                kind == "message_delta"
                and removed
                and not calls_left
                and isinstance(delta, dict)
                and delta.get("stop_reason") == "tool_use"
            ):
                changes["delta"] = {**delta, "stop_reason": "end_turn"}
            out.append(self._moved(event, payload, changes, removed))
        return out

    def _read(self, kind: Any, payload: dict[str, Any]) -> None:
        """Take an event into the message ``answer`` gives."""
        index = payload.get("index")
        if kind == "message_start" and isinstance(payload.get("message"), dict):
            self._message = copy.deepcopy(payload["message"])
        elif kind == "content_block_start" and isinstance(index, int):
            block = payload.get("content_block")
            self._blocks[index] = copy.deepcopy(block) if isinstance(block, dict) else {}
        elif kind == "content_block_delta" and index in self._blocks:
            delta = payload.get("delta")
            if isinstance(delta, dict):
                self._apply(index, delta)
        elif kind == "message_delta":
            if isinstance(payload.get("delta"), dict):
                self._delta.update(payload["delta"])
            if isinstance(payload.get("usage"), dict):
                # A count that does not apply may come as null: message_start's stands.
                usage = payload["usage"].items()
                self._usage.update({key: value for key, value in usage if value is not None})

    def _apply(self, index: int, delta: dict[str, Any]) -> None:
        """One ``content_block_delta`` added to its block."""
        block = self._blocks[index]
        kind = delta.get("type")
        if kind == "input_json_delta":
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))
        elif kind == "text_delta":
            block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
        elif kind == "thinking_delta":
            block["thinking"] = str(block.get("thinking", "")) + str(delta.get("thinking", ""))
        elif kind == "signature_delta":
            # One per thinking block, the whole signature (the SDK's accumulator sets it too).
            block["signature"] = str(delta.get("signature", ""))
        elif kind == "citations_delta" and "citation" in delta:
            block["citations"] = [*(block.get("citations") or []), delta["citation"]]

    def _moved(
        self,
        event: bytes,
        payload: dict[str, Any],
        changes: dict[str, Any],
        removed: set[int] | None = None,
    ) -> bytes:
        """``event`` with its block index where the client's message has it (and ``changes``):
        the same bytes when nothing changes, else rebuilt."""
        index = payload.get("index")
        if payload.get("type") in _BLOCK_EVENTS and isinstance(index, int):
            moved = self._offset + index - sum(1 for gone in removed or () if gone < index)
            if moved != index:
                changes = {**changes, "index": moved}
        if not changes:
            return event
        return build_event({**payload, **changes}, event_name(event))


def _text_block(index: int, text: str) -> list[bytes]:
    """The three events of a text block at ``index``."""
    return [
        build_event(
            {"type": "content_block_start", "index": index,
             "content_block": {"type": "text", "text": ""}},
            "content_block_start",
        ),
        build_event(
            {"type": "content_block_delta", "index": index,
             "delta": {"type": "text_delta", "text": text}},
            "content_block_delta",
        ),
        build_event({"type": "content_block_stop", "index": index}, "content_block_stop"),
    ]  # fmt: skip


def _is_tool_use(payload: dict[str, Any]) -> bool:
    return _is_block_tool_use(payload.get("content_block"))


def _is_block_tool_use(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_use"


def _parsed(text: str) -> Any:
    """A ``tool_use`` block's input from its concatenated ``partial_json``."""
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
