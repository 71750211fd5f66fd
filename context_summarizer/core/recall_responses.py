"""The recall tool on OpenAI's Responses API (``POST /v1/responses``), for the tool loop the
proxy and the library run: the tool offered in a request body, its calls found in a response,
the request continued with their results, and a response with them taken out (when the model
also called the agent's tools), and a held exchange put back into a later request. The stream
reader is ``recall_responses_stream``. Pure: bodies in, bodies out; nothing here sends anything.

A model turn's calls come back in the client's ``input`` as a run of consecutive call items
(``function_call``, and the other calls the client answers), their outputs after them; that run
is how a held turn is found again (its ``call_id`` s, in order, are the ``Held.key``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .recall_codec import FunctionCodec, Held, RecallStream, ToolCall
from .recall_responses_stream import ResponsesStream, is_call_of
from .recall_tool import RecallTool

_CALLS: Mapping[str, tuple[str | None, str]] = {
    "function_call": ("name", "arguments"),
    "custom_tool_call": ("name", "input"),
    "computer_call": (None, "action"),
    "local_shell_call": (None, "action"),
    "shell_call": (None, "action"),
    "apply_patch_call": (None, "operation"),
}
"""The output items the client answers (their name field, else the type names them; their
arguments field). Not only function calls: a response that also holds a custom tool's or a
shell call is not one the loop may continue on its own, the client must answer those."""


def offered(body: Mapping[str, Any], tool: RecallTool) -> dict[str, Any]:
    """``body`` with the recall tool after the agent's own tools (a new dict; the agent's tool
    objects are the same objects). Not strict: its schema has optional properties, which a
    strict function's may not."""
    definition = {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": copy.deepcopy(dict(tool.parameters)),
        "strict": False,
    }
    return {**body, "tools": [*(body.get("tools") or []), definition]}


def may_offer(body: Mapping[str, Any]) -> bool:
    """Whether a request can take the tool: no ``tool_choice`` but ``"auto"`` (one that names a
    tool, requires one, forbids them or allows only some stands as the agent chose it); not a
    stream the upstream stores (``stream`` true, ``store`` not false): a streamed loop of
    several rounds gives the client the first round's response id, which the upstream stored
    ending in an unanswered recall call, so continuing it by ``previous_response_id`` would
    fail; and not a request that asks for compaction items (``context_management``): its
    client drops the compacted turns for the item, so no later request holds the text a
    recall call would read back."""
    if body.get("stream") is True and body.get("store") is not False:
        return False
    if _asks_for_compaction(body.get("context_management")):
        return False
    return body.get("tool_choice") in (None, "auto")


def _asks_for_compaction(entries: Any) -> bool:
    """Whether ``context_management`` has a compaction entry (as the proxy reads it)."""
    return isinstance(entries, list) and any(
        isinstance(entry, Mapping) and entry.get("type") == "compaction" for entry in entries
    )


def calls(response: Mapping[str, Any]) -> list[ToolCall]:
    """The tool calls of a response's output, in order: each ``function_call`` by its
    ``call_id`` (the id its output answers, not the item's ``id``), and the other calls the
    client answers (a namespaced function's name is ``namespace.name``; a shell, computer or
    patch call is named by its type)."""
    found = []
    for item in _output(response):
        if not isinstance(item, Mapping) or item.get("type") not in _CALLS:
            continue
        if not isinstance(item.get("call_id"), str):
            continue
        name_field, arguments_field = _CALLS[item["type"]]
        name = str(item.get(name_field, "")) if name_field else item["type"]
        if item.get("namespace"):
            name = f"{item['namespace']}.{name}"
        arguments = item.get(arguments_field)
        if not isinstance(arguments, (str, Mapping)):
            arguments = "" if name_field else None
        found.append(ToolCall(item["call_id"], name, arguments))
    return found


def continued(
    body: Mapping[str, Any], response: Mapping[str, Any], results: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """``body`` with its ``input`` followed by the response's output items (as they are) and one
    ``function_call_output`` per ``(call id, result text)``: the next request of the loop.
    Every other field stays, ``previous_response_id`` too (the input is still what follows
    that response)."""
    given = body.get("input")
    items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given or [])
    outputs = [
        {"type": "function_call_output", "call_id": ident, "output": text}
        for ident, text in results
    ]
    return {**body, "input": [*items, *_output(response), *outputs]}


def without(response: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The response with the ``function_call`` items of ``name`` taken out of its output (the
    agent's own calls stay, in order; Responses has no stop reason, its status stays); the
    response itself when it has none."""
    output = _output(response)
    if not any(is_call_of(item, name) for item in output):
        return dict(response)
    return {**response, "output": [item for item in output if not is_call_of(item, name)]}


def spliced(
    body: Mapping[str, Any], find: Callable[[tuple[str, ...]], Held | None]
) -> dict[str, Any] | None:
    """``body`` with each held recall exchange put back: the run of consecutive call items in
    ``input`` whose ``call_id`` s (in order) are a held key gets the answer's recall
    ``function_call`` items back among its own, in the answer's order (the agent's items are
    the client's own objects), and one ``function_call_output`` per held result right after it
    (before the client's own outputs). None when nothing was put back: no run is held, or a
    held result's call is in the input already (put back before; no turn gets it twice)."""
    given = body.get("input")
    if not isinstance(given, list):
        return None
    present = {item["call_id"] for item in given if _has_call_id(item)}
    out: list[Any] = []
    changed = False
    start = 0
    while start < len(given):
        end = start
        while end < len(given) and _is_call(given[end]):
            end += 1
        if end == start:
            out.append(given[start])
            start += 1
            continue
        run = given[start:end]
        start = end
        held = find(tuple(item["call_id"] for item in run))
        if held is None or any(ident in present for ident, _ in held.results):
            out.extend(run)
            continue
        out.extend(_with_recall_calls(run, held))
        out.extend(
            {"type": "function_call_output", "call_id": ident, "output": text}
            for ident, text in held.results
        )
        present.update(ident for ident, _ in held.results)
        changed = True
    return {**body, "input": out} if changed else None


def _with_recall_calls(run: list[Any], held: Held) -> list[Any]:
    """The run's call items with the held answer's recall calls among them, in the answer's
    order (the client's own item for each of the agent's calls)."""
    own = {item["call_id"]: item for item in run}
    results = dict(held.results)
    merged: list[Any] = []
    for item in _output(held.answer):
        if not _is_call(item):
            continue
        if item["call_id"] in own:
            merged.append(own.pop(item["call_id"]))
        elif item["call_id"] in results:
            merged.append(item)
    return [*merged, *own.values()]  # none left over: the key is the answer's own


def _is_call(item: Any) -> bool:
    """Whether an input item is a call the client answers, with its ``call_id``."""
    return isinstance(item, Mapping) and item.get("type") in _CALLS and _has_call_id(item)


def _has_call_id(item: Any) -> bool:
    return isinstance(item, Mapping) and isinstance(item.get("call_id"), str)


def _output(response: Mapping[str, Any]) -> list[Any]:
    output = response.get("output")
    return output if isinstance(output, list) else []


def _stream(after: RecallStream | None) -> RecallStream:
    """A streamed round's reader (``ResponsesStream``), continuing ``after``."""
    return ResponsesStream(after if isinstance(after, ResponsesStream) else None)


RESPONSES = FunctionCodec(may_offer, offered, calls, continued, without, spliced, _stream)
"""The Responses API codec of the recall loop."""
