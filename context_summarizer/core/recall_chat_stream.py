"""A streamed chat completion round of the recall loop (``RecallStream``): chunks relayed until
the first tool call delta, held from there, and read back as the whole completion. Pure.

Chunks are self-contained (each names its choice and, for a call, the call's index), so a round
that continues an earlier one is relayed as it comes; only the held chunks are rewritten, when
the recall calls are taken out of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .sse_events import build_event, event_json


class ChatStream:
    """One streamed round of chat completion chunks (``choices[0]`` only: the loop is offered
    only to requests of one choice)."""

    def __init__(self, after: ChatStream | None = None) -> None:
        self.after = after
        self.held: list[bytes] = []
        self._first: dict[str, Any] | None = None
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None

    def feed(self, event: bytes) -> list[bytes]:
        """The event, relayed until the first chunk with a tool call delta, then held."""
        chunk = event_json(event)
        if chunk is not None:
            self._read(chunk)
        if self.held or (chunk is not None and _call_deltas(chunk)):
            self.held.append(event)
            return []
        return [event]

    def _read(self, chunk: Mapping[str, Any]) -> None:
        if self._first is None and chunk.get("choices") is not None:
            self._first = dict(chunk)
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choice = _choice(chunk)
        if choice is None:
            return
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            return
        if isinstance(delta.get("content"), str):
            self._content.append(delta["content"])
        for part in _call_deltas(chunk):
            index = part.get("index", 0)
            call = self._calls.setdefault(
                index if isinstance(index, int) else 0,
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if isinstance(part.get("id"), str):
                call["id"] = part["id"]
            function = part.get("function")
            if isinstance(function, Mapping):
                if isinstance(function.get("name"), str):
                    call["function"]["name"] += function["name"]
                if isinstance(function.get("arguments"), str):
                    call["function"]["arguments"] += function["arguments"]

    def answer(self) -> dict[str, Any]:
        """The whole completion the round's chunks make."""
        first = self._first or {}
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._content) if self._content else None,
        }
        if self._calls:
            message["tool_calls"] = [self._calls[index] for index in sorted(self._calls)]
        answer = {
            "id": first.get("id", ""),
            "object": "chat.completion",
            "created": first.get("created", 0),
            "model": first.get("model", ""),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish}],
        }
        if self._usage is not None:
            answer["usage"] = self._usage
        return answer

    def release(self, name: str | None) -> list[bytes]:
        """The held chunks, the calls of ``name`` taken out and the others' indexes closed up;
        the finish reason ``stop`` when no call is left."""
        if name is None:
            return list(self.held)
        removed = {i for i, call in self._calls.items() if call["function"]["name"] == name}
        if not removed:
            return list(self.held)
        kept = [i for i in sorted(self._calls) if i not in removed]
        renumber = {old: new for new, old in enumerate(kept)}
        out = []
        for event in self.held:
            chunk = event_json(event)
            rewritten = None if chunk is None else _without_calls(chunk, removed, renumber)
            if rewritten is None:
                out.append(event)
            elif rewritten:
                out.append(build_event(rewritten))
        return out


def _choice(chunk: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    return choices[0]


def _call_deltas(chunk: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    choice = _choice(chunk)
    delta = choice.get("delta") if choice is not None else None
    if not isinstance(delta, Mapping) or not isinstance(delta.get("tool_calls"), list):
        return []
    return [part for part in delta["tool_calls"] if isinstance(part, Mapping)]


def _without_calls(
    chunk: Mapping[str, Any], removed: set[int], renumber: Mapping[int, int]
) -> dict[str, Any] | None:
    """The chunk without the deltas of the ``removed`` calls, the others renumbered; None when
    the chunk is unchanged, ``{}`` when nothing is left of it."""
    choice = _choice(chunk)
    if choice is None:
        return None
    delta = choice.get("delta")
    parts = _call_deltas(chunk)
    finish = choice.get("finish_reason")
    if not parts and finish != "tool_calls":
        return None
    new_choice = dict(choice)
    if finish == "tool_calls" and not renumber:
        new_choice["finish_reason"] = "stop"
    if parts:
        kept = [
            {**part, "index": renumber[part.get("index", 0)]}
            for part in parts
            if part.get("index", 0) not in removed
        ]
        new_delta = {key: value for key, value in dict(delta or {}).items() if key != "tool_calls"}
        if kept:
            new_delta["tool_calls"] = kept
        elif (
            not new_delta.get("content")
            and new_choice.get("finish_reason") is None
            and chunk.get("usage") is None
        ):
            return {}
        new_choice["delta"] = new_delta
    return {**chunk, "choices": [new_choice, *chunk["choices"][1:]]}
