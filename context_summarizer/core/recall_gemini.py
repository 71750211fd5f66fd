"""The recall tool on Google's Gemini API (``generateContent``, and ``streamGenerateContent``
with ``alt=sse``), for the tool loop the proxy and the library run: the tool offered as a
function declaration, its ``functionCall`` parts found in an answer, the request continued with
the answer's content and one ``functionResponse`` per call, an answer with the calls taken out,
a held exchange put back into a later request, and a streamed round read chunk by chunk
(``recall_gemini_stream.GeminiStream``). Pure: bodies and events in, bodies and events out.

Gemini names no call ``tool_calls``: a call is a ``functionCall`` part of the candidate's
content, and the finish reason is ``STOP`` with or without calls, so taking calls out leaves it
alone. Gemini 3 gives every call an ``id`` (its response carries it back); an older model's
call has none, and is known here by its name and position (``name#position``), its response
by its name alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .recall_codec import FunctionCodec, Held, RecallStream, ToolCall
from .recall_gemini_stream import (
    EMPTY_TEXT,
    SKIP_SIGNATURE,
    GeminiStream,
    answer_parts,
    call_of,
    kept_parts,
    with_parts,
)
from .recall_tool import RecallTool

__all__ = [
    "GEMINI",
    "SKIP_SIGNATURE",
    "GeminiStream",
    "calls",
    "continued",
    "gemini_schema",
    "may_offer",
    "offered",
    "spliced",
    "without",
]


def _get(value: Mapping[str, Any], camel: str, snake: str) -> Any:
    """A field by its JSON name, else its proto name (the API reads either)."""
    found = value.get(camel)
    return value.get(snake) if found is None else found


def may_offer(body: Mapping[str, Any]) -> bool:
    """Whether a request can take the tool: one candidate (``candidateCount`` absent or 1) and
    a function calling mode of ``AUTO`` (or none) naming no functions."""
    config = _get(body, "generationConfig", "generation_config")
    count = (
        _get(config, "candidateCount", "candidate_count") if isinstance(config, Mapping) else None
    )
    if count not in (None, 1):
        return False
    tool_config = _get(body, "toolConfig", "tool_config")
    if not isinstance(tool_config, Mapping):
        return tool_config is None
    calling = _get(tool_config, "functionCallingConfig", "function_calling_config")
    if calling is None:
        return True
    if not isinstance(calling, Mapping) or calling.get("mode") not in (None, "AUTO"):
        return False
    return not _get(calling, "allowedFunctionNames", "allowed_function_names")


def gemini_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON schema as Gemini's ``parameters`` take it (a new dict): without
    ``additionalProperties``, at any depth (a property of that name is kept)."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "additionalProperties":
            continue
        if key == "properties" and isinstance(value, Mapping):
            out[key] = {
                name: gemini_schema(sub) if isinstance(sub, Mapping) else sub
                for name, sub in value.items()
            }
        else:
            out[key] = _schema_value(value)
    return out


def _schema_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return gemini_schema(value)
    if isinstance(value, list):
        return [_schema_value(item) for item in value]
    return value


def offered(body: Mapping[str, Any], tool: RecallTool) -> dict[str, Any]:
    """``body`` with the recall tool as a ``functionDeclarations`` entry after the agent's own
    tools (a new dict; the agent's entries are the same objects)."""
    declaration = {
        "name": tool.name,
        "description": tool.description,
        "parameters": gemini_schema(tool.parameters),
    }
    entry = {"functionDeclarations": [declaration]}
    return {**body, "tools": [*(body.get("tools") or []), entry]}


def _own_id(call: Mapping[str, Any]) -> str | None:
    ident = call.get("id")
    return ident if isinstance(ident, str) and ident else None


def _found(parts: Sequence[Any]) -> list[tuple[Any, ToolCall, bool]]:
    """Each call part with its ``ToolCall`` and whether the id is the call's own."""
    found = []
    for position, part in enumerate(parts):
        call = call_of(part)
        if call is None:
            continue
        name, own, args = call["name"], _own_id(call), call.get("args")
        ident = own or f"{name}#{position}"
        arguments = args if isinstance(args, Mapping) else None
        found.append((part, ToolCall(ident, name, arguments), own is not None))
    return found


def calls(answer: Mapping[str, Any]) -> list[ToolCall]:
    """The function calls of an answer's first candidate, in order (a call without an id of
    its own is ``name#position``, its part's position)."""
    return [call for _, call, _ in _found(answer_parts(answer))]


def _response(call: ToolCall, own: bool, text: str) -> dict[str, Any]:
    """The ``functionResponse`` part answering ``call`` with ``text`` (its id when it has one
    of its own; else Gemini pairs them by name)."""
    response: dict[str, Any] = {"name": call.name, "response": {"result": text}}
    if own:
        response["id"] = call.id
    return {"functionResponse": response}


def continued(
    body: Mapping[str, Any], answer: Mapping[str, Any], results: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """``body`` followed by the answer's content (its parts as they came, thought signatures
    included) and a user content of one ``functionResponse`` per ``(call id, result text)``:
    the next request of the loop. A result for no call of the answer is a ValueError."""
    parts = answer_parts(answer)
    by_id = {call.id: (call, own) for _, call, own in _found(parts)}
    responses = []
    for ident, text in results:
        if ident not in by_id:
            raise ValueError(f"the answer has no function call {ident!r}")
        responses.append(_response(*by_id[ident], text))
    model = {"role": "model", "parts": list(parts)}
    user = {"role": "user", "parts": responses}
    return {**body, "contents": [*(body.get("contents") or []), model, user]}


def without(answer: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The answer with the calls of function ``name`` taken out of its first candidate (the
    agent's own calls stay, in order; ``finishReason`` stays, ``STOP`` either way; a content
    left with no part gets ``EMPTY_TEXT``); the answer itself when it has none."""
    if not any(call.name == name for call in calls(answer)):
        return dict(answer)
    kept, _ = kept_parts(answer_parts(answer), name)
    return with_parts(answer, kept or [EMPTY_TEXT])


def spliced(
    body: Mapping[str, Any], find: Callable[[tuple[str, ...]], Held | None]
) -> dict[str, Any] | None:
    """``body`` with each held recall exchange put back: the model content whose calls' own
    ids are a held key gets the recall calls back among its calls (in the answer's order; the
    agent's calls are the client's own parts), and the content after it their responses
    among the agent's, in the same order. None when nothing changed. Calls without ids of their
    own are never matched: ``name#position`` does not survive the recall calls taken out."""
    contents = body.get("contents")
    if not isinstance(contents, list):
        return None
    out: list[Any] = []
    changed = False
    index = 0
    while index < len(contents):
        content = contents[index]
        index += 1
        held = _held_for(content, find)
        if held is None:
            out.append(content)
            continue
        original = _found(answer_parts(held.answer))
        results = dict(held.results)
        out.append(_with_recall_calls(content, original, results))
        following = contents[index] if index < len(contents) else None
        if isinstance(following, Mapping) and any(
            _response_of(part) is not None for part in _list(following.get("parts"))
        ):
            out.append(_with_recall_responses(following, original, results))
            index += 1
        else:
            recalled = [
                _response(c, own, results[c.id]) for _, c, own in original if c.id in results
            ]
            out.append({"role": "user", "parts": recalled})
        changed = True
    return {**body, "contents": out} if changed else None


def _held_for(content: Any, find: Callable[[tuple[str, ...]], Held | None]) -> Held | None:
    """The held exchange of a model content whose recall calls were taken out, if any."""
    if not isinstance(content, Mapping) or content.get("role") != "model":
        return None
    parts = content.get("parts")
    ids = [_own_id(call) for part in _list(parts) if (call := call_of(part)) is not None]
    if not ids or None in ids:
        return None
    held = find(tuple(ident for ident in ids if ident is not None))
    if held is None or any(ident in dict(held.results) for ident in ids):
        return None
    return held


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _with_recall_calls(
    content: Mapping[str, Any], original: list[tuple[Any, ToolCall, bool]], results: dict[str, str]
) -> dict[str, Any]:
    """A model content with the recall calls back: its call parts, where the first stood, all
    the answer's calls in order (the client's own part for each of the agent's)."""
    parts = _list(content.get("parts"))
    own = {_own_id(call): part for part in parts if (call := call_of(part)) is not None}
    merged = [part if call.id in results else own.get(call.id, part) for part, call, _ in original]
    return {**content, "parts": _replaced(parts, lambda part: call_of(part) is not None, merged)}


def _replaced(parts: list[Any], which: Callable[[Any], bool], block: list[Any]) -> list[Any]:
    """``parts`` with those ``which`` picks replaced by ``block``, where the first stood."""
    out: list[Any] = []
    for part in parts:
        if not which(part):
            out.append(part)
        elif block:
            out.extend(block)
            block = []
    return out


def _response_of(part: Any) -> Mapping[str, Any] | None:
    response = part.get("functionResponse") if isinstance(part, Mapping) else None
    return response if isinstance(response, Mapping) else None


def _with_recall_responses(
    content: Mapping[str, Any], original: list[tuple[Any, ToolCall, bool]], results: dict[str, str]
) -> dict[str, Any]:
    """The content answering the calls with the recall responses back: its response parts,
    where the first stood, one per call in the answer's order (the client's own for the
    agent's, found by id, else by name), then any of the client's left over."""
    parts = _list(content.get("parts"))
    pool = [part for part in parts if _response_of(part) is not None]
    block: list[Any] = []
    for _, call, own in original:
        if call.id in results:
            block.append(_response(call, own, results[call.id]))
            continue
        responses = [(n, _response_of(part) or {}) for n, part in enumerate(pool)]
        match = [n for n, response in responses if response.get("id") == call.id] or [
            n
            for n, response in responses
            if not response.get("id") and response.get("name") == call.name
        ]
        if match:
            block.append(pool.pop(match[0]))
    block.extend(pool)
    return {
        **content,
        "parts": _replaced(parts, lambda part: _response_of(part) is not None, block),
    }


def _stream(after: RecallStream | None) -> RecallStream:
    """A streamed round's reader (``GeminiStream``), continuing ``after``."""
    return GeminiStream(after if isinstance(after, GeminiStream) else None)


GEMINI = FunctionCodec(may_offer, offered, calls, continued, without, spliced, _stream)
"""The Gemini codec of the recall loop."""
