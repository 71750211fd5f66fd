"""The structure of a Chat Completions conversation, without touching it.

Messages stay the caller's own dicts: nothing here copies, normalises or drops a field, so a
provider-specific key survives to the upstream request unchanged. This module only *reads* them:

- ``validate_messages`` checks the shape an upstream would reject, naming the bad field;
- ``group_units`` splits a conversation into indivisible units (an assistant message with
  ``tool_calls`` together with the tool messages answering it); a cut may only fall between units;
- ``message_digest`` and ``prefix_chain`` give each message a stable identity and each prefix a
  hash, so equal prefixes are recognised without comparing messages. The identity is that of
  ``identity_form(message)``: the forms a client may choose for the same content (a string or
  one text part; a ``cache_control`` marker or none) are one message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .errors import InvalidConversation

Message = dict[str, Any]
"""A Chat Completions message exactly as the caller sent it."""

ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
INSTRUCTION_ROLES = frozenset({"system", "developer"})

UnitKind = Literal["instruction", "user", "assistant", "tool_exchange", "tool"]


def canonical_json(value: Any) -> str:
    """Serialise ``value`` the same way every time: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_bytes(value: Any) -> bytes:
    """``canonical_json(value)`` as bytes, for hashing.

    UTF-8, except that a lone surrogate (a client may send ``"\\ud800"``, which JSON allows)
    is kept as its own three bytes (``surrogatepass``) instead of raising: such strings hash
    stably, and every other string hashes exactly as before.
    """
    return canonical_json(value).encode("utf-8", "surrogatepass")


_CACHE_MARKER = "cache_control"
"""A delivery hint (Anthropic's breakpoint, also sent on chat parts through gateways): never part
of what a message says."""


def identity_form(message: Mapping[str, Any]) -> Mapping[str, Any]:
    """``message`` as its identity sees it: the same content in the form clients vary.

    Clients resend a turn in another form than they first sent it: Claude Code sends its newest
    user turn as a list of text blocks carrying its cache breakpoint, and the same turn as a plain
    string on the next request. Both are the same message to the API, so they must be one
    message to the engine, or no checkpoint is ever reused. Here ``cache_control`` is dropped
    (on the message and on each content part) and a content list of exactly one text part
    (``{"type": "text", "text": ...}`` and nothing else) reads as its string. Several text parts
    stay a list: joining them would change what the model reads. Returns ``message`` itself
    when nothing differs (the common case, no copy); it never changes ``message``.
    """
    content = message.get("content")
    marked = _CACHE_MARKER in message
    if type(content) is not list:
        if not marked:
            return message
        return {k: v for k, v in message.items() if k != _CACHE_MARKER}
    parts: list[Any] = content
    if any(type(part) is dict and _CACHE_MARKER in part for part in content):
        parts = [
            {k: v for k, v in part.items() if k != _CACHE_MARKER}
            if type(part) is dict and _CACHE_MARKER in part
            else part
            for part in content
        ]
    form_content: list[Any] | str = parts
    if len(parts) == 1 and _is_plain_text(parts[0]):
        form_content = parts[0]["text"]
    if form_content is content and not marked:
        return message
    form = {k: v for k, v in message.items() if k != _CACHE_MARKER}
    form["content"] = form_content
    return form


def _is_plain_text(part: Any) -> bool:
    return (
        type(part) is dict
        and len(part) == 2
        and part.get("type") == "text"
        and type(part.get("text")) is str
    )


def message_digest(message: Mapping[str, Any]) -> str:
    """A stable digest of one message (SHA-256 of the canonical JSON of its ``identity_form``,
    hex, 32 characters)."""
    return digest_and_size(message)[0]


_LONG_STRING = 1 << 20
"""Strings longer than this are serialised a slice at a time when hashed."""


def digest_and_size(message: Mapping[str, Any]) -> tuple[str, int]:
    """``message_digest(message)`` and the byte length of the canonical JSON it hashes (that of
    ``identity_form(message)``).

    A message holding a very long string (megabytes of tool output) is serialised and hashed a
    slice at a time, with the same result: one C call over 16M characters would hold the GIL for
    about 80 ms, stalling every other thread of the process (the proxy's event loop included).
    """
    message = identity_form(message)
    if not _has_long_string(message):
        data = canonical_bytes(message)
        return hashlib.sha256(data).hexdigest()[:32], len(data)
    hasher = hashlib.sha256()
    size = 0
    for piece in _canonical_pieces(message):
        data = piece.encode("utf-8", "surrogatepass")
        hasher.update(data)
        size += len(data)
    return hasher.hexdigest()[:32], size


def _has_long_string(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if type(item) is str:
            if len(item) > _LONG_STRING:
                return True
        elif type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)
    return False


_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def _canonical_pieces(value: Any) -> Iterator[str]:
    """``canonical_json(value)`` in consecutive pieces, long strings cut into slices.

    JSON escapes each character on its own, so escaping slices gives the escaped whole.
    """
    if type(value) is str and len(value) > _LONG_STRING:
        yield '"'
        for start in range(0, len(value), _LONG_STRING):
            yield _encode_string(value[start : start + _LONG_STRING])[1:-1]
        yield '"'
    elif type(value) is dict and all(type(key) is str for key in value):
        yield "{"
        for number, key in enumerate(sorted(value)):
            yield ("," if number else "") + _encode_string(key) + ":"
            yield from _canonical_pieces(value[key])
        yield "}"
    elif type(value) is list:
        yield "["
        for number, item in enumerate(value):
            if number:
                yield ","
            yield from _canonical_pieces(item)
        yield "]"
    else:
        yield canonical_json(value)


def chain_step(previous: str, digest: str) -> str:
    """The prefix hash after appending a message with ``digest`` to a prefix hashed ``previous``."""
    return hashlib.sha256(f"{previous}:{digest}".encode()).hexdigest()[:32]


def prefix_chain(messages: Sequence[Mapping[str, Any]], *, seed: str = "") -> list[str]:
    """``chain[i]`` identifies ``messages[: i + 1]`` (and ``seed``, e.g. a namespace)."""
    chain: list[str] = []
    current = seed
    for message in messages:
        current = chain_step(current, message_digest(message))
        chain.append(current)
    return chain


def content_text(message: Mapping[str, Any]) -> str:
    """The text of a message's content: the string, or its text and refusal parts joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    pieces: list[str] = []
    if isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping):
                for key in ("text", "refusal"):
                    value = part.get(key)
                    if isinstance(value, str):
                        pieces.append(value)
    return "\n".join(pieces)


def message_text(message: Mapping[str, Any]) -> str:
    """All human-readable text in a message: content parts, refusals, tool-call arguments."""
    pieces: list[str] = [content_text(message)]
    refusal = message.get("refusal")
    if isinstance(refusal, str):
        pieces.append(refusal)
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            function = call.get("function")
            if isinstance(function, Mapping):
                name = function.get("name")
                arguments = function.get("arguments")
                pieces.append(f"{name}({arguments})" if arguments else f"{name}()")
    function_call = message.get("function_call")
    if isinstance(function_call, Mapping):
        pieces.append(f"{function_call.get('name')}({function_call.get('arguments', '')})")
    return "\n".join(p for p in pieces if p)


def tool_call_ids(message: Mapping[str, Any]) -> list[str]:
    """The ids of the tool calls an assistant message makes, in order."""
    ids: list[str] = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("id"), str):
            ids.append(call["id"])
    return ids


def tool_names(message: Mapping[str, Any]) -> list[str]:
    """The function names an assistant message calls, in order."""
    names: list[str] = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


@dataclass(frozen=True, slots=True)
class Unit:
    """Messages ``start`` to ``end`` (exclusive) that must be kept or dropped together."""

    start: int
    end: int
    kind: UnitKind

    @property
    def indices(self) -> range:
        """The message indices this unit covers."""
        return range(self.start, self.end)

    def __len__(self) -> int:
        return self.end - self.start


def group_units(messages: Sequence[Mapping[str, Any]]) -> list[Unit]:
    """Split a conversation into units; every message belongs to exactly one unit.

    An assistant message with ``tool_calls`` absorbs the tool messages that follow it and answer
    one of its ids (parallel calls included, in any order). A tool message answering nothing
    before it forms a unit alone (kind ``"tool"``); it is never attached to an unrelated call.
    """
    units: list[Unit] = []
    i = 0
    n = len(messages)
    while i < n:
        message = messages[i]
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            pending = set(tool_call_ids(message))
            j = i + 1
            while j < n and messages[j].get("role") == "tool" and pending:
                pending.discard(messages[j].get("tool_call_id"))
                j += 1
            units.append(Unit(i, j, "tool_exchange"))
            i = j
            continue
        if role == "assistant" and message.get("function_call"):
            j = i + 1
            if j < n and messages[j].get("role") == "function":
                j += 1
            units.append(Unit(i, j, "tool_exchange"))
            i = j
            continue
        if role in INSTRUCTION_ROLES:
            kind: UnitKind = "instruction"
        elif role == "user":
            kind = "user"
        elif role in ("tool", "function"):
            kind = "tool"
        else:
            kind = "assistant"
        units.append(Unit(i, i + 1, kind))
        i += 1
    return units


def validate_messages(messages: Any, *, field: str = "messages", start: int = 0) -> list[Message]:
    """Check ``messages`` has the shape any Chat Completions upstream requires.

    Returns the same list (not a copy). Raises ``InvalidConversation`` with ``param`` naming the
    first offending field: messages not a list, a message not an object or without a known role,
    content of the wrong type, malformed ``tool_calls``, a tool message without ``tool_call_id``.
    Each message is checked on its own, so ``start`` skips a prefix already known to be valid
    (error positions stay absolute).
    """
    if not isinstance(messages, list):
        raise InvalidConversation(f"'{field}' must be a list of message objects", param=field)
    if not messages:
        raise InvalidConversation(f"'{field}' must contain at least one message", param=field)
    for index in range(start, len(messages)):
        message = messages[index]
        where = f"{field}[{index}]"
        if not isinstance(message, dict):
            raise InvalidConversation(f"'{where}' must be an object", param=where)
        role = message.get("role")
        if not isinstance(role, str):
            raise InvalidConversation(f"'{where}.role' is required", param=f"{where}.role")
        if role not in ROLES:
            raise InvalidConversation(
                f"'{where}.role' must be one of {sorted(ROLES)}, got {role!r}",
                param=f"{where}.role",
            )
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise InvalidConversation(
                f"'{where}.content' must be a string, a list of content parts or null",
                param=f"{where}.content",
            )
        if isinstance(content, list):
            for p, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise InvalidConversation(
                        f"'{where}.content[{p}]' must be an object with a 'type'",
                        param=f"{where}.content[{p}]",
                    )
        if role == "tool" and not isinstance(message.get("tool_call_id"), str):
            raise InvalidConversation(
                f"'{where}.tool_call_id' is required for a tool message",
                param=f"{where}.tool_call_id",
            )
        calls = message.get("tool_calls")
        if calls is not None:
            _validate_tool_calls(calls, f"{where}.tool_calls")
    return messages


def _validate_tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise InvalidConversation(f"'{where}' must be a list", param=where)
    for c, call in enumerate(calls):
        at = f"{where}[{c}]"
        if not isinstance(call, dict):
            raise InvalidConversation(f"'{at}' must be an object", param=at)
        if not isinstance(call.get("id"), str):
            raise InvalidConversation(f"'{at}.id' is required", param=f"{at}.id")
        function = call.get("function")
        if call.get("type", "function") == "function" and not (
            isinstance(function, dict) and isinstance(function.get("name"), str)
        ):
            raise InvalidConversation(
                f"'{at}.function.name' is required", param=f"{at}.function.name"
            )


def leading_instructions(messages: Sequence[Mapping[str, Any]]) -> int:
    """How many messages at the start are system/developer instructions."""
    count = 0
    for message in messages:
        if message.get("role") not in INSTRUCTION_ROLES:
            break
        count += 1
    return count


def first_index(messages: Sequence[Mapping[str, Any]], role: str) -> int | None:
    """Index of the first message with ``role``, or None."""
    for index, message in enumerate(messages):
        if message.get("role") == role:
            return index
    return None


def last_index(messages: Sequence[Mapping[str, Any]], role: str) -> int | None:
    """Index of the last message with ``role``, or None."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == role:
            return index
    return None


def iter_texts(messages: Iterable[Mapping[str, Any]]) -> Iterable[str]:
    """``message_text`` of each message."""
    return (message_text(m) for m in messages)
