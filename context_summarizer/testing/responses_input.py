"""A Responses API request, checked the way OpenAI checks it, and its input read as items.

:func:`invalid_request` is the error body a malformed ``POST /v1/responses`` (or
``/v1/responses/compact``) gets, or None; :func:`input_items` reads its ``input`` (a string is
one user message) and :func:`item_type` names an item's type (a message may leave it out).
:func:`invalid_conversation` checks the whole conversation the model is to see (the stored
history ``previous_response_id`` names, then the new input): every tool output answers an
earlier call, every function call has its output, and every ``encrypted_content`` is one this
server issued. :func:`seal` and :func:`unseal` make and read that opaque ``encrypted_content``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any

from .faults import error_body

__all__ = [
    "ITEM_TYPES",
    "MIN_OUTPUT_TOKENS",
    "input_items",
    "invalid_conversation",
    "invalid_request",
    "item_type",
    "seal",
    "unseal",
]

ITEM_TYPES = (
    "message",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "web_search_call",
    "function_call",
    "function_call_output",
    "tool_search_call",
    "tool_search_output",
    "additional_tools",
    "configuration_update",
    "reasoning",
    "compaction",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "custom_tool_call_output",
    "custom_tool_call",
    "compaction_trigger",
    "item_reference",
    "program",
    "program_output",
)
"""Every input item type OpenAI accepts; those past the message, function and custom tool calls,
reasoning and compaction are accepted here, counted, and not shown to the responder."""

MIN_OUTPUT_TOKENS = 16
"""OpenAI's smallest ``max_output_tokens``."""

_ROLES = ("assistant", "system", "developer", "user")
_INPUT_PARTS = ("input_text", "input_image", "input_file")
_OUTPUT_PARTS = ("output_text", "refusal")
_TOOL_CHOICES = ("none", "auto", "required")
# Required string fields of the items whose contents the server reads.
_REQUIRED = {
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id",),
    "custom_tool_call": ("call_id", "name", "input"),
    "custom_tool_call_output": ("call_id",),
    "compaction": ("encrypted_content",),
    "item_reference": ("id",),
}
_SEAL_PREFIX = "gAAAAAB"
_ISSUER = "summarizer-test-upstream"


# --- the request --------------------------------------------------------------------------------


def invalid_request(body: Any, *, compact: bool = False) -> dict[str, Any] | None:
    """The error body a malformed request gets (None for a well-formed one).

    ``compact``: a ``/v1/responses/compact`` request, whose ``input`` may be left out.
    """
    if not isinstance(body, dict):
        return error_body("The request body must be a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        return _missing("model")
    if "input" not in body and not compact:
        return _missing("input")
    value = body.get("input")
    if isinstance(value, list):
        for index, item in enumerate(value):
            invalid = _invalid_item(item, f"input[{index}]")
            if invalid is not None:
                return invalid
    elif not isinstance(value, str) and value is not None:
        return _wrong_type("input", "one of a string or array of input items", value)
    for name in ("instructions", "previous_response_id"):
        if body.get(name) is not None and not isinstance(body[name], str):
            return _wrong_type(name, "a string", body[name])
    for name in ("stream", "store", "parallel_tool_calls"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            return _wrong_type(name, "a boolean", body[name])
    if body.get("include") is not None and not _strings(body["include"]):
        return _wrong_type("include", "an array of strings", body["include"])
    return _invalid_tools(body) or _invalid_limit(body.get("max_output_tokens"))


def _invalid_tools(body: Mapping[str, Any]) -> dict[str, Any] | None:
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return _wrong_type("tools", "an array of tools", tools)
    for index, tool in enumerate(tools or ()):
        where = f"tools[{index}]"
        if not isinstance(tool, dict):
            return _wrong_type(where, "an object", tool)
        if not isinstance(tool.get("type"), str):
            return _missing(f"{where}.type")
        if tool["type"] in ("function", "custom") and not isinstance(tool.get("name"), str):
            return _missing(f"{where}.name")  # e.g. a chat completions tool, name in "function"
    choice = body.get("tool_choice")
    if isinstance(choice, str) and choice not in _TOOL_CHOICES:
        return _bad_value("tool_choice", choice, _TOOL_CHOICES)
    if isinstance(choice, dict):
        if not isinstance(choice.get("type"), str):
            return _missing("tool_choice.type")
        if choice["type"] in ("function", "custom") and not isinstance(choice.get("name"), str):
            return _missing("tool_choice.name")
    elif choice is not None and not isinstance(choice, str):
        return _wrong_type("tool_choice", "a string or an object", choice)
    return None


def _invalid_limit(limit: Any) -> dict[str, Any] | None:
    if limit is None:
        return None
    if not isinstance(limit, int) or isinstance(limit, bool):
        return _wrong_type("max_output_tokens", "an integer", limit)
    if limit < MIN_OUTPUT_TOKENS:
        message = (
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= "
            f"{MIN_OUTPUT_TOKENS}, but got {limit} instead."
        )
        return error_body(message, param="max_output_tokens", code="integer_below_min_value")
    return None


# --- the items ----------------------------------------------------------------------------------


def item_type(item: Mapping[str, Any]) -> str:
    """An input item's type: its ``type``, else ``"message"`` (it has a role) or
    ``"item_reference"``."""
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    return "message" if "role" in item else "item_reference"


def input_items(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A valid request's ``input`` as items (a string: one user message; absent: none)."""
    value = body.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def _invalid_item(item: Any, where: str) -> dict[str, Any] | None:
    if not isinstance(item, dict):
        return _wrong_type(where, "an input item object", item)
    if "type" in item and not isinstance(item["type"], str):
        return _wrong_type(f"{where}.type", "a string", item["type"])
    kind = item_type(item)
    if kind not in ITEM_TYPES:
        return _bad_value(where, kind, ITEM_TYPES)
    if kind == "message":
        return _invalid_message(item, where)
    for field in _REQUIRED.get(kind, ()):
        if not isinstance(item.get(field), str):
            return _missing_or_type(item, f"{where}.{field}", field, "a string")
    if kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        if not isinstance(output, (str, list)):
            return _missing_or_type(item, f"{where}.output", "output", "a string or array")
    if kind == "reasoning":
        if not isinstance(item.get("summary"), list):
            return _missing_or_type(item, f"{where}.summary", "summary", "an array")
        encrypted = item.get("encrypted_content")
        if encrypted is not None and not isinstance(encrypted, str):
            return _wrong_type(f"{where}.encrypted_content", "a string", encrypted)
    return None


def _invalid_message(item: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    role = item.get("role")
    if not isinstance(role, str):
        return _missing_or_type(item, f"{where}.role", "role", "a string")
    if role not in _ROLES:
        return _bad_value(f"{where}.role", role, _ROLES)
    content = item.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        expected = "one of a string or array of input content items"
        return _missing_or_type(item, f"{where}.content", "content", expected)
    allowed = _OUTPUT_PARTS if role == "assistant" else _INPUT_PARTS
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        if not isinstance(part, dict):
            return _wrong_type(at, "an object", part)
        kind = part.get("type")
        if not isinstance(kind, str):
            return _missing(f"{at}.type")
        if kind not in allowed:
            return _bad_value(f"{at}.type", kind, allowed)
        field = {"input_text": "text", "output_text": "text", "refusal": "refusal"}.get(kind)
        if field is not None and not isinstance(part.get(field), str):
            return _missing_or_type(part, f"{at}.{field}", field, "a string")
    return None


# --- the conversation ---------------------------------------------------------------------------


def invalid_conversation(items: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The error body for a conversation OpenAI would refuse, or None.

    A tool output must follow a call with its ``call_id``, each function call needs an output,
    and reasoning and compaction items must carry ``encrypted_content`` this server sealed.
    """
    calls: dict[str, str] = {}
    unanswered: dict[str, None] = {}
    for item in items:
        kind = item_type(item)
        if kind in ("function_call", "custom_tool_call"):
            calls[item["call_id"]] = kind
            if kind == "function_call":
                unanswered[item["call_id"]] = None
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call = kind.removesuffix("_output")
            if calls.get(item["call_id"]) != call:
                noun = call.replace("_", " ")
                message = f"No tool call found for {noun} output with call_id {item['call_id']}."
                return error_body(message, param="input")
            unanswered.pop(item["call_id"], None)
        elif kind in ("reasoning", "compaction") and not _ours(item, kind):
            message = (
                f"The encrypted content for item {item.get('id')} could not be verified. "
                "Reason: Encrypted content could not be decrypted or parsed."
            )
            return error_body(message, code="invalid_encrypted_content")
    for call_id in unanswered:
        return error_body(f"No tool output found for function call {call_id}.", param="input")
    return None


def _ours(item: Mapping[str, Any], kind: str) -> bool:
    """Whether ``item`` has no ``encrypted_content``, or one this server sealed for ``kind``."""
    token = item.get("encrypted_content")
    return token is None or unseal(token, kind) is not None


def seal(kind: str, payload: Mapping[str, Any]) -> str:
    """An opaque ``encrypted_content`` for an item of type ``kind``, carrying ``payload``."""
    data = json.dumps({"issuer": _ISSUER, "kind": kind, **payload}, sort_keys=True)
    return _SEAL_PREFIX + base64.urlsafe_b64encode(data.encode("utf-8")).decode("ascii")


def unseal(token: str, kind: str) -> dict[str, Any] | None:
    """The payload :func:`seal` put in ``token`` for an item of type ``kind`` (None: not ours)."""
    if not token.startswith(_SEAL_PREFIX):
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(token.removeprefix(_SEAL_PREFIX)))
    except (binascii.Error, ValueError):
        return None
    if not isinstance(data, dict) or data.get("issuer") != _ISSUER or data.get("kind") != kind:
        return None
    return data


# --- OpenAI's error bodies ----------------------------------------------------------------------


def _missing(param: str) -> dict[str, Any]:
    message = f"Missing required parameter: '{param}'."
    return error_body(message, param=param, code="missing_required_parameter")


def _missing_or_type(
    holder: Mapping[str, Any], param: str, field: str, expected: str
) -> dict[str, Any]:
    if holder.get(field) is None:
        return _missing(param)
    return _wrong_type(param, expected, holder[field])


def _wrong_type(param: str, expected: str, value: Any) -> dict[str, Any]:
    got = _json_type(value)
    message = f"Invalid type for '{param}': expected {expected}, but got {got} instead."
    return error_body(message, param=param, code="invalid_type")


def _bad_value(param: str, value: str, supported: Sequence[str]) -> dict[str, Any]:
    quoted = [f"'{name}'" for name in supported]
    if len(quoted) <= 2:
        listed = " and ".join(quoted)
    else:
        listed = ", ".join(quoted[:-1]) + ", and " + quoted[-1]
    message = f"Invalid value: '{value}'. Supported values are: {listed}."
    return error_body(message, param=param, code="invalid_value")


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a decimal"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(entry, str) for entry in value)
