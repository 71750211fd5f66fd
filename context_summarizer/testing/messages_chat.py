"""A Messages API request as the Chat Completions body the responders read.

The test upstream answers ``POST /v1/messages`` with the same responders (and scripted replies)
as chat completions, so the project's scripted agents and its summary-request detection work
unchanged: :func:`chat_body_for` translates the request for them, and nothing else.

- ``system`` -> a first ``system`` message (text blocks joined by a blank line);
- a message's text blocks -> its ``content``: one string, the texts joined by a blank line
  (a list of parts instead when the message holds an image or a document);
- ``tool_use`` blocks -> the assistant message's ``tool_calls`` (``arguments``: the ``input``
  as JSON); ``thinking`` and ``redacted_thinking`` blocks are left out;
- ``tool_result`` blocks -> ``role: "tool"`` messages, in order, before the rest of their user
  message (``content``: the result's text);
- ``tools`` -> ``{"type": "function", "function": {name, description, parameters}}``;
- ``tool_choice`` ``{"type": "none" | "auto" | "any"}`` -> ``"none"`` / ``"auto"`` /
  ``"required"``; ``{"type": "tool", "name": n}`` -> ``{"type": "function", "function":
  {"name": n}}``;
- ``model``, ``max_tokens``, ``stream``, ``temperature``, ``top_p`` are kept and
  ``stop_sequences`` becomes ``stop``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["chat_body_for"]

_TOOL_CHOICES = {"none": "none", "auto": "auto", "any": "required"}


def _texts(content: Any) -> list[str]:
    """The texts of a content (a string, or the ``text`` blocks of a list)."""
    if isinstance(content, str):
        return [content] if content else []
    blocks = content if isinstance(content, list) else []
    return [
        str(block.get("text"))
        for block in blocks
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]


def _part(block: Mapping[str, Any]) -> dict[str, Any]:
    """One non-tool content block as a chat content part."""
    kind = block.get("type")
    source = block.get("source")
    source = source if isinstance(source, Mapping) else {}
    if kind == "image":
        url = source.get("url")
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
        return {"type": "image_url", "image_url": {"url": str(url)}}
    if kind == "document":
        return {"type": "file", "file": {"filename": str(block.get("title") or "document")}}
    return {"type": "text", "text": str(block.get("text") or "")}


def _user_content(blocks: list[Mapping[str, Any]]) -> str | list[dict[str, Any]]:
    """A user message's non-tool blocks as chat content."""
    if any(block.get("type") in ("image", "document") for block in blocks):
        return [_part(block) for block in blocks if block.get("type") != "tool_result"]
    return "\n\n".join(_texts(blocks))


def _chat_messages(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as the chat messages it becomes."""
    role = message.get("role")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []
    if role == "system":  # a mid-conversation system message: text blocks only
        return [{"role": "system", "content": "\n\n".join(_texts(blocks))}]
    if role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(_texts(blocks)) or None}
        calls = [
            {
                "id": str(block.get("id")),
                "type": "function",
                "function": {
                    "name": str(block.get("name")),
                    "arguments": json.dumps(block.get("input"), ensure_ascii=False),
                },
            }
            for block in blocks
            if block.get("type") == "tool_use"
        ]
        if calls:
            out["tool_calls"] = calls
        elif out["content"] is None:
            out["content"] = ""
        return [out]
    chat: list[dict[str, Any]] = [
        {
            "role": "tool",
            "tool_call_id": str(block.get("tool_use_id")),
            "content": "\n\n".join(_texts(block.get("content"))),
        }
        for block in blocks
        if block.get("type") == "tool_result"
    ]
    rest = [block for block in blocks if block.get("type") != "tool_result"]
    if rest or not chat:
        chat.append({"role": "user", "content": _user_content(rest)})
    return chat


def _tool_choice(choice: Any) -> Any:
    if not isinstance(choice, Mapping):
        return None
    if choice.get("type") == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return _TOOL_CHOICES.get(str(choice.get("type")))


def chat_body_for(body: Mapping[str, Any]) -> dict[str, Any]:
    """The Chat Completions body a Messages API request ``body`` reads as (see the module
    docstring); tolerant of malformed parts, which it skips."""
    messages: list[dict[str, Any]] = []
    system = "\n\n".join(_texts(body.get("system")))
    if system:
        messages.append({"role": "system", "content": system})
    raw = body.get("messages")
    for message in raw if isinstance(raw, list) else ():
        if isinstance(message, Mapping):
            messages.extend(_chat_messages(message))
    chat: dict[str, Any] = {"model": body.get("model"), "messages": messages}
    for key in ("max_tokens", "stream", "temperature", "top_p"):
        if key in body:
            chat[key] = body[key]
    if "stop_sequences" in body:
        chat["stop"] = body["stop_sequences"]
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        chat["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.get("name"),
                    "description": tool.get("description", ""),
                    "parameters": tool.get("input_schema", {"type": "object"}),
                },
            }
            for tool in tools
            if isinstance(tool, Mapping)
        ]
    choice = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    return chat
