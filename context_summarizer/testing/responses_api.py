"""The test upstream's OpenAI Responses API: ``POST /v1/responses``, ``POST
/v1/responses/compact`` and ``GET /v1/responses/{id}``.

A response, step by step, like a chat completion (see ``chat``): parse and validate the request
(``responses_input``), prepend the stored history ``previous_response_id`` names and check the
conversation, apply an injected fault, count the prompt and its cached prefix
(``responses_chat``), reject a prompt over the context window like OpenAI does, take the next
scripted reply or ask the responder (with the request translated to a chat completion body),
record the request (``api="responses"``), store the response unless ``store`` is false, then
answer as one ``response`` object (``responses_answers``) or as an SSE stream
(``responses_stream``). Output is also cut where the context window ends.

The compaction endpoint is this server's own, opaque like OpenAI's: it keeps the conversation's
user messages and seals a short summary of the rest into one ``compaction`` item, which later
requests may send back as input.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .answers import answer_for
from .faults import error_body
from .injection import answer_fault
from .responses_answers import compaction_output, output_items, response_body, usage_for
from .responses_chat import account_items, chat_body
from .responses_input import input_items, invalid_conversation, invalid_request
from .responses_stream import stream_events
from .state import StoredResponse
from .transport import _Exchange

__all__ = ["CONTEXT_WINDOW_MESSAGE", "response_get", "responses_compact", "responses_create"]

CONTEXT_WINDOW_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)
"""OpenAI's message for a Responses API input over the context window."""


def responses_create(handler: _Exchange, raw: bytes) -> None:
    """Answer a ``POST /v1/responses`` request (``raw``: its body), or the fault injected for it."""
    upstream = handler.upstream
    ok, body = handler._parse_json(raw)
    if not ok:
        return
    invalid = invalid_request(body)
    if invalid is not None:
        handler._fail(400, body, invalid)
        return
    stream = body.get("stream") is True
    items, invalid = _conversation(handler, body)
    if invalid is not None:
        handler._fail(400, body, invalid, stream=stream)
        return

    fault = upstream._take_fault(body)
    if fault is not None and answer_fault(handler, fault, body, stream=stream):
        return
    fault_kind = fault.kind if fault is not None else None

    prompt = account_items(upstream.counter, upstream.cache, body, items)
    window = upstream.context_window
    if window is not None and prompt.tokens > window:
        too_long = error_body(CONTEXT_WINDOW_MESSAGE, param="input", code="context_length_exceeded")
        handler._fail(400, body, too_long, prompt_tokens=prompt.tokens, fault=fault_kind)
        return
    limit = body.get("max_output_tokens")
    if window is not None:
        limit = window - prompt.tokens if limit is None else min(limit, window - prompt.tokens)

    try:
        reply = upstream._take_reply()
        if reply is None:
            reply = upstream.responder(chat_body(body, items))
        answer = answer_for(upstream, reply, limit)
    except Exception as error:  # a broken responder is a server error, not a hang
        payload = error_body(
            f"The test upstream's responder failed: {type(error).__name__}: {error}",
            type="server_error",
        )
        handler._fail(500, body, payload, prompt_tokens=prompt.tokens, fault=fault_kind)
        return

    upstream.cache.register(prompt.chain, prompt.cumulative)
    usage = usage_for(prompt.tokens, prompt.cached_tokens, answer.completion_tokens)
    if fault is not None and fault.kind == "bad_usage":
        usage["input_tokens"] = fault.prompt_tokens
    output = output_items(upstream, body, answer)
    response = response_body(upstream._next_id("resp_"), body, output, usage, answer.finish_reason)
    handler._record(
        body,
        200,
        prompt_tokens=prompt.tokens,
        cached_tokens=prompt.cached_tokens,
        completion_tokens=answer.completion_tokens,
        fault=fault_kind,
        stream=stream,
    )
    if body.get("store") is not False:
        upstream._store_response(StoredResponse(response, [*items, *output]))
    if stream:
        events = stream_events(response)
        if fault is not None and fault.kind == "reset":
            handler._send_stream(events, reset_after=fault.events, named=True)
        handler._send_stream(events, chunk_delay=reply.chunk_delay, named=True)
        return
    if fault is not None and fault.kind == "reset":
        handler._send_half(response)
    handler._send_json(200, response)


def responses_compact(handler: _Exchange, raw: bytes) -> None:
    """Answer a ``POST /v1/responses/compact`` request: the conversation's user messages and one
    ``compaction`` item, billed like a response whose output is the sealed summary."""
    upstream = handler.upstream
    ok, body = handler._parse_json(raw)
    if not ok:
        return
    invalid = invalid_request(body, compact=True)
    if invalid is not None:
        handler._fail(400, body, invalid)
        return
    items, invalid = _conversation(handler, body)
    if invalid is not None:
        handler._fail(400, body, invalid)
        return
    fault = upstream._take_fault(body)
    if fault is not None and answer_fault(handler, fault, body):
        return
    fault_kind = fault.kind if fault is not None else None

    prompt = account_items(upstream.counter, upstream.cache, body, items)
    window = upstream.context_window
    if window is not None and prompt.tokens > window:
        too_long = error_body(CONTEXT_WINDOW_MESSAGE, param="input", code="context_length_exceeded")
        handler._fail(400, body, too_long, prompt_tokens=prompt.tokens, fault=fault_kind)
        return
    upstream.cache.register(prompt.chain, prompt.cumulative)
    output, summary = compaction_output(upstream, items)
    summary_tokens = upstream.counter.text(summary)
    usage = usage_for(prompt.tokens, prompt.cached_tokens, summary_tokens)
    if fault is not None and fault.kind == "bad_usage":
        usage["input_tokens"] = fault.prompt_tokens
    payload = {
        "id": upstream._next_id("resp_"),
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": usage,
    }
    handler._record(
        body,
        200,
        prompt_tokens=prompt.tokens,
        cached_tokens=prompt.cached_tokens,
        completion_tokens=summary_tokens,
        fault=fault_kind,
    )
    if fault is not None and fault.kind == "reset":
        handler._send_half(payload)
    handler._send_json(200, payload)


def response_get(handler: _Exchange, response_id: str) -> None:
    """Answer ``GET /v1/responses/{id}``: a stored response, or OpenAI's 404."""
    stored = handler.upstream._stored_response(response_id)
    if stored is None:
        message = f"Response with id '{response_id}' not found."
        handler._fail(404, None, error_body(message))
        return
    handler._record(None, 200)
    handler._send_json(200, stored.response)


def _conversation(
    handler: _Exchange, body: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The items the model is to see (stored history, then input), or the error body it gets."""
    history: list[dict[str, Any]] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        stored = handler.upstream._stored_response(previous)
        if stored is None:
            message = f"Previous response with id '{previous}' not found."
            missing = error_body(
                message, param="previous_response_id", code="previous_response_not_found"
            )
            return [], missing
        history = list(stored.conversation)
    items = [*history, *input_items(body)]
    return items, invalid_conversation(items)
