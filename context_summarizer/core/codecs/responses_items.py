"""Responses API items and parts to and from their Chat Completions counterparts. Pure.

The pieces ``responses`` (the codec) assembles: content parts both ways, a call item as a
``tool_calls`` entry, an output item as a tool message's content, a tool definition, and which
items pair as call and output.

What a chat translation keeps of a wire object: everything the model reads. It leaves out what
does not change the conversation: ``id`` and ``status`` of translated items (a client echoing
them or not is the same conversation), ``prompt_cache_breakpoint`` on parts (a cache marker,
never part of the conversation's identity, see ``codecs``), and the spelling of equivalent
forms (``"type": "message"`` or none; ``input_text`` or ``output_text`` for the same text).
Any other field of a translated item (``phase`` of an assistant message, ``namespace`` or
``caller`` of a call, ``annotations`` of a text part) is carried under its own name, so two
items that differ in it give different chat messages; a field named like a key the translation
sets (the API has none) is not carried.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import InvalidConversation

WIRE_TYPE_KEY = "x_type"
"""Key of a ``tool_calls`` entry or tool message decoded from a custom tool's call or output
(``custom_tool_call``, ``custom_tool_call_output``): its wire type, so it is a different chat
message from a function's, and the item it is re-encoded as when shortened."""

FILE_ID_URL = "file_id:"
"""Prefix of the placeholder ``image_url.url`` of an image given by ``file_id``."""

CALLS = frozenset({"function_call", "custom_tool_call"})
"""Call items translated into ``tool_calls`` entries the engine reads."""
OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})
"""Output items translated into tool messages the engine reads (and may shorten)."""
MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})

_UNREAD = frozenset({"id", "status"})
"""Fields of a translated item that do not change the conversation."""
_CACHE_MARKERS = frozenset({"prompt_cache_breakpoint"})


def extras(item: Mapping[str, Any], taken: frozenset[str]) -> dict[str, Any]:
    """The fields of ``item`` its translation does not otherwise carry (see the module doc)."""
    return {k: v for k, v in item.items() if k not in taken and k not in _UNREAD}


def opaque_call_key(item: Mapping[str, Any]) -> str | None:
    """The id an output answering this untranslated call item names (``call_id``; an MCP
    approval request's ``id``), or None when nothing answers it by id."""
    kind = item.get("type")
    key = item.get("id") if kind == "mcp_approval_request" else item.get("call_id")
    if not isinstance(kind, str) or kind.endswith("_output") or not isinstance(key, str):
        return None
    return key


def opaque_output_key(item: Mapping[str, Any]) -> str | None:
    """The call id this untranslated output item answers, or None when it is not an output:
    ``call_id`` of a ``*_output`` item (a local shell output may name it ``id``), an MCP
    approval response's ``approval_request_id``."""
    kind = item.get("type")
    if kind == "mcp_approval_response":
        key = item.get("approval_request_id")
    elif isinstance(kind, str) and kind.endswith("_output"):
        key = item.get("call_id")
        if key is None and kind == "local_shell_call_output":
            key = item.get("id")
    else:
        return None
    return key if isinstance(key, str) else None


def _require_str(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidConversation(f"'{where}' must be {what}", param=where)
    return value


def chat_part(part: Any, where: str) -> dict[str, Any]:
    """One wire content part (of a message or a tool output) as a chat content part."""
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise InvalidConversation(f"'{where}' must be an object with a 'type'", param=where)
    kind = part["type"]
    rest = {k: v for k, v in part.items() if k != "type" and k not in _CACHE_MARKERS}
    if kind in ("input_text", "output_text"):
        text = _require_str(rest.pop("text", None), f"{where}.text", "a string")
        return {"type": "text", "text": text, **rest}
    if kind == "refusal":
        refusal = _require_str(rest.pop("refusal", None), f"{where}.refusal", "a string")
        return {"type": "refusal", "refusal": refusal, **rest}
    if kind == "input_image":
        url, file_id, detail = (
            rest.pop("image_url", None),
            rest.get("file_id"),
            rest.pop("detail", None),
        )
        if not isinstance(url, str):
            url = FILE_ID_URL + _require_str(file_id, f"{where}.image_url", "a string (or file_id)")
            del rest["file_id"]
        image = {"url": url} if detail is None else {"url": url, "detail": detail}
        return {"type": "image_url", "image_url": image, **rest}
    if kind == "input_file":
        return {"type": "file", "file": rest}
    return {"type": kind, **rest}


def chat_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    """A message's or output's content: a string as is, a list of parts translated."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise InvalidConversation(
            f"'{where}' must be a string or a list of content parts", param=where
        )
    return [chat_part(part, f"{where}[{p}]") for p, part in enumerate(content)]


def wire_part(part: Any, *, assistant: bool) -> Any:
    """One chat content part as a wire part (of an assistant message when ``assistant``)."""
    if not isinstance(part, Mapping):
        return part
    kind = part.get("type")
    if kind == "text":
        if assistant:
            return {"type": "output_text", "text": part.get("text", ""), "annotations": []}
        return {"type": "input_text", "text": part.get("text", "")}
    if kind == "image_url":
        image = part.get("image_url")
        image = image if isinstance(image, Mapping) else {"url": image}
        url = image.get("url")
        wire: dict[str, Any] = {"type": "input_image", "detail": image.get("detail", "auto")}
        if isinstance(url, str) and url.startswith(FILE_ID_URL):
            wire["file_id"] = url.removeprefix(FILE_ID_URL)
        else:
            wire["image_url"] = url
        return wire
    if kind == "file":
        file = part.get("file")
        return {"type": "input_file", **(file if isinstance(file, Mapping) else {})}
    return dict(part)


def wire_content(content: Any, *, assistant: bool = False) -> Any:
    """A chat content (string, parts or None) as a wire content: a string as is."""
    if isinstance(content, list):
        return [wire_part(part, assistant=assistant) for part in content]
    return "" if content is None else content


def tool_call(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A ``function_call`` or ``custom_tool_call`` item as a ``tool_calls`` entry (a custom
    call's ``input`` as the arguments, its type under ``WIRE_TYPE_KEY``)."""
    call_id = _require_str(item.get("call_id"), f"{where}.call_id", "a string")
    name = _require_str(item.get("name"), f"{where}.name", "a string")
    argument = "arguments" if item["type"] == "function_call" else "input"
    arguments = _require_str(item.get(argument), f"{where}.{argument}", "a string")
    entry = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    entry.update(extras(item, frozenset({*entry, "call_id", "name", argument, WIRE_TYPE_KEY})))
    if item["type"] != "function_call":
        entry[WIRE_TYPE_KEY] = item["type"]
    return entry


def tool_message(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A ``function_call_output`` or ``custom_tool_call_output`` item as a tool message."""
    call_id = _require_str(item.get("call_id"), f"{where}.call_id", "a string")
    if "output" not in item:
        raise InvalidConversation(f"'{where}.output' is required", param=f"{where}.output")
    content = chat_content(item["output"], f"{where}.output")
    message = {"role": "tool", "tool_call_id": call_id, "content": content}
    message.update(extras(item, frozenset({*message, "type", "call_id", "output", WIRE_TYPE_KEY})))
    if item["type"] != "function_call_output":
        message[WIRE_TYPE_KEY] = item["type"]
    return message


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The request's ``tools`` as Chat Completions tools: a function tool as
    ``{"type": "function", "function": {...its other fields}}``, any other tool as it is."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise InvalidConversation("'tools' must be a list of tool objects", param="tools")
    chat: list[dict[str, Any]] = []
    for t, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise InvalidConversation(f"'tools[{t}]' must be an object", param=f"tools[{t}]")
        if tool.get("type") != "function":
            chat.append(tool)
            continue
        _require_str(tool.get("name"), f"tools[{t}].name", "a string")
        chat.append(
            {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
        )
    return chat
