"""A chat completion's answer: the reply cut to the request's limit, and its two wire shapes.

:func:`answer_for` turns a :class:`Reply` into what the completion carries (content cut to
``max_completion_tokens`` / ``max_tokens``, tool calls with ids, function or custom, completion
tokens counted);
:func:`usage_for` is its ``usage``; :func:`completion_body` renders it as one ``chat.completion``
JSON body and :func:`stream_chunks` as the ``chat.completion.chunk`` events of a stream.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .responders import Reply
from .state import UpstreamState

__all__ = [
    "Answer",
    "answer_for",
    "call_name_and_arguments",
    "completion_body",
    "stream_chunks",
    "usage_for",
]


@dataclass(slots=True)
class Answer:
    """A reply as the completion carries it."""

    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    completion_tokens: int


def answer_for(upstream: UpstreamState, reply: Reply, limit: int | None) -> Answer:
    """``reply`` as the completion carries it: cut to ``limit`` tokens, tool calls with ids."""
    counter = upstream.counter
    content = reply.content
    calls = list(reply.tool_calls)
    finish_reason = reply.derived_finish_reason()
    content_tokens = counter.encoding.encode_ordinary(content) if content else []
    if limit is not None and len(content_tokens) > limit:
        content_tokens = content_tokens[:limit]
        content = counter.encoding.decode(content_tokens)
        calls = []
        finish_reason = "length"
    tool_calls: list[dict[str, Any]] = []
    completion_tokens = len(content_tokens)
    for spec in calls:
        arguments = spec.arguments_json()
        completion_tokens += counter.text(spec.name) + counter.text(arguments)
        call_id = spec.id or upstream._next_call_id()
        if spec.type == "custom":
            custom = {"name": spec.name, "input": arguments}
            tool_calls.append({"id": call_id, "type": "custom", "custom": custom})
        else:
            function = {"name": spec.name, "arguments": arguments}
            tool_calls.append({"id": call_id, "type": "function", "function": function})
    return Answer(content, tool_calls, finish_reason, completion_tokens)


def call_name_and_arguments(call: dict[str, Any]) -> tuple[str, str]:
    """A chat ``tool_calls`` entry's tool name and its arguments (a custom call's ``input``)."""
    if call.get("type") == "custom":
        return call["custom"]["name"], call["custom"]["input"]
    return call["function"]["name"], call["function"]["arguments"]


def usage_for(prompt_tokens: int, cached_tokens: int, answer: Answer) -> dict[str, Any]:
    """The completion's ``usage``, with OpenAI's details."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": prompt_tokens + answer.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


def completion_body(
    completion_id: str, created: int, model: str, answer: Answer, usage: dict[str, Any]
) -> dict[str, Any]:
    """The ``chat.completion`` JSON body answering with ``answer``."""
    message_out: dict[str, Any] = {
        "role": "assistant",
        "content": answer.content,
        "refusal": None,
        "annotations": [],
    }
    if answer.tool_calls:
        message_out["tool_calls"] = answer.tool_calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message_out,
                "logprobs": None,
                "finish_reason": answer.finish_reason,
            }
        ],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": "fp_test",
    }


def _pieces(text: str, count: int) -> list[str]:
    """``text`` split into at most ``count`` consecutive non-empty pieces."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def stream_chunks(
    completion_id: str,
    created: int,
    model: str,
    answer: Answer,
    usage: dict[str, Any] | None,
) -> Iterator[dict[str, Any]]:
    """``answer`` as the chunks of a stream (``usage``: sent in a last chunk of its own)."""

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "service_tier": "default",
            "system_fingerprint": "fp_test",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if usage is not None:
            out["usage"] = None
        return out

    first_content = "" if answer.content else None
    yield chunk({"role": "assistant", "content": first_content, "refusal": None})
    for piece in _pieces(answer.content or "", 4):
        yield chunk({"content": piece})
    for index, call in enumerate(answer.tool_calls):
        kind = call["type"]
        field = "input" if kind == "custom" else "arguments"
        name, arguments = call_name_and_arguments(call)
        start = {"index": index, "id": call["id"], "type": kind, kind: {"name": name, field: ""}}
        yield chunk({"tool_calls": [start]})
        for piece in _pieces(arguments, 3):
            yield chunk({"tool_calls": [{"index": index, kind: {field: piece}}]})
    yield chunk({}, answer.finish_reason)
    if usage is not None:
        final = chunk({})
        final["choices"] = []
        final["usage"] = usage
        yield final
