"""The test upstream's ``POST /v1/chat/completions``, step by step.

Parse and validate the request, apply an injected fault, count the prompt and its cached
prefix, reject a prompt over the context window like OpenAI does, take the next scripted reply
(or ask the responder), record the request, then answer as one JSON body or as an SSE stream.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ..core.errors import InvalidConversation
from ..core.messages import validate_messages
from .accounting import account_prompt
from .answers import Answer, answer_for, completion_body, stream_chunks, usage_for
from .faults import Fault, error_body
from .injection import answer_fault
from .transport import _Exchange

__all__ = ["chat_completions"]


def chat_completions(handler: _Exchange, raw: bytes) -> None:
    """Answer a chat completion request (``raw``: its body), or the fault injected for it."""
    upstream = handler.upstream
    ok, body = handler._parse_json(raw)
    if not ok:
        return
    invalid = _invalid_request(body)
    if invalid is not None:
        handler._fail(400, body, invalid)
        return
    stream = body.get("stream") is True

    fault = upstream._take_fault(body)
    if fault is not None and answer_fault(handler, fault, body, stream=stream):
        return
    fault_kind = fault.kind if fault is not None else None

    prompt = account_prompt(upstream.counter, upstream.cache, body)
    limit = _max_output(body)
    too_long = _context_length_error(upstream.context_window, prompt.tokens, limit)
    if too_long is not None:
        handler._fail(400, body, too_long, prompt_tokens=prompt.tokens, fault=fault_kind)
        return

    try:
        reply = upstream._take_reply()
        if reply is None:
            reply = upstream.responder(body)
        answer = answer_for(upstream, reply, limit)
    except Exception as error:  # a broken responder is a server error, not a hang
        payload = error_body(
            f"The test upstream's responder failed: {type(error).__name__}: {error}",
            type="server_error",
        )
        handler._fail(500, body, payload, prompt_tokens=prompt.tokens, fault=fault_kind)
        return

    upstream.cache.register(prompt.chain, prompt.cumulative)
    usage = usage_for(prompt.tokens, prompt.cached_tokens, answer)
    if fault is not None and fault.kind == "bad_usage":
        usage["prompt_tokens"] = fault.prompt_tokens
    handler._record(
        body,
        200,
        prompt_tokens=prompt.tokens,
        cached_tokens=prompt.cached_tokens,
        completion_tokens=answer.completion_tokens,
        fault=fault_kind,
        stream=stream,
    )
    _send_answer(handler, body, answer, usage, fault, chunk_delay=reply.chunk_delay)


def _invalid_request(body: Any) -> dict[str, Any] | None:
    """The error body a malformed request gets (None for a well-formed one)."""
    if not isinstance(body, dict):
        return error_body("The request body must be a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return error_body("you must provide a model parameter")
    if "messages" not in body:
        message = "Missing required parameter: 'messages'."
        return error_body(message, param="messages", code="missing_required_parameter")
    try:
        validate_messages(body["messages"])
    except InvalidConversation as error:
        return error_body(str(error), param=error.param)
    if body.get("stream_options") is not None and body.get("stream") is not True:
        message = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        return error_body(message, param="stream_options")
    return None


def _max_output(body: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(0, value)
    return None


def _context_length_error(
    window: int | None, prompt_tokens: int, limit: int | None
) -> dict[str, Any] | None:
    """OpenAI's error for a prompt (and ``limit`` reply tokens) over ``window``; None if it fits."""
    if window is not None and (prompt_tokens > window or prompt_tokens + (limit or 0) > window):
        if prompt_tokens > window:
            message = (
                f"This model's maximum context length is {window} tokens. However, your "
                f"messages resulted in {prompt_tokens} tokens. Please reduce the length of "
                "the messages."
            )
        else:
            message = (
                f"This model's maximum context length is {window} tokens. However, you "
                f"requested {prompt_tokens + (limit or 0)} tokens ({prompt_tokens} in the "
                f"messages, {limit} in the completion). Please reduce the length of the "
                "messages or completion."
            )
        return error_body(message, param="messages", code="context_length_exceeded")
    return None


def _send_answer(
    handler: _Exchange,
    body: dict[str, Any],
    answer: Answer,
    usage: dict[str, Any],
    fault: Fault | None,
    *,
    chunk_delay: float,
) -> None:
    """Send ``answer`` as the request asked: streamed or as one body (``"reset"``: cut short)."""
    completion_id = handler.upstream._next_id("chatcmpl-test")
    created = int(time.time())
    if body.get("stream") is True:
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        chunks = stream_chunks(
            completion_id, created, body["model"], answer, usage if include_usage else None
        )
        if fault is not None and fault.kind == "reset":
            handler._send_stream(chunks, reset_after=fault.events)
        handler._send_stream(chunks, chunk_delay=chunk_delay)
        return
    payload = completion_body(completion_id, created, body["model"], answer, usage)
    if fault is not None and fault.kind == "reset":
        handler._send_half(payload)
    handler._send_json(200, payload)
