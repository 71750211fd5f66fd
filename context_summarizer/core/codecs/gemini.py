"""The Google Gemini API codec (``generateContent``): ``systemInstruction`` + ``contents`` to and
from chat messages. Pure.

Decoding, content by content (``Origin.items`` is the content's index in ``contents``):

- ``systemInstruction`` (``{"parts": [{"text": ...}]}``, its ``role`` ignored, or a string)
  becomes one leading system message (``system_items`` 1); ``encode`` never touches it.
- A ``model`` content becomes one assistant chat message: its text parts the content, its
  ``functionCall`` parts ``tool_calls`` (the call's ``id`` when it has one, else
  ``gemini:<content>:<part>``; arguments: the ``args``' canonical JSON), its images and files
  image and file parts. Opaque, under ``OPAQUE_KEY``: every ``thought: true`` part (a thought
  summary never becomes content), ``executableCode`` and ``codeExecutionResult`` parts and any
  part of a kind this codec does not read, each whole; and the ``thoughtSignature`` of a text or
  ``functionCall`` part (Gemini 2.5 and 3 sign the first call of a turn, or its last text), as
  ``{"thoughtSignature": ...}``. So a changed signature is a different message, and a kept turn
  goes back as the client's own object, signatures and all, byte for byte.
- A ``user`` content (or one without a role; ``function``, the old role of function responses,
  reads as ``user``) is split in wire order like an Anthropic user turn: each
  ``functionResponse`` part becomes a tool message (``Origin.blocks`` = its part), each run of
  other parts one user message. A response pairs with a call of the latest ``model`` content
  not yet answered: the one with its ``id``, else the first with its ``name``. Its content is
  ``response["output"]`` when that is all the response holds (``response["error"]``: the same,
  with ``is_error``), else the response's canonical JSON.
- ``inlineData`` and ``fileData`` parts become ``image_url`` parts (``image/*``) or ``file``
  parts (a data URL, or the file's URI), so they are counted as images and files.

Field names are read in both of the REST API's spellings (``functionCall``, ``function_call``).
``tools``' ``functionDeclarations`` become chat tool definitions for counting; other tools
(``googleSearch``, ``codeExecution``...) are not counted, and stay in the body as sent.

Encoding (``gemini_encode``): the client's own content objects for what the engine kept (a user
content keeping only some parts: the content with those parts); a summary is a ``user`` content
of one text part; a shortened tool result replaces its part's ``response`` with ``{"output":
<the shortened text>}``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidConversation
from ..messages import Message, canonical_json, validate_messages
from . import OPAQUE_KEY, Decoded, Origin
from .gemini_encode import encode_contents, field_of

SIGNATURE = "thoughtSignature"
"""The key of a part's thought signature (camelCase; ``thought_signature`` is read too)."""
_OPAQUE_KINDS = (
    ("executableCode", "executable_code"),
    ("codeExecutionResult", "code_execution_result"),
)


class GeminiCodec:
    """``Codec`` for ``POST /v1beta/models/{model}:generateContent`` (and its stream) bodies."""

    def decode(self, body: Mapping[str, Any]) -> Decoded:
        """The conversation of a generateContent request; ``InvalidConversation`` naming the
        field (``contents[3].parts[1]``) for one the API would refuse."""
        wire = body.get("contents")
        if not isinstance(wire, list) or not wire:
            raise InvalidConversation(
                "contents: required, a non-empty array of contents", param="contents"
            )
        decoder = _Decoder()
        system = field_of(body, "systemInstruction", "system_instruction")
        if system is not None:
            decoder.add(_system_message(system), Origin(items=()))
        system_items = len(decoder.messages)
        for index, item in enumerate(wire):
            decoder.content(item, index)
        validate_messages(decoder.messages)
        return Decoded(
            messages=decoder.messages,
            tools=chat_tools(body.get("tools")),
            origins=decoder.origins,
            items=wire,
            system_items=system_items,
        )

    def encode(self, decoded: Decoded, messages: Sequence[Message]) -> dict[str, Any]:
        """``{"contents": [...]}`` for the engine's ``messages`` (the leading system message
        stands for ``systemInstruction``, which stays as the client sent it)."""
        return {"contents": encode_contents(decoded, messages)}


# -- decoding -------------------------------------------------------------------------------------


def _system_message(system: Any) -> Message:
    if isinstance(system, str):
        return {"role": "system", "content": system}
    parts = system.get("parts") if isinstance(system, Mapping) else None
    if not isinstance(parts, list):
        raise InvalidConversation(
            "systemInstruction: must be a content with parts, or a string",
            param="systemInstruction",
        )
    texts: list[dict[str, Any]] = []
    for number, part in enumerate(parts):
        at = f"systemInstruction.parts[{number}]"
        if not isinstance(part, Mapping) or not isinstance(part.get("text"), str):
            raise InvalidConversation(f"{at}: a system instruction holds text parts", param=at)
        texts.append({"type": "text", "text": part["text"]})
    return {"role": "system", "content": texts}


@dataclass(slots=True)
class _Call:
    """A function call of the latest model content, waiting for its response."""

    id: str
    name: str
    wire_id: str | None


@dataclass(slots=True)
class _Decoder:
    messages: list[Message] = field(default_factory=list)
    origins: dict[int, Origin] = field(default_factory=dict)
    pending: list[_Call] = field(default_factory=list)
    """The calls of the latest model content not answered yet."""

    def add(self, message: Message, origin: Origin) -> None:
        self.messages.append(message)
        self.origins[id(message)] = origin

    def content(self, item: Any, index: int) -> None:
        where = f"contents[{index}]"
        if not isinstance(item, Mapping):
            raise InvalidConversation(f"{where}: must be an object", param=where)
        role = item.get("role") or "user"
        if role not in ("user", "model", "function"):
            raise InvalidConversation(
                f"{where}.role: must be 'user' or 'model', got {role!r}", param=f"{where}.role"
            )
        parts = item.get("parts")
        if not isinstance(parts, list) or not parts:
            raise InvalidConversation(
                f"{where}.parts: required, a non-empty array of parts", param=f"{where}.parts"
            )
        for number, part in enumerate(parts):
            if not isinstance(part, Mapping):
                at = f"{where}.parts[{number}]"
                raise InvalidConversation(f"{at}: a part must be an object", param=at)
        if role == "model":
            self.add(self._model(parts, index), Origin(items=(index,)))
        else:
            self._user(parts, index)

    def _model(self, parts: Sequence[Mapping[str, Any]], index: int) -> Message:
        content: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        opaque: list[dict[str, Any]] = []
        self.pending = []
        for number, part in enumerate(parts):
            at = f"contents[{index}].parts[{number}]"
            call = field_of(part, "functionCall", "function_call")
            if part.get("thought") is True or _opaque_kind(part):
                opaque.append(dict(part))
                continue
            if field_of(part, "functionResponse", "function_response") is not None:
                raise InvalidConversation(
                    f"{at}: a functionResponse belongs in a user content", param=at
                )
            if call is not None:
                calls.append(self._call(call, f"gemini:{index}:{number}", at))
            else:
                readable = _media_part(part, at)
                if readable is None:
                    opaque.append(dict(part))
                    continue
                content.append(readable)
            signature = field_of(part, SIGNATURE, "thought_signature")
            if signature is not None:
                opaque.append({SIGNATURE: signature})
        message: Message = {"role": "assistant", "content": content or None}
        if calls:
            message["tool_calls"] = calls
        if opaque:
            message[OPAQUE_KEY] = opaque
        return message

    def _call(self, call: Any, default_id: str, at: str) -> dict[str, Any]:
        where = f"{at}.functionCall"
        if not isinstance(call, Mapping):
            raise InvalidConversation(f"{where}: must be an object", param=where)
        name = call.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidConversation(f"{where}.name: required", param=f"{where}.name")
        arguments = call.get("args", {})
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, Mapping):
            raise InvalidConversation(f"{where}.args: must be an object", param=f"{where}.args")
        wire_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else None
        call_id = wire_id or default_id
        self.pending.append(_Call(call_id, name, wire_id))
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": canonical_json(arguments)},
        }

    def _user(self, parts: Sequence[Mapping[str, Any]], index: int) -> None:
        run: list[int] = []

        def flush() -> None:
            if not run:
                return
            content: list[dict[str, Any]] = []
            opaque: list[dict[str, Any]] = []
            for number in run:
                part = parts[number]
                at = f"contents[{index}].parts[{number}]"
                if field_of(part, "functionCall", "function_call") is not None:
                    raise InvalidConversation(
                        f"{at}: a functionCall belongs in a model content", param=at
                    )
                readable = None if part.get("thought") is True else _media_part(part, at)
                if readable is None:
                    opaque.append(dict(part))
                else:
                    content.append(readable)
            message: Message = {"role": "user", "content": content}
            if opaque:
                message[OPAQUE_KEY] = opaque
            self.add(message, Origin(items=(index,), blocks=tuple(run)))
            run.clear()

        for number, part in enumerate(parts):
            response = field_of(part, "functionResponse", "function_response")
            if response is None:
                run.append(number)
                continue
            flush()
            at = f"contents[{index}].parts[{number}]"
            self.add(self._response(response, at), Origin(items=(index,), blocks=(number,)))
        flush()

    def _response(self, response: Any, at: str) -> Message:
        where = f"{at}.functionResponse"
        if not isinstance(response, Mapping):
            raise InvalidConversation(f"{where}: must be an object", param=where)
        name = response.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidConversation(f"{where}.name: required", param=f"{where}.name")
        wire_id = response.get("id")
        call = next((c for c in self.pending if wire_id and c.wire_id == wire_id), None)
        if call is None:
            call = next((c for c in self.pending if c.name == name), None)
        if call is None:
            raise InvalidConversation(
                f"{where}: answers no function call {name!r} of the model content before it",
                param=at,
            )
        self.pending.remove(call)
        message: Message = {"role": "tool", "tool_call_id": call.id}
        result = response.get("response", {})
        if isinstance(result, Mapping) and len(result) == 1 and "output" in result:
            text = result["output"]
        elif isinstance(result, Mapping) and len(result) == 1 and "error" in result:
            text = result["error"]
            message["is_error"] = True
        else:
            text = None
        if not isinstance(text, str):
            text = canonical_json(result)
            message.pop("is_error", None)
        media = response.get("parts")
        extra = [
            readable
            for n, part in enumerate(media if isinstance(media, list) else ())
            if isinstance(part, Mapping)
            and (readable := _media_part(part, f"{where}.parts[{n}]")) is not None
        ]
        message["content"] = [{"type": "text", "text": text}, *extra] if extra else text
        return message


def _opaque_kind(part: Mapping[str, Any]) -> bool:
    return any(field_of(part, *names) is not None for names in _OPAQUE_KINDS)


def _media_part(part: Mapping[str, Any], at: str) -> dict[str, Any] | None:
    """A text, ``inlineData`` or ``fileData`` part as a chat content part; None for a part of
    another kind (carried opaque)."""
    if "text" in part:
        if not isinstance(part["text"], str):
            raise InvalidConversation(f"{at}.text: must be a string", param=f"{at}.text")
        return {"type": "text", "text": part["text"]}
    inline = field_of(part, "inlineData", "inline_data")
    if isinstance(inline, Mapping):
        mime = str(field_of(inline, "mimeType", "mime_type") or "")
        return _media(mime, f"data:{mime};base64,{inline.get('data', '')}")
    stored = field_of(part, "fileData", "file_data")
    if isinstance(stored, Mapping):
        mime = str(field_of(stored, "mimeType", "mime_type") or "")
        return _media(mime, str(field_of(stored, "fileUri", "file_uri") or ""))
    return None


def _media(mime: str, url: str) -> dict[str, Any]:
    if mime.startswith("image/"):
        return {"type": "image_url", "image_url": {"url": url}}
    return {"type": "file", "file": {"file_data": url}}


def chat_tools(tools: Any) -> list[dict[str, Any]] | None:
    """The ``functionDeclarations`` of Gemini ``tools`` as Chat Completions tool definitions
    (what the engine counts); None when there are none."""
    if not isinstance(tools, list):
        return None
    out: list[dict[str, Any]] = []
    for tool in tools:
        declarations = (
            field_of(tool, "functionDeclarations", "function_declarations")
            if isinstance(tool, Mapping)
            else None
        )
        for declaration in declarations if isinstance(declarations, list) else ():
            if not isinstance(declaration, Mapping):
                continue
            function: dict[str, Any] = {"name": declaration.get("name", "")}
            if declaration.get("description") is not None:
                function["description"] = declaration["description"]
            schema = field_of(
                declaration,
                "parameters",
                "parametersJsonSchema",
                "parameters_json_schema",
            )
            if schema is not None:
                function["parameters"] = schema
            out.append({"type": "function", "function": function})
    return out or None
