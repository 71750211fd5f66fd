"""A Gemini answer: the reply as a ``model`` content's parts, and its two wire shapes.

:func:`answer_parts` turns an :class:`~context_summarizer.testing.answers.Answer` (the reply already
cut to ``maxOutputTokens``) into parts: a thought summary first when the request asks for thoughts
(``thinkingConfig.includeThoughts``), its text, then a ``functionCall`` part per call (with the
reply's own id when it has one; Gemini's calls carry none) whose first carries a thought
signature when thinking is on, as Gemini 3 answers. :func:`finish_reason_for` names why it
stopped and :func:`usage_metadata` is its ``usageMetadata``; :func:`response_body` renders one
``GenerateContentResponse`` and :func:`stream_chunks` the chunks of a stream, each a whole
``GenerateContentResponse`` carrying part of the content, the prompt's usage on every chunk and
the final figures (and ``finishReason``) on the last. :func:`schema_instance` is the JSON a
structured-output request gets.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from .answers import Answer, _pieces, call_name_and_arguments
from .gemini_chat import signature_for

__all__ = [
    "THOUGHT",
    "answer_parts",
    "finish_reason_for",
    "response_body",
    "schema_instance",
    "stream_chunks",
    "usage_metadata",
]

THOUGHT = "The test model considers the request."
"""The thought summary the test model gives when asked for its thoughts."""


def _args(arguments: str) -> dict[str, Any]:
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {"input": arguments}
    return parsed if isinstance(parsed, dict) else {"input": parsed}


def answer_parts(
    answer: Answer, *, thoughts: bool, signed: bool, ids: list[str | None]
) -> list[dict[str, Any]]:
    """``answer`` as a model content's parts (``ids``: each call's own id, or None)."""
    parts: list[dict[str, Any]] = []
    if thoughts:
        parts.append({"text": THOUGHT, "thought": True})
    if answer.content:
        parts.append({"text": answer.content})
    for number, call in enumerate(answer.tool_calls):
        name, arguments = call_name_and_arguments(call)
        args = _args(arguments)
        function: dict[str, Any] = {"name": name, "args": args}
        if number < len(ids) and ids[number]:
            function["id"] = ids[number]
        part: dict[str, Any] = {"functionCall": function}
        if signed and number == 0:
            part["thoughtSignature"] = signature_for(name, args)
        parts.append(part)
    if not parts:
        parts.append({"text": ""})
    return parts


def finish_reason_for(answer: Answer) -> str:
    """Gemini's ``finishReason``: ``MAX_TOKENS`` when cut short, else ``STOP`` (function calls
    included, as Gemini reports them)."""
    return "MAX_TOKENS" if answer.finish_reason == "length" else "STOP"


def usage_metadata(
    prompt_tokens: int, cached_tokens: int, completion_tokens: int, thoughts: int = 0
) -> dict[str, Any]:
    """A response's ``usageMetadata`` (``cachedContentTokenCount`` only when part of the prompt
    came from the cache, ``thoughtsTokenCount`` only when the model thought, as Gemini reports
    them)."""
    usage: dict[str, Any] = {
        "promptTokenCount": prompt_tokens,
        "candidatesTokenCount": completion_tokens,
        "totalTokenCount": prompt_tokens + completion_tokens + thoughts,
    }
    if cached_tokens:
        usage["cachedContentTokenCount"] = cached_tokens
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def response_body(
    response_id: str,
    model: str,
    parts: list[dict[str, Any]],
    finish_reason: str | None,
    usage: Mapping[str, Any],
) -> dict[str, Any]:
    """One ``GenerateContentResponse`` answering with ``parts``."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    return {
        "candidates": [candidate],
        "usageMetadata": dict(usage),
        "modelVersion": model,
        "responseId": response_id,
    }


def stream_chunks(
    response_id: str,
    model: str,
    parts: list[dict[str, Any]],
    finish_reason: str,
    usage: Mapping[str, Any],
) -> Iterator[dict[str, Any]]:
    """``parts`` as the chunks of a stream: a thought, the text in pieces, the calls together;
    every chunk reports the prompt, the last one the whole usage and the finish reason."""
    prompt = {"promptTokenCount": usage["promptTokenCount"]}
    pieces: list[list[dict[str, Any]]] = []
    calls: list[dict[str, Any]] = []
    for part in parts:
        if "functionCall" in part:
            calls.append(part)
        elif part.get("thought") or not part.get("text"):
            pieces.append([part])
        else:
            pieces.extend([{"text": piece}] for piece in _pieces(part["text"], 4))
    if calls:
        pieces.append(calls)
    last = pieces.pop() if pieces else [{"text": ""}]
    for chunk in pieces:
        yield response_body(response_id, model, chunk, None, prompt)
    yield response_body(response_id, model, last, finish_reason, usage)


_EMPTY = {"string": "test", "integer": 0, "number": 0, "boolean": False, "null": None}


def schema_instance(schema: Any) -> Any:
    """A value valid against a (Gemini or JSON) schema: every property of an object (required
    or not), an array's ``minItems`` items, an enum's first value, a number's minimum (else 0:
    Gemini CLI's loop check reads a confidence, which must not say "stuck"), ``"test"``."""
    if not isinstance(schema, Mapping):
        return {}
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return schema_instance(schema[key][0])
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    kind = str(kind).lower() if kind is not None else ("object" if "properties" in schema else "")
    if kind == "object":
        properties = schema.get("properties")
        return {
            name: schema_instance(value)
            for name, value in (properties.items() if isinstance(properties, Mapping) else ())
        }
    if kind == "array":
        count = schema.get("minItems")
        return [schema_instance(schema.get("items"))] * (count if isinstance(count, int) else 0)
    if kind in ("integer", "number") and isinstance(schema.get("minimum"), (int, float)):
        return schema["minimum"]
    return _EMPTY.get(kind, {})
