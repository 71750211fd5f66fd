"""Encoding for the Gemini codec: the engine's chat messages back into ``contents``. Pure.

Consecutive chat messages from the same content become that content again: the client's own
object when all its parts are there, else the content with the kept parts (the client's part
objects). A message the engine wrote is translated: a summary (or any other new message but an
assistant one) becomes a ``user`` content of one text part; a shortened tool result replaces its
part in its own content, the part's ``functionResponse.response`` becoming ``{"output": <the
shortened text>}`` (``{"error": ...}`` for an error result); a new assistant message becomes a
``model`` content of text and ``functionCall`` parts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..bounded_json import loads_bounded
from ..messages import Message, content_text
from . import Decoded
from .regroup import regroup


def field_of(value: Mapping[str, Any], *names: str) -> Any:
    """The first of ``names`` that ``value`` holds (not None), or None: the REST API reads a
    field in camelCase and in snake_case alike."""
    for name in names:
        found = value.get(name)
        if found is not None:
            return found
    return None


def encode_contents(decoded: Decoded, messages: Sequence[Message]) -> list[Any]:
    """The ``contents`` field for the engine's ``messages`` chosen from ``decoded``."""
    return regroup(
        decoded, messages, blocks_key="parts", shortened=_shortened, new_item=_new_content
    )


def _shortened(original: Mapping[str, Any], message: Message) -> dict[str, Any]:
    """The client's ``functionResponse`` part with the engine's shortened result."""
    key = "functionResponse" if "functionResponse" in original else "function_response"
    response = dict(original[key])
    outcome = "error" if message.get("is_error") else "output"
    response["response"] = {outcome: content_text(message)}
    response.pop("parts", None)  # the shortened text stands for the media as well
    return {**original, key: response}


def _new_content(decoded: Decoded, message: Message) -> dict[str, Any]:
    """A message the engine wrote (a summary; a tool result without its content), in wire form."""
    role = message.get("role")
    if role == "tool":
        response = {
            "name": _call_name(decoded, message.get("tool_call_id")),
            "response": {"output": content_text(message)},
        }
        return {"role": "user", "parts": [{"functionResponse": response}]}
    parts: list[dict[str, Any]] = []
    text = content_text(message)
    if text:
        parts.append({"text": text})
    for call in (message.get("tool_calls") or ()) if role == "assistant" else ():
        function = call.get("function", {})
        try:
            arguments = loads_bounded(function.get("arguments") or "{}")
        except ValueError:  # not JSON, or nested past the body's limits
            arguments = {"arguments": function.get("arguments")}
        parts.append({"functionCall": {"name": function.get("name"), "args": arguments}})
    if not parts:
        parts.append({"text": ""})
    return {"role": "model" if role == "assistant" else "user", "parts": parts}


def _call_name(decoded: Decoded, call_id: Any) -> str:
    """The function name of the call ``call_id`` in ``decoded`` (empty when unknown)."""
    for message in decoded.messages:
        for call in message.get("tool_calls") or ():
            if call.get("id") == call_id:
                return str(call.get("function", {}).get("name", ""))
    return ""
