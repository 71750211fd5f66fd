"""A Responses API answer as the events of its SSE stream, numbered like OpenAI's.

``response.created`` and ``response.in_progress`` (the response, in progress and empty), then for
each output item ``response.output_item.added``, its content (a message: its text part added,
its text in ``response.output_text.delta`` pieces, done, the part done; a function call: its
arguments in ``response.function_call_arguments.delta`` pieces, done; a custom tool call: its
input in ``response.custom_tool_call_input.delta`` pieces, done) and
``response.output_item.done``, and last ``response.completed`` (or ``response.incomplete`` for a
response cut short) carrying the whole response with its usage. Every event has a
``sequence_number``; the transport writes each under an ``event:`` line naming its type.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .answers import _pieces

__all__ = ["stream_events"]

TEXT_PIECES = 4
"""A message's text is streamed in (at most) this many deltas."""
ARGUMENT_PIECES = 3
"""A function call's arguments are streamed in (at most) this many deltas."""

_Event = Callable[..., dict[str, Any]]
_CALL_FIELDS = {"function_call": "arguments", "custom_tool_call": "input"}


def stream_events(response: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The events streaming the finished ``response``."""
    numbers = itertools.count()

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(numbers), **fields}

    started = {
        **response,
        "status": "in_progress",
        "completed_at": None,
        "incomplete_details": None,
        "output": [],
        "usage": None,
    }
    yield event("response.created", response=started)
    yield event("response.in_progress", response=started)
    for index, item in enumerate(response["output"]):
        yield from _item_events(event, index, item)
    final = "response.completed" if response["status"] == "completed" else "response.incomplete"
    yield event(final, response=dict(response))


def _item_events(event: _Event, index: int, item: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of one output item, from added to done."""
    kind = item["type"]
    if kind == "message":
        added = {**item, "status": "in_progress", "content": []}
    elif kind in _CALL_FIELDS:
        added = {**item, "status": "in_progress", _CALL_FIELDS[kind]: ""}
    else:
        added = {k: v for k, v in item.items() if k != "encrypted_content"}
    yield event("response.output_item.added", output_index=index, item=added)
    if kind == "message":
        yield from _message_events(event, index, item)
    elif kind == "function_call":
        where = {"item_id": item["id"], "output_index": index}
        for piece in _pieces(item["arguments"], ARGUMENT_PIECES):
            yield event("response.function_call_arguments.delta", **where, delta=piece)
        yield event(
            "response.function_call_arguments.done",
            **where,
            name=item["name"],
            arguments=item["arguments"],
        )
    elif kind == "custom_tool_call":
        where = {"item_id": item["id"], "output_index": index}
        for piece in _pieces(item["input"], ARGUMENT_PIECES):
            yield event("response.custom_tool_call_input.delta", **where, delta=piece)
        yield event("response.custom_tool_call_input.done", **where, input=item["input"])
    yield event("response.output_item.done", output_index=index, item=dict(item))


def _message_events(event: _Event, index: int, item: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The events of a message's content parts."""
    for number, part in enumerate(item["content"]):
        where = {"item_id": item["id"], "output_index": index, "content_index": number}
        text = part.get("text", "")
        empty = {**part, "text": ""} if "text" in part else dict(part)
        yield event("response.content_part.added", **where, part=empty)
        if part.get("type") == "output_text":
            for piece in _pieces(text, TEXT_PIECES):
                yield event("response.output_text.delta", **where, delta=piece, logprobs=[])
            yield event("response.output_text.done", **where, text=text, logprobs=[])
        yield event("response.content_part.done", **where, part=dict(part))
