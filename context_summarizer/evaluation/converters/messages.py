"""Chat Completions messages rebuilt from another tool's (``openai_messages``): only the keys
each role accepts, demonstrations dropped, tool results paired with the calls they answer."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

from ...core.errors import ConversionError
from ...core.messages import validate_messages

_KEYS: dict[str, tuple[str, ...]] = {
    "system": ("name",),
    "developer": ("name",),
    "user": ("name",),
    "assistant": ("name", "refusal", "function_call"),
    "tool": (),
    "function": ("name",),
}


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, (str, int)) and str(value).lower() in {"true", "1"})


def _content(value: Any) -> str | list[dict[str, Any]] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        parts: list[dict[str, Any]] = []
        for part in value:
            if isinstance(part, Mapping) and isinstance(part.get("type"), str):
                parts.append(dict(part))
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            else:
                text = part if isinstance(part, str) else json.dumps(part, ensure_ascii=False)
                parts.append({"type": "text", "text": text})
        return parts or ""
    return json.dumps(value, ensure_ascii=False)


def _parse_listish(value: Any) -> Any:
    """A list given as JSON or Python-literal text (SWE-agent writes both), else ``value``."""
    if not isinstance(value, str):
        return value
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(value)
        except (ValueError, SyntaxError):
            continue
    return value


def _tool_calls(value: Any, where: str, index: int) -> list[dict[str, Any]]:
    calls = _parse_listish(value)
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise ConversionError(f"{where}: tool_calls is not a list")
    out: list[dict[str, Any]] = []
    for n, call in enumerate(calls):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise ConversionError(f"{where}: tool_calls[{n}] has no function name")
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
        call_id = call["id"] if isinstance(call.get("id"), str) else f"call_{index}_{n}"
        out.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": function["name"], "arguments": arguments},
            }
        )
    return out


def _answered_id(item: Mapping[str, Any]) -> str | None:
    call_id = item.get("tool_call_id")
    if isinstance(call_id, str):
        return call_id
    ids = _parse_listish(item.get("tool_call_ids"))
    return ids[0] if isinstance(ids, list) and ids and isinstance(ids[0], str) else None


def openai_messages(raw: Any, *, where: str) -> list[dict[str, Any]]:
    """Chat Completions messages rebuilt from ``raw`` (see the module docstring for the rules).

    ``where`` prefixes error messages (a file name, a record number). Raises ``ConversionError``
    for a message that is not an object or has a role Chat Completions does not know.
    """
    if not isinstance(raw, list):
        raise ConversionError(f"{where}: messages must be a list")
    out: list[dict[str, Any]] = []
    pending: set[str] = set()
    for index, item in enumerate(raw):
        at = f"{where}: message {index}"
        if not isinstance(item, Mapping):
            raise ConversionError(f"{at} is not an object")
        if _truthy(item.get("is_demo")):
            continue
        role = item.get("role")
        if not isinstance(role, str) or role not in _KEYS:
            raise ConversionError(f"{at} has unsupported role {role!r}")
        content = _content(item.get("content"))
        message: dict[str, Any] = {"role": role, "content": content}
        message.update({k: item[k] for k in _KEYS[role] if item.get(k) is not None})
        if role == "tool":
            call_id = _answered_id(item)
            if call_id is not None and call_id in pending:
                pending.discard(call_id)
                message["tool_call_id"] = call_id
            else:  # an observation that answers no call: keep what it says, as the user's turn
                message = {"role": "user", "content": content or ""}
        elif role == "assistant":
            calls = _tool_calls(item.get("tool_calls"), at, index)
            if calls:
                message["tool_calls"] = calls
            pending = {call["id"] for call in calls}
        else:
            pending = set()
        out.append(message)
    return _drop_unanswered(out)


def _drop_unanswered(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kept: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        calls = message.get("tool_calls")
        if calls:
            answered: set[str] = set()
            for later in messages[index + 1 :]:
                if later["role"] != "tool":
                    break
                answered.add(later["tool_call_id"])
            message["tool_calls"] = [call for call in calls if call["id"] in answered]
            if not message["tool_calls"]:
                del message["tool_calls"]
        if message.get("content") is None and not message.get("tool_calls"):
            message["content"] = ""
        kept.append(message)
    return validate_messages(kept)
