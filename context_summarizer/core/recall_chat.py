"""The recall tool on chat completions, for the tool loop the proxy and the library run: the
tool offered in a request body, its calls found in an answer, the request continued with their
results, and an answer with them taken out (when the model also called the agent's tools).
Pure: bodies in, bodies out; nothing here sends anything.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .recall_chat_stream import ChatStream
from .recall_codec import FunctionCodec, Held, RecallStream, ToolCall
from .recall_tool import RecallTool

_KEPT_FIELDS = ("role", "content", "tool_calls")
"""What of an answer's message goes back into the conversation (not ``refusal: null``,
``annotations``, ``audio`` or a provider's reasoning fields, which a request does not take)."""


def offered(body: Mapping[str, Any], tool: RecallTool) -> dict[str, Any]:
    """``body`` with the recall tool after the agent's own tools (a new dict; the agent's tool
    objects are the same objects)."""
    definition = {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": copy.deepcopy(dict(tool.parameters)),
        },
    }
    return {**body, "tools": [*(body.get("tools") or []), definition]}


def may_offer(body: Mapping[str, Any]) -> bool:
    """Whether a request can take the tool: one choice (``n`` absent or 1), and no
    ``tool_choice`` that names or forbids tools (the agent's choice stands)."""
    if body.get("n") not in (None, 1):
        return False
    choice = body.get("tool_choice")
    return choice in (None, "auto")


def calls(completion: Mapping[str, Any]) -> list[ToolCall]:
    """The function calls of a completion's first choice, in order."""
    message = _message(completion)
    found = []
    for call in (message or {}).get("tool_calls") or ():
        if not isinstance(call, Mapping) or call.get("type", "function") != "function":
            continue
        function = call.get("function")
        if not isinstance(function, Mapping) or not isinstance(call.get("id"), str):
            continue
        arguments = function.get("arguments")
        found.append(
            ToolCall(
                call["id"],
                str(function.get("name", "")),
                arguments if isinstance(arguments, str) else "",
            )
        )
    return found


def continued(
    body: Mapping[str, Any], completion: Mapping[str, Any], results: Sequence[tuple[str, str]]
) -> dict[str, Any]:
    """``body`` followed by the completion's message and one tool message per ``(call id,
    result text)``: the next request of the loop."""
    message = _message(completion) or {}
    assistant = {key: message[key] for key in _KEPT_FIELDS if message.get(key) is not None}
    assistant["role"] = "assistant"
    # A null content goes as "": the API takes either beside tool calls, and some servers
    # (llama-cpp-python's) only a string.
    assistant.setdefault("content", "")
    tools = [{"role": "tool", "tool_call_id": ident, "content": text} for ident, text in results]
    return {**body, "messages": [*body.get("messages", []), assistant, *tools]}


def without(completion: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The completion with the calls of function ``name`` taken out of its first choice (the
    agent's own calls stay, in order); the completion itself when it has none."""
    message = _message(completion)
    if message is None or not any(call.name == name for call in calls(completion)):
        return dict(completion)
    kept = [
        call
        for call in message.get("tool_calls") or ()
        if not (
            isinstance(call, Mapping)
            and isinstance(call.get("function"), Mapping)
            and call["function"].get("name") == name
        )
    ]
    out = copy.deepcopy(dict(completion))
    choice = out["choices"][0]
    if kept:
        choice["message"]["tool_calls"] = copy.deepcopy(kept)
    else:
        choice["message"].pop("tool_calls", None)
        if choice.get("finish_reason") == "tool_calls":
            choice["finish_reason"] = "stop"
    return out


def spliced(
    body: Mapping[str, Any], find: Callable[[tuple[str, ...]], Held | None]
) -> dict[str, Any] | None:
    """``body`` with each held recall exchange put back: the assistant message whose tool call
    ids are a held key gets the recall calls back (in the answer's order; the agent's calls are
    the client's own objects) and their tool messages follow it. None when nothing changed."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return None
    out: list[Any] = []
    changed = False
    for message in messages:
        held = _held_for(message, find)
        if held is None:
            out.append(message)
            continue
        assert isinstance(message, Mapping)
        own = {call["id"]: call for call in message["tool_calls"]}
        original = (_message(held.answer) or {}).get("tool_calls") or []
        merged = [own.get(call.get("id"), call) for call in original if isinstance(call, Mapping)]
        out.append({**message, "tool_calls": merged})
        out.extend(
            {"role": "tool", "tool_call_id": ident, "content": text} for ident, text in held.results
        )
        changed = True
    return {**body, "messages": out} if changed else None


def _held_for(message: Any, find: Callable[[tuple[str, ...]], Held | None]) -> Held | None:
    """The held exchange of an assistant message whose recall calls were taken out, if any."""
    if not isinstance(message, Mapping) or message.get("role") != "assistant":
        return None
    tool_calls = message.get("tool_calls")
    if not isinstance(tool_calls, list) or not tool_calls:
        return None
    if not all(
        isinstance(call, Mapping) and isinstance(call.get("id"), str) for call in tool_calls
    ):
        return None
    held = find(tuple(call["id"] for call in tool_calls))
    if held is None or any(call["id"] in dict(held.results) for call in tool_calls):
        return None
    return held


def _message(completion: Mapping[str, Any]) -> Mapping[str, Any] | None:
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, Mapping) else None


def _stream(after: RecallStream | None) -> RecallStream:
    """A streamed round's reader (``ChatStream``), continuing ``after``."""
    return ChatStream(after if isinstance(after, ChatStream) else None)


CHAT = FunctionCodec(may_offer, offered, calls, continued, without, spliced, _stream)
"""The chat completions codec of the recall loop."""
