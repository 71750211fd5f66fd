"""The test upstream's Anthropic Messages API: ``POST /v1/messages`` and its ``count_tokens``.

``POST /v1/messages``, step by step: parse and validate the request
(:func:`~context_summarizer.testing.messages_checks.invalid_messages_request`), translate it to the
Chat Completions body the responders read (:func:`~context_summarizer.testing.messages_chat.
chat_body_for`), apply an injected fault (matched on that translation), count the prompt
(:func:`~context_summarizer.testing.messages_cache.messages_prompt`), reject a prompt over the
context window like Anthropic does, take the next scripted reply (or ask the responder with the chat
body), cut it to ``max_tokens``, split the prompt between the cache and fresh input
(:class:`~context_summarizer.testing.messages_cache.BreakpointCache`), record the request, then
answer as one ``message`` or as an SSE stream (:mod:`~context_summarizer.testing.messages_answers`).

``POST /v1/messages/count_tokens`` validates the same way (``max_tokens`` not needed) and
answers ``{"input_tokens": N}``, the whole prompt as ``/v1/messages`` would bill it; it draws
no fault and neither reads nor writes the cache.

Every answer, error or not, is Anthropic's: errors are ``{"type": "error", "error": {"type",
"message"}, "request_id"}`` and every response carries a ``request-id`` header.
"""

from __future__ import annotations

import json
from typing import Any

from .answers import answer_for
from .faults import Fault, anthropic_error_body
from .injection import answer_fault
from .messages_answers import (
    message_blocks,
    message_body,
    message_events,
    message_usage,
    stop_reason_for,
)
from .messages_cache import messages_prompt
from .messages_chat import chat_body_for
from .messages_checks import invalid_messages_request
from .transport import _Exchange

__all__ = ["count_tokens", "messages"]


def _fail(
    handler: _Exchange,
    status: int,
    body: Any,
    message: str,
    *,
    type: str = "invalid_request_error",
    **record: Any,
) -> None:
    """Record the request and answer Anthropic's error body, with a ``request-id``."""
    request_id = handler.upstream._next_id("req_test")
    payload = anthropic_error_body(message, type=type, request_id=request_id)
    handler._fail(status, body, payload, {"request-id": request_id}, api="messages", **record)


def _parsed(handler: _Exchange, raw: bytes, *, count_tokens: bool) -> dict[str, Any] | None:
    """The request body if it is valid JSON and a valid request; else answer its 400 (None)."""
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        _fail(handler, 400, None, "There was an error parsing the body of your request.")
        return None
    invalid = invalid_messages_request(body, count_tokens=count_tokens)
    if invalid is not None:
        _fail(handler, 400, body, invalid)
        return None
    assert isinstance(body, dict)
    return body


def _too_long(window: int | None, prompt_tokens: int, max_tokens: int) -> str | None:
    """Anthropic's error for a prompt (and ``max_tokens``) over ``window``; None if it fits."""
    if window is None:
        return None
    if prompt_tokens > window:
        return f"prompt is too long: {prompt_tokens} tokens > {window} maximum"
    if prompt_tokens + max_tokens > window:
        return (
            f"input length and `max_tokens` exceed context limit: {prompt_tokens} + "
            f"{max_tokens} > {window}, decrease input length or `max_tokens` and try again"
        )
    return None


def messages(handler: _Exchange, raw: bytes) -> None:
    """Answer a Messages API request (``raw``: its body), or the fault injected for it."""
    upstream = handler.upstream
    body = _parsed(handler, raw, count_tokens=False)
    if body is None:
        return
    stream = body.get("stream") is True
    chat_body = chat_body_for(body)

    fault = upstream._take_fault(chat_body)
    if fault is not None and answer_fault(handler, fault, body, stream=stream, api="messages"):
        return
    record: dict[str, Any] = {"fault": fault.kind if fault else None, "stream": stream}

    prompt = messages_prompt(upstream.counter, body)
    limit: int = body["max_tokens"]
    too_long = _too_long(upstream.context_window, prompt.tokens, limit)
    if too_long is not None:
        _fail(handler, 400, body, too_long, prompt_tokens=prompt.tokens, **record)
        return

    try:
        reply = upstream._take_reply()
        if reply is None:
            reply = upstream.responder(chat_body)
        answer = answer_for(upstream, reply, limit)
        blocks = message_blocks(upstream, reply, answer)
    except Exception as error:  # a broken responder is a server error, not a hang
        message = f"The test upstream's responder failed: {type(error).__name__}: {error}"
        _fail(handler, 500, body, message, type="api_error", prompt_tokens=prompt.tokens, **record)
        return

    cache = upstream.messages_cache.use(prompt)
    usage = message_usage(cache, answer.completion_tokens)
    if fault is not None and fault.kind == "bad_usage":
        usage["input_tokens"] = fault.prompt_tokens
    handler._record(
        body,
        200,
        prompt_tokens=prompt.tokens,
        cached_tokens=cache.cache_read_input_tokens,
        cache_creation_tokens=cache.cache_creation_input_tokens,
        completion_tokens=answer.completion_tokens,
        api="messages",
        **record,
    )
    stop_reason = stop_reason_for(answer)
    _send(handler, body, blocks, stop_reason, usage, fault, chunk_delay=reply.chunk_delay)


def _send(
    handler: _Exchange,
    body: dict[str, Any],
    blocks: list[dict[str, Any]],
    stop_reason: str,
    usage: dict[str, Any],
    fault: Fault | None,
    *,
    chunk_delay: float,
) -> None:
    """Send the message as the request asked: streamed or as one body (``"reset"``: cut short)."""
    upstream = handler.upstream
    headers = {"request-id": upstream._next_id("req_test")}
    message_id = upstream._next_id("msg_test")
    reset = fault is not None and fault.kind == "reset"
    if body.get("stream") is True:
        events = message_events(message_id, body["model"], blocks, stop_reason, usage)
        if reset:
            assert fault is not None
            handler._send_stream(events, reset_after=fault.events, named=True, headers=headers)
        handler._send_stream(events, chunk_delay=chunk_delay, named=True, headers=headers)
        return
    payload = message_body(message_id, body["model"], blocks, stop_reason, usage)
    if reset:
        handler._send_half(payload, headers)
    handler._send_json(200, payload, headers)


def count_tokens(handler: _Exchange, raw: bytes) -> None:
    """Answer a ``count_tokens`` request: the prompt's tokens as ``/v1/messages`` counts them."""
    body = _parsed(handler, raw, count_tokens=True)
    if body is None:
        return
    tokens = messages_prompt(handler.upstream.counter, body).tokens
    handler._record(body, 200, prompt_tokens=tokens, api="messages")
    headers = {"request-id": handler.upstream._next_id("req_test")}
    handler._send_json(200, {"input_tokens": tokens}, headers)
