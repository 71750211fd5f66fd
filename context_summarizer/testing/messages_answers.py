"""A Messages API answer: the reply as Anthropic's content blocks, and its two wire shapes.

:func:`message_blocks` turns an :class:`~context_summarizer.testing.answers.Answer` (the reply
already cut to ``max_tokens``) into a text block and ``tool_use`` blocks, :func:`stop_reason_for`
names why it stopped and :func:`message_usage` is its ``usage``; :func:`message_body` renders it as
one ``message`` JSON body and :func:`message_events` as the events of an SSE stream
(``message_start``, ``ping``, per block ``content_block_start`` / ``content_block_delta`` /
``content_block_stop``, ``message_delta``, ``message_stop``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .answers import Answer, _pieces, call_name_and_arguments
from .messages_cache import CacheUsage
from .responders import Reply
from .state import UpstreamState

__all__ = [
    "message_blocks",
    "message_body",
    "message_events",
    "message_usage",
    "stop_reason_for",
]


def _input_object(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as a ``tool_use`` input: the parsed object (``{}`` when the
    arguments are not a JSON object)."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def message_blocks(upstream: UpstreamState, reply: Reply, answer: Answer) -> list[dict[str, Any]]:
    """``answer`` as content blocks: its text (if any), then a ``tool_use`` block per call, with
    the reply's own id or a fresh, unique ``toolu_...`` one."""
    blocks: list[dict[str, Any]] = []
    if answer.content:
        blocks.append({"type": "text", "text": answer.content})
    for spec, call in zip(reply.tool_calls, answer.tool_calls, strict=False):
        name, arguments = call_name_and_arguments(call)
        # The Messages API has no custom tools: a custom call's raw input goes as {"input": ...}.
        tool_input = {"input": arguments} if spec.type == "custom" else _input_object(arguments)
        blocks.append(
            {
                "type": "tool_use",
                "id": spec.id or upstream._next_tool_use_id(),
                "name": name,
                "input": tool_input,
            }
        )
    return blocks


def stop_reason_for(answer: Answer) -> str:
    """Anthropic's ``stop_reason``: ``"max_tokens"`` when cut short, ``"tool_use"`` with tool
    calls, ``"refusal"`` for a ``content_filter`` finish, else ``"end_turn"``."""
    if answer.finish_reason == "length":
        return "max_tokens"
    if answer.tool_calls:
        return "tool_use"
    if answer.finish_reason == "content_filter":
        return "refusal"
    return "end_turn"


def message_usage(cache: CacheUsage, output_tokens: int) -> dict[str, Any]:
    """The message's ``usage``."""
    return {
        "input_tokens": cache.input_tokens,
        "cache_creation_input_tokens": cache.cache_creation_input_tokens,
        "cache_read_input_tokens": cache.cache_read_input_tokens,
        "output_tokens": output_tokens,
    }


def message_body(
    message_id: str,
    model: str,
    blocks: list[dict[str, Any]],
    stop_reason: str,
    usage: dict[str, Any],
) -> dict[str, Any]:
    """The ``message`` JSON body answering with ``blocks``."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _block_events(index: int, block: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One content block as its start, delta and stop events."""
    if block["type"] == "text":
        yield {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        }
        for piece in _pieces(block["text"], 4):
            delta = {"type": "text_delta", "text": piece}
            yield {"type": "content_block_delta", "index": index, "delta": delta}
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        yield {"type": "content_block_start", "index": index, "content_block": start}
        for piece in ["", *_pieces(json.dumps(block["input"], ensure_ascii=False), 3)]:
            delta = {"type": "input_json_delta", "partial_json": piece}
            yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def message_events(
    message_id: str,
    model: str,
    blocks: list[dict[str, Any]],
    stop_reason: str,
    usage: dict[str, Any],
) -> Iterator[dict[str, Any]]:
    """``blocks`` as the events of a stream; ``message_start`` carries the input usage (and 1
    output token), ``message_delta`` the stop reason and the final usage."""
    start = message_body(message_id, model, [], stop_reason, {**usage, "output_tokens": 1})
    start["stop_reason"] = None
    yield {"type": "message_start", "message": start}
    yield {"type": "ping"}
    for index, block in enumerate(blocks):
        yield from _block_events(index, block)
    yield {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": usage,
    }
    yield {"type": "message_stop"}
