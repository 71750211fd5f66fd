"""The test upstream's Google Gemini API: ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent`` (``?alt=sse``: server-sent events; without it, a JSON array of the same
chunks, as Google answers).

A request, step by step: parse and validate it (``gemini_chat.invalid_gemini_request``; each
turn's calls answered one for one: ``gemini_chat.unanswered_calls``), check that the function
calls of the current turn carry the thought signatures they were answered with
(``gemini_chat.missing_signature``, Gemini 3's rule when thinking is on), translate it to the
Chat Completions body the responders read (``gemini_chat.gemini_chat_body``; the model is the
URL's; a fixed ``thinkingBudget`` is spent thinking, within ``maxOutputTokens``), apply an
injected fault (matched on that translation), count the prompt and its cached prefix as a chat
completion's (``accounting.account_prompt``: Gemini's implicit caching, reported as
``cachedContentTokenCount``), reject a prompt over the context window like Gemini does (the reply
is not counted), take the next scripted reply (or ask the responder), record the request
(``api="gemini"``, its Gemini body), then answer as one ``GenerateContentResponse`` or as a
stream (``gemini_answers``).

A structured-output request (``generationConfig.responseMimeType`` ``application/json``, as
Gemini CLI's model router sends before each turn) is answered with a value of its schema
(``responseJsonSchema`` or ``responseSchema``; ``{}`` without one) and takes no scripted reply:
tool scripts walk the agent's own requests only.

Every error is Google's: ``{"error": {"code", "message", "status"}}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .accounting import account_prompt
from .answers import Answer, answer_for
from .faults import google_error_body
from .gemini_answers import (
    answer_parts,
    finish_reason_for,
    response_body,
    schema_instance,
    stream_chunks,
    usage_metadata,
)
from .gemini_chat import (
    gemini_chat_body,
    invalid_gemini_request,
    missing_signature,
    unanswered_calls,
)
from .injection import answer_fault
from .responders import Reply
from .transport import _Exchange

__all__ = ["GEMINI_PREFIX", "generate_content", "token_limit_message"]

GEMINI_PREFIX = "/v1beta/models/"
"""Where the Gemini API's model methods are: ``/v1beta/models/{model}:{method}``."""


def token_limit_message(prompt_tokens: int, window: int) -> str:
    """Gemini's message for a prompt over the context window."""
    return (
        f"The input token count ({prompt_tokens}) exceeds the maximum number of tokens "
        f"allowed ({window})."
    )


def _fail(handler: _Exchange, status: int, body: Any, message: str, **record: Any) -> None:
    handler._fail(status, body, google_error_body(status, message), api="gemini", **record)


def _get(value: Mapping[str, Any], camel: str, snake: str) -> Any:
    found = value.get(camel)
    return value.get(snake) if found is None else found


def generate_content(
    handler: _Exchange, raw: bytes, model: str, *, stream: bool, sse: bool
) -> None:
    """Answer a generateContent request to ``model`` (``stream``: ``:streamGenerateContent``,
    ``sse``: with ``alt=sse``), or the fault injected for it."""
    upstream = handler.upstream
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        _fail(handler, 400, None, "Invalid JSON payload received.", stream=stream)
        return
    invalid = invalid_gemini_request(body) or unanswered_calls(body) or missing_signature(body)
    if invalid is not None:
        _fail(handler, 400, body, invalid, stream=stream)
        return
    chat_body = gemini_chat_body(body, model)

    fault = upstream._take_fault(chat_body)
    if fault is not None and answer_fault(handler, fault, body, stream=stream, api="gemini"):
        return
    record: dict[str, Any] = {"fault": fault.kind if fault else None, "stream": stream}

    prompt = account_prompt(upstream.counter, upstream.cache, chat_body)
    window = upstream.context_window
    if window is not None and prompt.tokens > window:
        message = token_limit_message(prompt.tokens, window)
        _fail(handler, 400, body, message, prompt_tokens=prompt.tokens, **record)
        return

    config = _get(body, "generationConfig", "generation_config")
    config = config if isinstance(config, Mapping) else {}
    limit = chat_body.get("max_tokens")
    try:
        if _get(config, "responseMimeType", "response_mime_type") == "application/json":
            schema = _get(config, "responseJsonSchema", "response_json_schema")
            schema = schema or _get(config, "responseSchema", "response_schema")
            text = json.dumps(schema_instance(schema) if schema else {})
            reply = Reply(content=text)
            answer = answer_for(upstream, reply, None)
        else:
            reply = upstream._take_reply() or upstream.responder(chat_body)
            answer = answer_for(upstream, reply, limit)
    except Exception as error:  # a broken responder is a server error, not a hang
        message = f"The test upstream's responder failed: {type(error).__name__}: {error}"
        _fail(handler, 500, body, message, prompt_tokens=prompt.tokens, **record)
        return

    upstream.cache.register(prompt.chain, prompt.cumulative)
    thinking = _get(config, "thinkingConfig", "thinking_config")
    parts = answer_parts(
        answer,
        thoughts=isinstance(thinking, Mapping)
        and _get(thinking, "includeThoughts", "include_thoughts") is True,
        signed=thinking is not None,
        ids=[spec.id for spec in reply.tool_calls],
    )
    cap = _get(config, "maxOutputTokens", "max_output_tokens")
    thoughts = cap - limit if isinstance(cap, int) and isinstance(limit, int) else 0
    usage = usage_metadata(prompt.tokens, prompt.cached_tokens, answer.completion_tokens, thoughts)
    if fault is not None and fault.kind == "bad_usage":
        usage["promptTokenCount"] = fault.prompt_tokens
    handler._record(
        body,
        200,
        prompt_tokens=prompt.tokens,
        cached_tokens=prompt.cached_tokens,
        completion_tokens=answer.completion_tokens,
        api="gemini",
        **record,
    )
    _send(
        handler, model, parts, answer, usage, fault, stream=stream, sse=sse, delay=reply.chunk_delay
    )


def _send(
    handler: _Exchange,
    model: str,
    parts: list[dict[str, Any]],
    answer: Answer,
    usage: dict[str, Any],
    fault: Any,
    *,
    stream: bool,
    sse: bool,
    delay: float,
) -> None:
    """Send the answer as the request asked: one body, an SSE stream or a JSON array of chunks
    (a ``"reset"`` fault: cut short)."""
    response_id = handler.upstream._next_id("resp-test")
    reset = fault is not None and fault.kind == "reset"
    finish = finish_reason_for(answer)
    if stream:
        chunks = stream_chunks(response_id, model, parts, finish, usage)
        if not sse:
            handler._send_json(200, list(chunks))
            return
        if reset:
            handler._send_stream(chunks, reset_after=fault.events, google=True)
        handler._send_stream(chunks, chunk_delay=delay, google=True)
        return
    payload = response_body(response_id, model, parts, finish, usage)
    if reset:
        handler._send_half(payload)
    handler._send_json(200, payload)
