"""What the test upstream's Messages API rejects, with Anthropic's wording where it is known.

:func:`invalid_messages_request` checks a request body's shape (``model``, ``max_tokens``,
``messages`` and their content blocks, ``system``, ``tools``, ``tool_choice``, ``cache_control``),
then Anthropic's pairing rule for tool use, then the cap of 4 ``cache_control`` blocks.
Consecutive messages of the same role are allowed: Anthropic merges them into one turn, and the
pairing rule applies to turns.

A ``system`` message inside ``messages`` (a mid-conversation system message, which Claude Code
sends with its default model) is accepted where the API accepts one: right after a user turn
(so never first), with a string or text blocks as its content. It belongs to no turn for the
pairing rule. The API takes it without a beta header on the models that support it, so the test
upstream does not ask for one either: it must never be stricter than the real thing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .messages_cache import cache_control_count

__all__ = ["MAX_CACHE_BREAKPOINTS", "invalid_messages_request"]

MAX_CACHE_BREAKPOINTS = 4
"""Anthropic's cap on blocks with ``cache_control`` per request (tools, system and messages)."""

_BLOCK_TYPES = ("text", "image", "document", "tool_use", "tool_result", "thinking")
_EXPECTED_TAGS = ", ".join(f"'{t}'" for t in (*_BLOCK_TYPES, "redacted_thinking"))
_ASSISTANT_ONLY = ("tool_use", "thinking", "redacted_thinking")
_STRING_FIELDS = {
    "text": ("text",),
    "tool_use": ("id", "name"),
    "tool_result": ("tool_use_id",),
    "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",),
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _cache_control_error(path: str, value: Any) -> str | None:
    """Why the ``cache_control`` at ``path`` is malformed (None: it is absent or well-formed)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        return f"{path}: Input should be a valid dictionary"
    if value.get("type") != "ephemeral":
        return f"{path}.type: Input should be 'ephemeral'"
    if value.get("ttl") not in (None, "5m", "1h"):
        return f"{path}.ttl: Input should be '5m' or '1h'"
    return None


def _block_error(path: str, block: Any, *, role: str | None, nested: bool = False) -> str | None:
    """Why one content block (at ``path``) is malformed, or None."""
    if not isinstance(block, Mapping):
        return f"{path}: Input should be a valid dictionary"
    kind = block.get("type")
    if not isinstance(kind, str):
        return f"{path}: Unable to extract tag using discriminator 'type'"
    allowed = ("text", "image", "document") if nested else (*_BLOCK_TYPES, "redacted_thinking")
    if kind not in allowed:
        tags = ", ".join(f"'{t}'" for t in allowed) if nested else _EXPECTED_TAGS
        return (
            f"{path}: Input tag '{kind}' found using 'type' does not match any of the expected "
            f"tags: {tags}"
        )
    for field in _STRING_FIELDS.get(kind, ()):
        if field not in block:
            return f"{path}.{kind}.{field}: Field required"
        if not isinstance(block[field], str):
            return f"{path}.{kind}.{field}: Input should be a valid string"
    if kind == "text" and not block["text"]:
        return f"{path}.text.text: text content blocks must be non-empty"
    if kind in ("image", "document") and not isinstance(block.get("source"), Mapping):
        return f"{path}.{kind}.source: Field required"
    if kind == "tool_use" and not isinstance(block.get("input"), Mapping):
        return f"{path}.tool_use.input: Input should be a valid dictionary"
    if kind == "tool_result":
        content = block.get("content")
        if content is not None and not isinstance(content, (str, list)):
            return f"{path}.tool_result.content: Input should be a valid list"
        for index, item in enumerate(content if isinstance(content, list) else ()):
            error = _block_error(
                f"{path}.tool_result.content.{index}", item, role=None, nested=True
            )
            if error is not None:
                return error
        if "is_error" in block and not isinstance(block["is_error"], bool):
            return f"{path}.tool_result.is_error: Input should be a valid boolean"
    if kind in ("thinking", "redacted_thinking") and "cache_control" in block:
        return f"{path}.{kind}.cache_control: Extra inputs are not permitted"
    if role == "user" and kind in _ASSISTANT_ONLY:
        return f"{path}: `{kind}` blocks can only be in `assistant` messages"
    if role == "assistant" and kind == "tool_result":
        return f"{path}: `tool_result` blocks can only be in `user` messages"
    return _cache_control_error(f"{path}.{kind}.cache_control", block.get("cache_control"))


def _message_error(
    index: int, message: Any, *, final: bool, previous: Mapping[str, Any] | None
) -> str | None:
    path = f"messages.{index}"
    if not isinstance(message, Mapping):
        return f"{path}: Input should be a valid dictionary"
    role = message.get("role")
    if "role" not in message:
        return f"{path}.role: Field required"
    if role == "system":
        return _mid_system_error(path, message, previous)
    if role not in ("user", "assistant"):
        return f"{path}.role: Input should be 'user' or 'assistant'"
    if "content" not in message:
        return f"{path}.content: Field required"
    content = message["content"]
    if not isinstance(content, (str, list)):
        return f"{path}.content: Input should be a valid list"
    if not content and not (final and role == "assistant"):
        return (
            f"{path}: all messages must have non-empty content except for the optional final "
            "assistant message"
        )
    for number, block in enumerate(content if isinstance(content, list) else ()):
        error = _block_error(f"{path}.content.{number}", block, role=str(role))
        if error is not None:
            return error
    return None


def _mid_system_error(
    path: str, message: Mapping[str, Any], previous: Mapping[str, Any] | None
) -> str | None:
    """Why a ``system`` message inside ``messages`` is refused (None: it is well placed)."""
    if previous is None or previous.get("role") not in ("user", "system"):
        return f"{path}: a system message must immediately follow a user turn"
    content = message.get("content")
    if isinstance(content, str):
        return None if content else f"{path}.content: must not be empty"
    if not isinstance(content, list) or not content:
        return f"{path}.content: Input should be a non-empty list of text blocks"
    return _text_blocks_error(f"{path}.content", content)


def _system_error(system: Any) -> str | None:
    if system is None or isinstance(system, str):
        return None
    if not isinstance(system, list):
        return "system: Input should be a valid list"
    return _text_blocks_error("system", system)


def _text_blocks_error(path: str, blocks: Sequence[Any]) -> str | None:
    """Why a list of system text blocks (``system``, or a mid-conversation system message's
    content) is refused (None: every block is a well-formed text block)."""
    for index, block in enumerate(blocks):
        at = f"{path}.{index}"
        if not isinstance(block, Mapping) or block.get("type") != "text":
            return f"{at}.type: Input should be 'text'"
        if not isinstance(block.get("text"), str):
            return f"{at}.text: Input should be a valid string"
        error = _cache_control_error(f"{at}.cache_control", block.get("cache_control"))
        if error is not None:
            return error
    return None


def _tools_error(tools: Any, tool_choice: Any) -> str | None:
    if tools is not None:
        if not isinstance(tools, list):
            return "tools: Input should be a valid list"
        names: set[str] = set()
        for index, tool in enumerate(tools):
            if not isinstance(tool, Mapping):
                return f"tools.{index}: Input should be a valid dictionary"
            if not isinstance(tool.get("name"), str) or not tool["name"]:
                return f"tools.{index}.custom.name: Field required"
            custom = tool.get("type") in (None, "custom")
            if custom and not isinstance(tool.get("input_schema"), Mapping):
                return f"tools.{index}.custom.input_schema: Field required"
            if tool["name"] in names:
                return "tools: Tool names must be unique."
            names.add(tool["name"])
            error = _cache_control_error(f"tools.{index}.cache_control", tool.get("cache_control"))
            if error is not None:
                return error
    if tool_choice is None:
        return None
    if not isinstance(tool_choice, Mapping):
        return "tool_choice: Input should be a valid dictionary"
    kind = tool_choice.get("type")
    if kind not in ("auto", "any", "tool", "none"):
        return (
            f"tool_choice: Input tag '{kind}' found using 'type' does not match any of the "
            "expected tags: 'auto', 'any', 'tool', 'none'"
        )
    if kind == "tool" and not isinstance(tool_choice.get("name"), str):
        return "tool_choice.tool.name: Field required"
    return None


def _ids(message: Mapping[str, Any], kind: str, key: str) -> list[tuple[int, str]]:
    """(block index, id) of each ``kind`` block of ``message``."""
    content = message.get("content")
    return [
        (number, str(block[key]))
        for number, block in enumerate(content if isinstance(content, list) else ())
        if block.get("type") == kind
    ]


def _pairing_error(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """Anthropic's pairing rule, on turns (runs of same-role messages): every ``tool_use`` of an
    assistant turn has its ``tool_result`` in the next (user) turn, and every ``tool_result``
    answers a ``tool_use`` of the turn just before."""
    turns: list[list[int]] = []
    for index, message in enumerate(messages):
        if message["role"] == "system":
            continue
        if turns and messages[turns[-1][-1]]["role"] == message["role"]:
            turns[-1].append(index)
        else:
            turns.append([index])
    for number, turn in enumerate(turns):
        if messages[turn[0]]["role"] == "user":
            before = turns[number - 1] if number else []
            offered = {tid for i in before for _, tid in _ids(messages[i], "tool_use", "id")}
            for index in turn:
                for block, tid in _ids(messages[index], "tool_result", "tool_use_id"):
                    if tid not in offered:
                        return (
                            f"messages.{index}.content.{block}: unexpected `tool_use_id` found in "
                            f"`tool_result` blocks: {tid}. Each `tool_result` block must have a "
                            "corresponding `tool_use` block in the previous message."
                        )
            continue
        after = turns[number + 1] if number + 1 < len(turns) else []
        answered = {
            tid for i in after for _, tid in _ids(messages[i], "tool_result", "tool_use_id")
        }
        for index in turn:
            missing = [
                tid for _, tid in _ids(messages[index], "tool_use", "id") if tid not in answered
            ]
            if missing:
                return (
                    f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
    return None


def invalid_messages_request(body: Any, *, count_tokens: bool = False) -> str | None:
    """The ``invalid_request_error`` message a Messages API request body gets, or None if it is
    well-formed (``count_tokens``: for ``/v1/messages/count_tokens``, no ``max_tokens``)."""
    if not isinstance(body, Mapping):
        return "The request body must be a JSON object."
    if "model" not in body:
        return "model: Field required"
    if not isinstance(body["model"], str) or not body["model"]:
        return "model: Input should be a valid string"
    if not count_tokens:
        if "max_tokens" not in body:
            return "max_tokens: Field required"
        if not _is_int(body["max_tokens"]):
            return "max_tokens: Input should be a valid integer"
        if body["max_tokens"] < 1:
            return "max_tokens: Input should be greater than or equal to 1"
        if "stream" in body and not isinstance(body["stream"], bool):
            return "stream: Input should be a valid boolean"
    if "messages" not in body:
        return "messages: Field required"
    messages = body["messages"]
    if not isinstance(messages, list):
        return "messages: Input should be a valid list"
    if not messages:
        return "messages: at least one message is required"
    for index, message in enumerate(messages):
        previous = messages[index - 1] if index else None
        error = _message_error(
            index,
            message,
            final=index == len(messages) - 1,
            previous=previous if isinstance(previous, Mapping) else None,
        )
        if error is not None:
            return error
    error = (
        _system_error(body.get("system"))
        or _tools_error(body.get("tools"), body.get("tool_choice"))
        or _cache_control_error("cache_control", body.get("cache_control"))
        or _pairing_error(messages)
    )
    if error is not None:
        return error
    found = cache_control_count(body)
    if found > MAX_CACHE_BREAKPOINTS:
        return (
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {found}."
        )
    return None
