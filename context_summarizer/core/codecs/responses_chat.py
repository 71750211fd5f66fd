"""A Responses request served by a chat-completions-only upstream (vLLM, llama.cpp, Ollama):
the request as a chat completion, and the completion (whole or streamed) as a Response. Pure.

What does not survive the translation (docs/openai.md's table says the same):

- ``reasoning`` items (and their ``encrypted_content``) and every item the chat API has no form
  for (built-in tool calls, item references...) are left out of the chat request, with the calls
  they belong to; the model never sees them.
- Only ``function`` tools reach the upstream; built-in tools (web search, file search, computer
  use, MCP...) are dropped.
- ``previous_response_id``, ``conversation``, ``store`` and ``background``: a chat upstream keeps
  no state (the front door refuses the first two in this mode).
- ``reasoning.effort`` becomes ``reasoning_effort``; ``text.format`` a ``json_schema`` or
  ``json_object`` ``response_format``; ``max_output_tokens`` ``max_tokens``. Sampling settings
  (``temperature``, ``top_p``, ``parallel_tool_calls``, ``user``) pass as they are.
- The Response is built by the proxy: its ids are the proxy's, its ``output`` holds a message and
  function calls only (no reasoning items), ``usage`` is the completion's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ..messages import Message
from . import OPAQUE_KEY

_PASSED = ("temperature", "top_p", "parallel_tool_calls", "user", "seed")


def chat_request(
    body: Mapping[str, Any], messages: Sequence[Message], tools: Sequence[Any] | None
) -> dict[str, Any]:
    """The chat completion request for a Responses ``body`` whose conversation (decoded and
    settled by the engine) is ``messages``."""
    out: dict[str, Any] = {"model": body["model"], "messages": chat_messages(messages)}
    functions = [t for t in tools or () if isinstance(t, Mapping) and t.get("type") == "function"]
    if functions:
        out["tools"] = functions
        choice = body.get("tool_choice")
        if choice in ("none", "auto", "required"):
            out["tool_choice"] = choice
        elif isinstance(choice, Mapping) and choice.get("type") == "function":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    for key in _PASSED:
        if key in body:
            out[key] = body[key]
    if type(body.get("max_output_tokens")) is int:
        out["max_tokens"] = body["max_output_tokens"]
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort"):
        out["reasoning_effort"] = reasoning["effort"]
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema":
        schema = {k: v for k, v in fmt.items() if k != "type"}
        out["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(fmt, Mapping) and fmt.get("type") == "json_object":
        out["response_format"] = {"type": "json_object"}
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    return out


def chat_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The engine's messages as a chat upstream takes them: opaque parts and the calls without a
    chat form (with their outputs) left out, assistant messages left empty by that dropped."""
    dropped: set[Any] = set()
    out: list[dict[str, Any]] = []
    for message in messages:
        clean = {k: v for k, v in message.items() if k != OPAQUE_KEY and not k.startswith("x_")}
        role = clean.get("role")
        if role == "tool" and (
            clean.get("tool_call_id") in dropped or clean.get("content") is None
        ):
            continue
        calls = clean.get("tool_calls")
        if isinstance(calls, list):
            kept = [c for c in calls if isinstance(c, Mapping) and c.get("type") == "function"]
            dropped.update(c.get("id") for c in calls if c not in kept and isinstance(c, Mapping))
            if kept:
                clean["tool_calls"] = kept
            else:
                clean.pop("tool_calls")
        if (
            clean.get("role") == "assistant"
            and not clean.get("content")
            and "tool_calls" not in clean
        ):
            continue
        out.append(clean)
    return out


def response_object(
    body: Mapping[str, Any],
    response_id: str,
    output: list[dict[str, Any]],
    usage: Mapping[str, Any] | None,
    finish_reason: str | None,
    *,
    in_progress: bool = False,
) -> dict[str, Any]:
    """The Response the client reads, echoing its request's settings as OpenAI does."""
    cut = finish_reason == "length"
    status = "in_progress" if in_progress else "incomplete" if cut else "completed"
    parallel = body.get("parallel_tool_calls")
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if cut and not in_progress else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": parallel if isinstance(parallel, bool) else True,
        "previous_response_id": None,
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": False,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": list(body.get("tools") or ()),
        "top_p": body.get("top_p", 1.0),
        "truncation": body.get("truncation") or "disabled",
        "usage": None if in_progress else response_usage(usage),
        "user": body.get("user"),
    }


def response_usage(usage: Mapping[str, Any] | None) -> dict[str, Any]:
    """A completion's ``usage`` in the Responses API's terms."""
    usage = usage or {}
    found = usage.get("prompt_tokens")
    prompt: int = found if type(found) is int else 0
    found = usage.get("completion_tokens")
    completion: int = found if type(found) is int else 0
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached if type(cached) is int else 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


def message_item(item_id: str, text: str, *, done: bool = True) -> dict[str, Any]:
    """An assistant message output item."""
    part = {"type": "output_text", "text": text, "annotations": []}
    return {
        "type": "message",
        "id": item_id,
        "status": "completed" if done else "in_progress",
        "role": "assistant",
        "content": [part] if done else [],
    }


def call_item(item_id: str, call: Mapping[str, Any], *, done: bool = True) -> dict[str, Any]:
    """A function call output item for a chat tool call."""
    function = call.get("function") or {}
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call.get("id", ""),
        "name": function.get("name", ""),
        "arguments": function.get("arguments", "") if done else "",
        "status": "completed" if done else "in_progress",
    }


def response_from_completion(
    body: Mapping[str, Any], completion: Mapping[str, Any], response_id: str
) -> dict[str, Any]:
    """A whole chat completion as the Response to ``body``."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    content = message.get("content")
    if isinstance(content, str) and content:
        output.append(message_item(f"msg_{response_id[5:]}", content))
    for number, call in enumerate(message.get("tool_calls") or ()):
        if isinstance(call, Mapping):
            output.append(call_item(f"fc_{response_id[5:]}_{number}", call))
    return response_object(
        body, response_id, output, completion.get("usage"), choice.get("finish_reason")
    )


def dumps(value: Any) -> str:
    """Compact JSON, as the events carry it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
