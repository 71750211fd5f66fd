"""A Responses API answer: a chat :class:`~context_summarizer.testing.answers.Answer` as output
items, its ``usage``, and the ``response`` object that carries them.

:func:`output_items` maps the answer to a ``reasoning`` item (only when the request includes
``reasoning.encrypted_content``), a ``message`` item (its text) and ``function_call`` items
(``custom_tool_call`` items for a custom tool's calls);
:func:`usage_for` is the response's ``usage``; :func:`response_body` is the whole ``Response``,
``"incomplete"`` when the answer was cut short. :func:`compaction_output` is what
``/v1/responses/compact`` answers: the conversation's user messages and one ``compaction`` item.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from .answers import Answer, call_name_and_arguments
from .responses_chat import rendered_item
from .responses_input import item_type, seal
from .state import UpstreamState

__all__ = [
    "INCOMPLETE_REASONS",
    "compaction_output",
    "output_items",
    "response_body",
    "usage_for",
]

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
"""The chat ``finish_reason`` s that leave a response ``"incomplete"``, and the reason given."""


def output_items(
    upstream: UpstreamState, body: Mapping[str, Any], answer: Answer
) -> list[dict[str, Any]]:
    """``answer`` as the response's output items, with fresh ids."""
    items: list[dict[str, Any]] = []
    include = body.get("include") or ()
    if "reasoning.encrypted_content" in include:
        reasoning_id = upstream._next_id("rs_")
        sealed = seal("reasoning", {"id": reasoning_id})
        items.append(
            {"type": "reasoning", "id": reasoning_id, "summary": [], "encrypted_content": sealed}
        )
    status = "incomplete" if answer.finish_reason in INCOMPLETE_REASONS else "completed"
    if answer.content or not answer.tool_calls:
        text = answer.content or ""
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        items.append(
            {
                "type": "message",
                "id": upstream._next_id("msg_"),
                "status": status,
                "role": "assistant",
                "content": [part],
            }
        )
    for call in answer.tool_calls:
        name, arguments = call_name_and_arguments(call)
        if call["type"] == "custom":
            kind, item_id, field = "custom_tool_call", upstream._next_id("ctc_"), "input"
        else:
            kind, item_id, field = "function_call", upstream._next_id("fc_"), "arguments"
        items.append(
            {
                "type": kind,
                "id": item_id,
                "call_id": call["id"],
                "name": name,
                field: arguments,
                "status": "completed",
            }
        )
    return items


def usage_for(input_tokens: int, cached_tokens: int, output_tokens: int) -> dict[str, Any]:
    """A response's ``usage``, with OpenAI's details (nothing reasoned, nothing written to an
    explicit cache)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }


def response_body(
    response_id: str,
    body: Mapping[str, Any],
    output: list[dict[str, Any]],
    usage: dict[str, Any],
    finish_reason: str,
) -> dict[str, Any]:
    """The ``response`` object answering ``body``, echoing its settings like OpenAI does."""
    now = int(time.time())
    reason = INCOMPLETE_REASONS.get(finish_reason)
    parallel = body.get("parallel_tool_calls")
    return {
        "id": response_id,
        "object": "response",
        "created_at": now,
        "status": "incomplete" if reason else "completed",
        "background": False,
        "completed_at": None if reason else now,
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": body.get("max_tool_calls"),
        "metadata": body.get("metadata") or {},
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": parallel if isinstance(parallel, bool) else True,
        "previous_response_id": body.get("previous_response_id"),
        "prompt_cache_key": body.get("prompt_cache_key"),
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "safety_identifier": body.get("safety_identifier"),
        "service_tier": "default",
        "store": body.get("store") is not False,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": [_echoed_tool(tool) for tool in body.get("tools") or ()],
        "top_logprobs": body.get("top_logprobs", 0),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation") or "disabled",
        "usage": usage,
        "user": body.get("user"),
    }


def _echoed_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A request's tool as the response lists it (a function tool: strict unless said not)."""
    if tool.get("type") == "function":
        return {"description": None, "parameters": None, "strict": True, **tool}
    return dict(tool)


def compaction_output(
    upstream: UpstreamState, items: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]], str]:
    """The compacted conversation: its user messages (as output items), then one compaction
    item sealing a summary of the rest; and that summary."""
    kept: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    for item in items:
        kind = item_type(item)
        if kind == "message" and item["role"] == "user":
            message = rendered_item(item)
            kept.append({**message, "id": upstream._next_id("msg_"), "status": "completed"})
        else:
            dropped[f"{item['role']} message" if kind == "message" else kind] += 1
    described = ", ".join(f"{count} x {kind}" for kind, count in sorted(dropped.items()))
    summary = f"Compacted {sum(dropped.values())} items ({described or 'none'})."
    compaction = {
        "type": "compaction",
        "id": upstream._next_id("cmp_"),
        "encrypted_content": seal("compaction", {"summary": summary}),
        "created_by": None,
    }
    return [*kept, compaction], summary
