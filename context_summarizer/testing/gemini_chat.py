"""A Gemini ``generateContent`` request as the Chat Completions body the responders read, and the
checks the test upstream makes of it.

The test upstream answers Gemini's ``generateContent`` with the same responders (and scripted
replies) as chat completions, so the project's scripted agents, tool scripts and summary-request
detection work unchanged: :func:`gemini_chat_body` translates the request for them (and for the
server's own token accounting), and nothing else.

- ``systemInstruction`` -> a first ``system`` message (its text parts joined by a blank line);
- a ``model`` content -> an assistant message: its text parts joined (thought parts left out),
  its ``functionCall`` parts ``tool_calls`` (``arguments``: the ``args`` as JSON; ``id``: the
  call's own, else ``gemini:<content>:<part>``); any other part counts as a non-text part;
- a ``user`` content -> a ``tool`` message per ``functionResponse`` part (paired with the
  latest model content's calls by ``id``, else by name; ``content``: the response's lone
  ``output`` or ``error`` string, else its JSON),
  then a user message of its other parts (text joined; images and files as parts);
- ``tools``' ``functionDeclarations`` -> function tools;
- ``toolConfig.functionCallingConfig.mode`` ``NONE`` / ``AUTO`` / ``ANY`` -> ``tool_choice``
  ``"none"`` / ``"auto"`` / ``"required"`` (the proxy's summary requests say ``NONE``);
- ``generationConfig.maxOutputTokens`` -> ``max_tokens``, less a fixed
  ``thinkingConfig.thinkingBudget`` (the test model spends all of it thinking, within the cap, as
  Gemini counts thoughts); the model comes from the URL.

:func:`invalid_gemini_request` is the server's validation (Google's messages),
:func:`unanswered_calls` Gemini's rule that a turn's function calls are answered one for one by
the next content, and :func:`missing_signature` Gemini 3's rule that the function calls of the
current turn come back with the thought signatures they were answered with
(:func:`signature_for`, or a dummy one).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from ..core.messages import canonical_json

__all__ = [
    "gemini_chat_body",
    "invalid_gemini_request",
    "missing_signature",
    "signature_for",
    "unanswered_calls",
]

_MODES = {"NONE": "none", "AUTO": "auto", "ANY": "required", "VALIDATED": "auto"}


def _get(value: Mapping[str, Any], camel: str, snake: str) -> Any:
    found = value.get(camel)
    return value.get(snake) if found is None else found


def _texts(parts: Any) -> list[str]:
    return [
        str(part["text"])
        for part in (parts if isinstance(parts, list) else ())
        if isinstance(part, Mapping)
        and isinstance(part.get("text"), str)
        and not part.get("thought")
    ]


def _user_parts(parts: list[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    """A user content's non-response parts as chat content: joined text, or a list of parts
    when it holds anything but text."""
    if all("text" in part for part in parts):
        return "\n\n".join(_texts(parts))
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif _get(part, "inlineData", "inline_data") is not None:
            out.append({"type": "image_url", "image_url": {"url": "data:,"}})
        else:
            out.append({"type": "file", "file": {"filename": "part"}})
    return out


def _result_text(result: Any) -> str:
    """A function response as a tool message's content: its ``output`` (or ``error``) when
    that is all it holds, else its JSON."""
    if isinstance(result, Mapping) and len(result) == 1:
        (value,) = result.values()
        if isinstance(value, str) and ("output" in result or "error" in result):
            return value
    return json.dumps(result, ensure_ascii=False)


def gemini_chat_body(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """The Chat Completions body a generateContent request ``body`` (to ``model``) reads as (see
    the module docstring); tolerant of malformed parts, which it skips."""
    messages: list[dict[str, Any]] = []
    system = _get(body, "systemInstruction", "system_instruction")
    text = (
        system
        if isinstance(system, str)
        else "\n\n".join(_texts(system.get("parts")) if isinstance(system, Mapping) else [])
    )
    if text:
        messages.append({"role": "system", "content": text})
    pending: list[tuple[str, str, Any]] = []  # (chat id, name, wire id) of unanswered calls
    contents = body.get("contents")
    for index, content in enumerate(contents if isinstance(contents, list) else ()):
        if not isinstance(content, Mapping):
            continue
        parts = [p for p in content.get("parts") or () if isinstance(p, Mapping)]
        if content.get("role") == "model":
            pending = []
            message: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(_texts(parts))}
            calls = []
            for number, part in enumerate(parts):
                call = _get(part, "functionCall", "function_call")
                if isinstance(call, Mapping):
                    call_id = call.get("id") or f"gemini:{index}:{number}"
                    pending.append((call_id, str(call.get("name")), call.get("id")))
                    arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
                    function = {"name": str(call.get("name")), "arguments": arguments}
                    calls.append({"id": call_id, "type": "function", "function": function})
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        rest = []
        for part in parts:
            response = _get(part, "functionResponse", "function_response")
            if not isinstance(response, Mapping):
                rest.append(part)
                continue
            match = next(
                (c for c in pending if response.get("id") and c[2] == response["id"]), None
            )
            match = match or next((c for c in pending if c[1] == response.get("name")), None)
            if match is not None:
                pending.remove(match)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": match[0] if match else str(response.get("name")),
                    "content": _result_text(response.get("response")),
                }
            )
        if rest:
            messages.append({"role": "user", "content": _user_parts(rest)})
    chat: dict[str, Any] = {"model": model, "messages": messages}
    config = _get(body, "generationConfig", "generation_config")
    if isinstance(config, Mapping):
        cap = _get(config, "maxOutputTokens", "max_output_tokens")
        thinking = _get(config, "thinkingConfig", "thinking_config")
        budget = (
            _get(thinking, "thinkingBudget", "thinking_budget")
            if isinstance(thinking, Mapping)
            else None
        )
        if isinstance(cap, int):
            spent = budget if isinstance(budget, int) and budget > 0 else 0
            chat["max_tokens"] = max(0, cap - spent)
        if isinstance(config.get("temperature"), (int, float)):
            chat["temperature"] = config["temperature"]
    tools = [
        {
            "type": "function",
            "function": {
                "name": declaration.get("name"),
                "description": declaration.get("description", ""),
                "parameters": _get(declaration, "parametersJsonSchema", "parameters_json_schema")
                or declaration.get("parameters")
                or {"type": "object"},
            },
        }
        for tool in body.get("tools") or ()
        if isinstance(tool, Mapping)
        for declaration in _get(tool, "functionDeclarations", "function_declarations") or ()
        if isinstance(declaration, Mapping)
    ]
    if tools:
        chat["tools"] = tools
    tool_config = _get(body, "toolConfig", "tool_config")
    calling = (
        _get(tool_config, "functionCallingConfig", "function_calling_config")
        if isinstance(tool_config, Mapping)
        else None
    )
    if isinstance(calling, Mapping) and calling.get("mode") in _MODES:
        chat["tool_choice"] = _MODES[calling["mode"]]
    return chat


def invalid_gemini_request(body: Any) -> str | None:
    """Google's message for a request the API refuses (None for a well-formed one)."""
    if not isinstance(body, dict):
        return "Invalid JSON payload received. Expected an object."
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        return "* GenerateContentRequest.contents: contents is not specified\n"
    for index, content in enumerate(contents):
        if not isinstance(content, Mapping):
            return f"Invalid value at 'contents[{index}]': expected an object."
        role = content.get("role") or "user"
        if role not in ("user", "model", "function"):
            return f"Please use a valid role: user, model. Got {role!r} at contents[{index}]."
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts:
            where = f"GenerateContentRequest.contents[{index}].parts"
            return f"* {where}: contents.parts must not be empty.\n"
        for number, part in enumerate(parts):
            if not isinstance(part, Mapping) or not part:
                return f"Invalid value at 'contents[{index}].parts[{number}]': a part holds data."
    return None


DUMMY_SIGNATURES = frozenset(
    {"skip_thought_signature_validator", "context_engineering_is_the_way_to_go"}
)
"""The signatures Google documents for function calls a model did not sign (history carried over
from elsewhere): accepted without validation. Gemini CLI puts the first on calls it resumes."""


def unanswered_calls(body: Mapping[str, Any]) -> str | None:
    """Gemini's refusal of a request where a model content's function calls are not answered
    one for one by the content right after it (when one follows); None otherwise."""
    contents = [c for c in body.get("contents") or () if isinstance(c, Mapping)]
    for index, content in enumerate(contents[:-1]):
        calls = _count(content, "functionCall", "function_call")
        if content.get("role") == "model" and calls:
            answered = _count(contents[index + 1], "functionResponse", "function_response")
            if answered != calls:
                return (
                    "Please ensure that the number of function response parts is equal to the "
                    "number of function call parts of the function call turn."
                )
    return None


def _count(content: Mapping[str, Any], camel: str, snake: str) -> int:
    parts = content.get("parts")
    return sum(
        1
        for part in (parts if isinstance(parts, list) else ())
        if isinstance(part, Mapping) and _get(part, camel, snake) is not None
    )


def signature_for(name: Any, args: Any) -> str:
    """The thought signature the test model gives a function call (and checks it comes back
    with): a digest of the call, base64."""
    digest = hashlib.sha256(canonical_json({"name": name, "args": args or {}}).encode()).digest()
    return base64.b64encode(b"sig:" + digest[:24]).decode()


def _bytes(signature: Any) -> bytes | None:
    """A signature's bytes: JSON carries them in base64, standard or URL-safe (the Python SDK
    sends the latter), as Google's APIs read either."""
    if not isinstance(signature, str):
        return None
    text = signature.replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except ValueError:
        return None


def missing_signature(body: Mapping[str, Any]) -> str | None:
    """Gemini 3's refusal of a request with thinking on whose current turn (the contents after
    the last user text) has a step whose first function call lacks the signature it was answered
    with, or any call with a signature that is neither its own nor one of Google's dummy ones
    (``DUMMY_SIGNATURES``); None when all are there."""
    contents = [c for c in body.get("contents") or () if isinstance(c, Mapping)]
    config = _get(body, "generationConfig", "generation_config")
    thinking = isinstance(config, Mapping) and (
        _get(config, "thinkingConfig", "thinking_config") is not None
    )
    turn_start = 0
    for index, content in enumerate(contents):
        parts = content.get("parts") or ()
        if content.get("role") != "model" and any(
            isinstance(p, Mapping) and isinstance(p.get("text"), str) for p in parts
        ):
            turn_start = index
    for index, content in enumerate(contents):
        if content.get("role") != "model":
            continue
        first = True
        for number, part in enumerate(content.get("parts") or ()):
            call = (
                _get(part, "functionCall", "function_call") if isinstance(part, Mapping) else None
            )
            if not isinstance(call, Mapping):
                continue
            signature = _get(part, "thoughtSignature", "thought_signature")
            where = f"contents[{index}].parts[{number}]"
            expected = signature_for(call.get("name"), call.get("args"))
            if signature in DUMMY_SIGNATURES:
                pass  # Google's documented way to carry calls no model signed
            elif signature is not None and _bytes(signature) != _bytes(expected):
                return f"Corrupted thought signature at {where}."
            if thinking and first and index > turn_start and signature is None:
                return (
                    f"Function call is missing a thought_signature in functionCall parts. "
                    f"This is required for tools to work correctly. ({where})"
                )
            first = False
    return None
