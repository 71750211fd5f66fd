"""The Anthropic Messages API codec: ``system`` + ``messages`` to and from chat messages. Pure.

Decoding, message by message (``Origin.items`` is the message's index in ``messages``):

- ``system`` (a string or text blocks) becomes one leading system message (``system_items`` 1);
  ``encode`` never touches the body's ``system``.
- A string ``content`` becomes a chat message of the same role.
- A ``system`` message inside ``messages`` (mid-conversation, as Claude Code sends with its
  default model) becomes a chat system message in place (string or text blocks), kept verbatim
  through compaction like every instruction.
- An assistant message becomes one assistant chat message: its text blocks the content, its
  ``tool_use`` blocks ``tool_calls`` (arguments: the input's canonical JSON), every other block
  (``thinking`` and ``redacted_thinking`` with their signatures, server tool blocks) opaque.
- A user message is split in wire order: each ``tool_result`` block becomes a tool message
  (``Origin.blocks`` = its block), each run of other blocks (text, image, document) one user
  message. So a turn mixing tool results and text keeps the results with their call, and the
  engine may keep the results while summarizing nothing of the text, or the reverse.

Images become ``image_url`` parts (a data URL or the URL) and documents ``file`` parts, so they
are counted as images and files. ``cache_control`` is never copied (see ``codecs``).

Encoding: consecutive chat messages from the same wire message become that message again: the
client's own object when all its blocks are there, else a message of the kept blocks (the
client's block objects). A message the engine wrote is translated: a summary becomes a user
message of one text block, a shortened tool result replaces its block in its own turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidConversation
from ..messages import Message, canonical_json, validate_messages
from . import OPAQUE_KEY, Decoded, Origin
from .anthropic_encode import encode_messages, stripped

_USER_PART_TYPES = frozenset({"text", "image", "document", "search_result"})


class AnthropicCodec:
    """``Codec`` for ``POST /v1/messages`` bodies."""

    def decode(self, body: Mapping[str, Any]) -> Decoded:
        """The conversation of a Messages request; ``InvalidConversation`` naming the field
        (``messages.3.content.1``, Anthropic's style) for one the API would refuse."""
        wire = body.get("messages")
        if not isinstance(wire, list) or not wire:
            raise InvalidConversation(
                "messages: field required, a non-empty array of messages", param="messages"
            )
        messages: list[Message] = []
        origins: dict[int, Origin] = {}
        system_items = 0
        if "system" in body and body["system"] is not None:
            messages.append(_system_message(body["system"]))
            origins[id(messages[0])] = Origin(items=())
            system_items = 1
        for index, item in enumerate(wire):
            after = (
                wire[index - 1].get("role")
                if index and isinstance(wire[index - 1], Mapping)
                else None
            )
            for message, origin in _decode_message(item, index, after):
                messages.append(message)
                origins[id(message)] = origin
        validate_messages(messages)
        return Decoded(
            messages=messages,
            tools=_chat_tools(body.get("tools")),
            origins=origins,
            items=wire,
            system_items=system_items,
        )

    def encode(self, decoded: Decoded, messages: Sequence[Message]) -> dict[str, Any]:
        """``{"messages": [...]}`` for the engine's ``messages`` (the leading system message
        stands for ``system``, which stays as the client sent it; see ``anthropic_encode``)."""
        return {"messages": encode_messages(decoded, messages)}


# -- decoding -------------------------------------------------------------------------------------


def _system_message(system: Any) -> Message:
    if isinstance(system, str):
        return {"role": "system", "content": system}
    if isinstance(system, list):
        parts: list[dict[str, Any]] = []
        for number, block in enumerate(system):
            if not isinstance(block, Mapping) or block.get("type") != "text":
                raise InvalidConversation(
                    f"system.{number}: a system block must be a text block", param="system"
                )
            if not isinstance(block.get("text"), str):
                raise InvalidConversation(
                    f"system.{number}.text: field required", param=f"system.{number}.text"
                )
            parts.append({"type": "text", "text": block["text"]})
        return {"role": "system", "content": parts}
    raise InvalidConversation("system: must be a string or an array of text blocks", param="system")


def _decode_message(item: Any, index: int, after: Any = None) -> list[tuple[Message, Origin]]:
    """The chat messages of wire message ``index`` (``after``: the role of the one before)."""
    where = f"messages.{index}"
    if not isinstance(item, Mapping):
        raise InvalidConversation(f"{where}: must be an object", param=where)
    role = item.get("role")
    if role == "system":
        if after not in ("user", "system"):
            raise InvalidConversation(
                f"{where}: a system message must immediately follow a user turn",
                param=f"{where}.role",
            )
        return [(_mid_system(item.get("content"), where), Origin(items=(index,)))]
    if role not in ("user", "assistant"):
        raise InvalidConversation(
            f"{where}.role: Input should be 'user', 'assistant' or 'system'",
            param=f"{where}.role",
        )
    content = item.get("content")
    if isinstance(content, str):
        return [({"role": role, "content": content}, Origin(items=(index,)))]
    if not isinstance(content, list):
        raise InvalidConversation(
            f"{where}.content: must be a string or an array of content blocks",
            param=f"{where}.content",
        )
    if not content and not (role == "assistant"):
        raise InvalidConversation(
            f"{where}: user messages must have non-empty content", param=f"{where}.content"
        )
    for number, block in enumerate(content):
        if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
            at = f"{where}.content.{number}"
            raise InvalidConversation(f"{at}: a block must be an object with a type", param=at)
    if role == "assistant":
        return [(_assistant(content, where), Origin(items=(index,)))]
    return _user(content, index)


def _mid_system(content: Any, where: str) -> Message:
    """A ``system`` message inside ``messages`` (a mid-conversation system message): a chat
    system message in place, which the engine keeps verbatim like any instruction. Where it may
    stand is the upstream's rule; the codec only reads it."""
    if isinstance(content, str):
        return {"role": "system", "content": content}
    if not isinstance(content, list) or not content:
        raise InvalidConversation(
            f"{where}.content: a system message holds a string or text blocks",
            param=f"{where}.content",
        )
    parts: list[dict[str, Any]] = []
    for number, block in enumerate(content):
        at = f"{where}.content.{number}"
        if not isinstance(block, Mapping) or block.get("type") != "text":
            raise InvalidConversation(f"{at}: a system message holds text blocks only", param=at)
        parts.append({"type": "text", "text": _text(block, at)})
    return {"role": "system", "content": parts}


def _assistant(blocks: Sequence[Mapping[str, Any]], where: str) -> Message:
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    opaque: list[dict[str, Any]] = []
    for number, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, f"{where}.content.{number}")})
        elif kind == "tool_use":
            calls.append(_tool_call(block, f"{where}.content.{number}"))
        else:  # thinking, redacted_thinking, server tool use and results: carried, not read
            opaque.append(stripped(block))
    message: Message = {"role": "assistant", "content": parts or None}
    if calls:
        message["tool_calls"] = calls
    if opaque:
        message[OPAQUE_KEY] = opaque
    return message


def _tool_call(block: Mapping[str, Any], at: str) -> dict[str, Any]:
    call_id, name = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidConversation(f"{at}.id: field required", param=f"{at}.id")
    if not isinstance(name, str) or not name:
        raise InvalidConversation(f"{at}.name: field required", param=f"{at}.name")
    arguments = block.get("input", {})
    if not isinstance(arguments, Mapping):
        raise InvalidConversation(f"{at}.input: must be an object", param=f"{at}.input")
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": canonical_json(arguments)},
    }


def _user(blocks: Sequence[Mapping[str, Any]], index: int) -> list[tuple[Message, Origin]]:
    where = f"messages.{index}"
    out: list[tuple[Message, Origin]] = []
    run: list[int] = []

    def flush() -> None:
        if run:
            parts = [_user_part(blocks[n], f"{where}.content.{n}") for n in run]
            opaque = [p for p in parts if p.get("type") == "opaque"]
            message: Message = {
                "role": "user",
                "content": [p for p in parts if p.get("type") != "opaque"],
            }
            if opaque:
                message[OPAQUE_KEY] = [p["block"] for p in opaque]
            out.append((message, Origin(items=(index,), blocks=tuple(run))))
            run.clear()

    for number, block in enumerate(blocks):
        if block["type"] == "tool_result":
            flush()
            out.append((_tool_result(block, f"{where}.content.{number}"), _block(index, number)))
        else:
            run.append(number)
    flush()
    return out


def _block(index: int, number: int) -> Origin:
    return Origin(items=(index,), blocks=(number,))


def _tool_result(block: Mapping[str, Any], at: str) -> Message:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidConversation(f"{at}.tool_use_id: field required", param=f"{at}.tool_use_id")
    content = block.get("content", "")
    message: Message = {"role": "tool", "tool_call_id": call_id}
    if isinstance(content, str):
        message["content"] = content
    elif isinstance(content, list):
        parts = [_user_part(part, f"{at}.content.{n}") for n, part in enumerate(content)]
        message["content"] = [p for p in parts if p.get("type") != "opaque"]
        opaque = [p["block"] for p in parts if p.get("type") == "opaque"]
        if opaque:
            message[OPAQUE_KEY] = opaque
    else:
        raise InvalidConversation(
            f"{at}.content: must be a string or an array of blocks", param=f"{at}.content"
        )
    if block.get("is_error") is True:
        message["is_error"] = True
    return message


def _user_part(block: Any, at: str) -> dict[str, Any]:
    if not isinstance(block, Mapping) or not isinstance(block.get("type"), str):
        raise InvalidConversation(f"{at}: a block must be an object with a type", param=at)
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": _text(block, at)}
    if kind == "image":
        return {"type": "image_url", "image_url": {"url": _source_url(block.get("source"))}}
    if kind == "document":
        source = block.get("source")
        if isinstance(source, Mapping) and source.get("type") == "text":
            return {"type": "text", "text": str(source.get("data", ""))}
        file: dict[str, Any] = {"file_data": _source_url(source)}
        if isinstance(block.get("title"), str):
            file["filename"] = block["title"]
        return {"type": "file", "file": file}
    return {"type": "opaque", "block": stripped(block)}


def _source_url(source: Any) -> str:
    """An image or document source as a URL: the data URL of base64 data, or the URL."""
    if not isinstance(source, Mapping):
        return ""
    if source.get("type") == "base64":
        return f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
    if source.get("type") == "url":
        return str(source.get("url", ""))
    return canonical_json(stripped(source))


def _text(block: Mapping[str, Any], at: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise InvalidConversation(f"{at}.text: field required", param=f"{at}.text")
    return text


def _chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Anthropic tool definitions as Chat Completions ones (what the engine counts); server
    tools (``web_search_...``) as they are."""
    if not isinstance(tools, list):
        return None
    out: list[dict[str, Any]] = []
    for tool in tools:
        if isinstance(tool, Mapping) and "input_schema" in tool:
            function: dict[str, Any] = {"name": tool.get("name", "")}
            if tool.get("description") is not None:
                function["description"] = tool["description"]
            function["parameters"] = tool["input_schema"]
            out.append({"type": "function", "function": function})
        elif isinstance(tool, Mapping):
            out.append(stripped(tool))
    return out
