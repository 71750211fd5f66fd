"""The OpenAI Responses API codec (``POST /v1/responses``). Pure.

``decode`` turns ``instructions`` and ``input`` into chat messages; ``encode`` turns the engine's
choice back into ``{"input": [...]}``. Translations are in ``responses_items``. The rules:

- ``instructions`` (a string) is a leading system message (``system_items`` 1) that ``encode``
  never emits: the body's ``instructions`` field stays as the client sent it.
- A string ``input`` is one user message. ``ResponsesDecoded.items`` holds it as one message
  item (``{"type": "message", "role": "user", "content": <the string>}``); ``encode`` gives the
  string back when that item is all it emits, and the item in a list otherwise.
- Items the engine reads: a message item (any of the four roles) is a chat message of its role;
  ``function_call`` and ``custom_tool_call`` items are ``tool_calls`` entries on one assistant
  message, consecutive calls sharing it, and the assistant message item right before them
  too; ``function_call_output`` and ``custom_tool_call_output`` items are tool messages.
- Other calls answered by id (``local_shell_call``, ``shell_call``, ``computer_call``,
  ``apply_patch_call``, ``program``, an MCP approval request...) join the assistant message like
  a function call: the item under ``OPAQUE_KEY``, a ``tool_calls`` entry ``{"id": <call id>,
  "type": <item type>}`` standing for it. Their own outputs, when the call is earlier in
  ``input``, are tool messages ``{"role": "tool", "tool_call_id": ..., "content": None}`` with
  the item under ``OPAQUE_KEY``. So every call and its output are one unit of ``group_units``,
  whatever their types (a Codex ``local_shell_call`` is answered by a ``function_call_output``).
- Every other item (``reasoning``, ``web_search_call``, ``item_reference``, ``compaction``...)
  is opaque: carried unchanged under ``OPAQUE_KEY`` of the chat message of the next item that
  is an assistant message, a call or an output, so reasoning stays right before what it led to
  and nothing is separated from its turn. A run of them followed by a user, system or
  developer message, or by nothing, is an assistant message of its own: ``{"role":
  "assistant", "content": None, OPAQUE_KEY: [...]}``. Reasoning text never becomes content.
- A chat message is a function of its items' content (see ``responses_items``): equal items give
  equal messages; items the engine cannot read are hashed whole, ``encrypted_content`` included.
- ``Decoded.origins`` gives each chat message the indices of its items (the instruction
  message: none). ``encode`` emits a kept message's items (the client's objects, in order, none
  twice); a new user/system/developer/assistant message as a message item with string content
  (parts when its content is a list); a shortened tool message as its original's items with the
  output item replaced by a copy carrying the new ``output`` (without ``id``, which names the
  unshortened item). An output the engine cannot read is never shortened: emitted as it was.
- Validation: what the API refuses raises ``InvalidConversation`` with ``param`` such as
  ``input[3].call_id``, including a ``function_call_output`` whose call is not earlier in
  ``input``, unless the history lives at the provider (``history_at_provider``): then such an
  output is a tool message answering nothing before it (a unit of its own).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidConversation
from ..messages import Message
from . import OPAQUE_KEY, Decoded, Origin
from .responses_items import (
    CALLS,
    MESSAGE_ROLES,
    OUTPUTS,
    WIRE_TYPE_KEY,
    chat_content,
    chat_tools,
    extras,
    opaque_call_key,
    opaque_output_key,
    tool_call,
    tool_message,
    wire_content,
)


@dataclass(frozen=True, slots=True)
class ResponsesDecoded(Decoded):
    """A Responses request's conversation. Its ``items`` are the body's ``input`` list itself;
    for a string ``input``, one message item holding it."""

    text_input: str | None = None
    """The string ``input``, when it was one."""


def history_at_provider(body: Mapping[str, Any]) -> bool:
    """Whether part of the conversation lives at the provider, not in ``input``: the request
    names ``previous_response_id`` or ``conversation``, or ``input`` holds an
    ``item_reference``. Then an output may answer a call ``input`` does not hold."""
    if body.get("previous_response_id") or body.get("conversation") is not None:
        return True
    items = body.get("input")
    return isinstance(items, list) and any(
        isinstance(item, dict)
        and (
            item.get("type") == "item_reference"
            or ("type" not in item and "role" not in item and isinstance(item.get("id"), str))
        )
        for item in items
    )


class ResponsesCodec:
    """The ``Codec`` of the Responses API (see the module docstring)."""

    def decode(self, body: Mapping[str, Any]) -> ResponsesDecoded:
        """The conversation of a ``/v1/responses`` body (``InvalidConversation`` if refused)."""
        return _Decoder(body).decode()

    def encode(self, decoded: Decoded, messages: Sequence[Message]) -> dict[str, Any]:
        """``{"input": [...]}`` for ``messages`` (``decoded.messages`` kept, plus new ones)."""
        if not isinstance(decoded, ResponsesDecoded):
            raise TypeError("ResponsesCodec.encode needs the ResponsesDecoded its decode made")
        return _Encoder(decoded, messages).encode()


class _Decoder:
    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body = body
        self.messages: list[Message] = []
        self.indices: list[list[int]] = []
        self.calls: set[str] = set()
        """Ids of the calls seen so far (translated or not)."""
        self.pending: list[int] = []
        """Opaque items waiting for the message they attach to."""
        self.joinable: Message | None = None
        """The assistant message the next call joins, if it comes now."""
        self.items: list[Any] = []
        self.remote = history_at_provider(body)

    def decode(self) -> ResponsesDecoded:
        instructions = self.body.get("instructions")
        if instructions is not None:
            if not isinstance(instructions, str):
                raise InvalidConversation("'instructions' must be a string", param="instructions")
            self._add({"role": "system", "content": instructions}, [])
        system_items = len(self.messages)
        raw = self.body.get("input")
        text_input = raw if isinstance(raw, str) else None
        if text_input is not None:
            items: list[Any] = [{"type": "message", "role": "user", "content": text_input}]
        elif isinstance(raw, list) and raw:
            items = raw
        else:
            raise InvalidConversation(
                "'input' must be a string or a non-empty list of input items", param="input"
            )
        self.items = items
        for i, item in enumerate(items):
            self._item(i, item)
        if self.pending:
            self._add({"role": "assistant", "content": None}, [])
        origins = {
            id(m): Origin(tuple(ix)) for m, ix in zip(self.messages, self.indices, strict=True)
        }
        return ResponsesDecoded(
            messages=self.messages,
            tools=chat_tools(self.body.get("tools")),
            origins=origins,
            system_items=system_items,
            items=items,
            text_input=text_input,
        )

    def _item(self, i: int, item: Any) -> None:
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise InvalidConversation(f"'{where}' must be an object", param=where)
        kind = item.get("type")
        if kind == "message" or (kind is None and "role" in item):
            self._message(i, item, where)
        elif kind is None and isinstance(item.get("id"), str):
            self.pending.append(i)  # an item_reference, its type left out
        elif not isinstance(kind, str):
            raise InvalidConversation(f"'{where}.type' is required", param=f"{where}.type")
        elif kind in CALLS:
            self._call(i, tool_call(item, where))
        elif kind in OUTPUTS:
            message = tool_message(item, where)
            if message["tool_call_id"] not in self.calls and not self.remote:
                raise InvalidConversation(
                    f"'{where}.call_id' answers no function call earlier in 'input'",
                    param=f"{where}.call_id",
                )
            self._attach(message, i)
        elif (key := opaque_output_key(item)) is not None and key in self.calls:
            self._attach({"role": "tool", "tool_call_id": key, "content": None}, i, opaque=True)
        elif (key := opaque_call_key(item)) is not None:
            self._call(i, {"id": key, "type": kind}, opaque=True)
        else:
            self.pending.append(i)

    def _message(self, i: int, item: dict[str, Any], where: str) -> None:
        role = item.get("role")
        if role not in MESSAGE_ROLES:
            raise InvalidConversation(
                f"'{where}.role' must be one of {sorted(MESSAGE_ROLES)}, got {role!r}",
                param=f"{where}.role",
            )
        content = chat_content(item.get("content"), f"{where}.content")
        message = {"role": role, "content": content}
        message.update(extras(item, frozenset({*message, "type", "tool_calls", OPAQUE_KEY})))
        if role != "assistant" and self.pending:
            self._add({"role": "assistant", "content": None}, [])
        self._attach(message, i)
        self.joinable = message if role == "assistant" else None

    def _call(self, i: int, entry: dict[str, Any], *, opaque: bool = False) -> None:
        self.calls.add(entry["id"])
        message = self.joinable
        if message is None:
            message = {"role": "assistant", "content": None}
            self._attach(message, i, opaque=opaque)
        else:
            carried = [*self.pending, i] if opaque else self.pending
            if carried:
                message.setdefault(OPAQUE_KEY, []).extend(self.items_of(carried))
            self.indices[-1].extend([*self.pending, i])
            self.pending = []
        message.setdefault("tool_calls", []).append(entry)
        self.joinable = message

    def _attach(self, message: Message, i: int, *, opaque: bool = False) -> None:
        """Add ``message``, made from item ``i`` (under ``OPAQUE_KEY`` when ``opaque``) and the
        pending opaque items before it."""
        carried = [*self.pending, i] if opaque else self.pending
        if carried:
            message[OPAQUE_KEY] = self.items_of(carried)
        self._add(message, [*self.pending, i])

    def _add(self, message: Message, indices: list[int]) -> None:
        """Append ``message``; an assistant message made of pending items alone when it has
        no item of its own (``indices`` empty: the instruction message aside)."""
        if not indices and self.pending:
            message[OPAQUE_KEY] = self.items_of(self.pending)
            indices = self.pending
        self.pending = []
        self.joinable = None
        self.messages.append(message)
        self.indices.append(list(indices))

    def items_of(self, indices: list[int]) -> list[Any]:
        return [self.items[i] for i in indices]


class _Encoder:
    def __init__(self, decoded: ResponsesDecoded, messages: Sequence[Message]) -> None:
        self.decoded = decoded
        self.messages = messages
        self.items: list[Any] = []
        self.emitted: set[int] = set()
        """``id`` of every wire object emitted, so none is emitted twice."""

    def encode(self) -> dict[str, Any]:
        decoded = self.decoded
        instructions = {id(m) for m in decoded.messages[: decoded.system_items]}
        for message in self.messages:
            if id(message) in instructions:
                continue
            origin = decoded.origins.get(id(message))
            if origin is not None:
                self._emit(decoded.items[i] for i in origin.items)
            elif message.get("role") == "tool":
                self._shortened(message)
            else:
                self._new(message)
        if decoded.text_input is not None and [id(i) for i in self.items] == [id(decoded.items[0])]:
            return {"input": decoded.text_input}
        return {"input": self.items}

    def _emit(self, items: Any) -> None:
        for item in items:
            if id(item) not in self.emitted:
                self.emitted.add(id(item))
                self.items.append(item)

    def _shortened(self, message: Message) -> None:
        """A tool message the engine rewrote: its original's items, the output replaced."""
        original = self._original(message.get("tool_call_id"))
        if original is None:
            output = wire_content(message.get("content"))
            call_id = message.get("tool_call_id")
            self._emit([{"type": "function_call_output", "call_id": call_id, "output": output}])
            return
        *before, last = (self.decoded.items[i] for i in self.decoded.origins[id(original)].items)
        self._emit(before)
        if original.get("content") is None and OPAQUE_KEY in original:
            self._emit([last])  # an output the engine cannot read: never shortened
            return
        output = wire_content(message.get("content"))
        self._emit([{k: output if k == "output" else v for k, v in last.items() if k != "id"}])

    def _original(self, call_id: Any) -> Message | None:
        """The decoded tool message answering ``call_id`` a rewritten one stands for: the
        first not among the messages being encoded, else the first."""
        candidates = [
            m
            for m in self.decoded.messages
            if m.get("role") == "tool" and m.get("tool_call_id") == call_id
        ]
        kept = {id(m) for m in self.messages}
        return next((m for m in candidates if id(m) not in kept), next(iter(candidates), None))

    def _new(self, message: Message) -> None:
        """A message the engine wrote (a summary): its opaque items, a message item with its
        content (when not None), then its calls."""
        self._emit(message.get(OPAQUE_KEY) or ())
        role = message.get("role")
        if role not in MESSAGE_ROLES:
            raise ValueError(f"cannot encode a new {role!r} message as a Responses item")
        content = message.get("content")
        if content is not None:
            assistant = role == "assistant"
            content = wire_content(content, assistant=assistant)
            self._emit([{"type": "message", "role": role, "content": content}])
        for call in message.get("tool_calls") or ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                custom = call.get(WIRE_TYPE_KEY) == "custom_tool_call"
                item: dict[str, Any] = {"type": "custom_tool_call" if custom else "function_call"}
                item.update(call_id=call.get("id"), name=function.get("name"))
                item["input" if custom else "arguments"] = function.get("arguments")
                self._emit([item])
