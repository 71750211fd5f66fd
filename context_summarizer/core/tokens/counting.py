"""What a Chat Completions request costs in tokens beyond its text: the cookbook's overheads per
message, name and reply, content parts, tool calls and tool definitions, cached per message.
``_ChatCounter`` walks a request; its subclasses in ``counters`` say how text becomes tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError
from ..messages import canonical_bytes, canonical_json, message_digest
from .cache import _LRU, CacheInfo
from .encodings import CL100K_BASE, O200K_BASE
from .images import (
    AUDIO_PART_TOKENS,
    DEFAULT_IMAGE_SIZE,
    FILE_PART_TOKENS,
    IMAGE_LOW_TOKENS,
    data_url_image_size,
    image_tokens,
)

TOKENS_PER_MESSAGE = 3
"""Cookbook: every message is wrapped as ``<|start|>{role}<|message|>{content}<|end|>``."""
TOKENS_PER_NAME = 1
"""Cookbook: a ``name`` costs one token beyond its text."""
REPLY_PRIMING_TOKENS = 3
"""Cookbook: every reply is primed with ``<|start|>assistant<|message|>``."""
TOOL_CALL_TOKENS = 3
"""Per tool call beyond its function name and arguments; inferred empirically for
``function_call`` by hmarr/openai-chat-tokens (OpenAI publishes no figure)."""


@dataclass(frozen=True, slots=True)
class ToolTokenConstants:
    """The cookbook's ``num_tokens_for_tools`` settings for one model family."""

    func_init: int
    prop_init: int
    prop_key: int
    enum_init: int
    enum_item: int
    func_end: int


TOOL_CONSTANTS: Mapping[str, ToolTokenConstants] = {
    # Cookbook values for gpt-4o / gpt-4o-mini.
    O200K_BASE: ToolTokenConstants(
        func_init=7, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12
    ),
    # Cookbook values for gpt-3.5-turbo / gpt-4.
    CL100K_BASE: ToolTokenConstants(
        func_init=10, prop_init=3, prop_key=3, enum_init=-3, enum_item=3, func_end=12
    ),
}
"""Tool-definition constants by encoding (the cookbook's o200k and cl100k model families)."""


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of text, messages and tool definitions for one tokenizer."""

    name: str

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` as plain text."""
        ...

    def count_message(self, message: Mapping[str, Any], *, digest: str | None = None) -> int:
        """Tokens of one message, including the per-message overhead. ``digest``, when the
        caller already has ``message_digest(message)``, saves computing it again."""
        ...

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a conversation: its messages plus the reply priming."""
        ...

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Tokens of the ``tools`` (or legacy ``functions``) definitions of a request."""
        ...


def _json_text(value: Any) -> str:
    try:
        return canonical_json(value)
    except (TypeError, ValueError):
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
        )


class _ChatCounter:
    """Walks messages and tools; subclasses say how text becomes tokens."""

    name: str

    def __init__(self, *, tool_constants: ToolTokenConstants, cache_size: int) -> None:
        if cache_size < 0:
            raise ConfigurationError(f"cache_size must be >= 0, got {cache_size}")
        self._tool_constants = tool_constants
        self._messages = _LRU(cache_size)
        self._tools = _LRU(min(cache_size, 256))

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` as plain text."""
        raise NotImplementedError

    # messages ----------------------------------------------------------------------------------

    def count_message(self, message: Mapping[str, Any], *, digest: str | None = None) -> int:
        """Tokens of one message: its fields plus ``TOKENS_PER_MESSAGE`` (cached by digest;
        pass ``digest`` when it is already known)."""
        if digest is None:
            try:
                digest = message_digest(message)
            except (TypeError, ValueError):  # not JSON-serialisable: count it uncached
                return self._count_message(message)
        cached = self._messages.get(digest)
        if cached is not None:
            return cached
        count = self._count_message(message)
        self._messages.put(digest, count)
        return count

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of a conversation: every message plus ``REPLY_PRIMING_TOKENS``."""
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING_TOKENS

    def cache_info(self) -> CacheInfo:
        """Hits, misses and size of the per-message cache."""
        return self._messages.info()

    def tools_cache_info(self) -> CacheInfo:
        """Hits, misses and size of the tool-definitions cache."""
        return self._tools.info()

    def clear_cache(self) -> None:
        """Empty both caches and reset their statistics."""
        self._messages.clear()
        self._tools.clear()

    def _count_message(self, message: Mapping[str, Any]) -> int:
        total = TOKENS_PER_MESSAGE
        for key, value in message.items():
            if value is None:
                continue
            if key == "content":
                total += self._count_content(value)
            elif key == "tool_calls":
                total += self._count_tool_calls(value)
            elif key == "function_call":
                total += self._count_tool_calls([{"function": value}])
            elif key == "name" and isinstance(value, str):
                total += self.count_text(value) + TOKENS_PER_NAME
            elif isinstance(value, str):  # role, tool_call_id, refusal, reasoning_content...
                total += self.count_text(value)
            else:
                total += self.count_text(_json_text(value))
        return total

    def _count_content(self, content: Any) -> int:
        if isinstance(content, str):
            return self.count_text(content)
        if not isinstance(content, list):
            return self.count_text(_json_text(content))
        return sum(self._count_part(part) for part in content)

    def _count_part(self, part: Any) -> int:
        if isinstance(part, str):
            return self.count_text(part)
        if not isinstance(part, Mapping):
            return self.count_text(_json_text(part))
        kind = part.get("type")
        if kind == "image_url" or (kind is None and "image_url" in part):
            return self._count_image(part.get("image_url"))
        if kind == "input_audio":
            return AUDIO_PART_TOKENS
        if kind == "file":
            file = part.get("file")
            filename = file.get("filename") if isinstance(file, Mapping) else None
            named = self.count_text(filename) if isinstance(filename, str) else 0
            return FILE_PART_TOKENS + named
        text = part.get("text")
        if isinstance(text, str):
            return self.count_text(text)
        refusal = part.get("refusal")
        if isinstance(refusal, str):
            return self.count_text(refusal)
        return self.count_text(_json_text(part))

    def _count_image(self, image: Any) -> int:
        url: str = ""
        detail: str = "auto"
        if isinstance(image, str):
            url = image
        elif isinstance(image, Mapping):
            if isinstance(image.get("url"), str):
                url = image["url"]
            if isinstance(image.get("detail"), str):
                detail = image["detail"]
        if detail == "low":
            return IMAGE_LOW_TOKENS
        size = data_url_image_size(url) if url else None
        return image_tokens(*(size or DEFAULT_IMAGE_SIZE), detail=detail)

    def _count_tool_calls(self, calls: Any) -> int:
        if not isinstance(calls, list):
            return self.count_text(_json_text(calls))
        total = 0
        for call in calls:
            body = None
            if isinstance(call, Mapping):
                body = call.get("function")
                if not isinstance(body, Mapping) and isinstance(call.get("custom"), Mapping):
                    custom = call["custom"]
                    body = {"name": custom.get("name"), "arguments": custom.get("input")}
            if not isinstance(body, Mapping):
                total += self.count_text(_json_text(call))
                continue
            total += TOOL_CALL_TOKENS
            for field in ("name", "arguments"):
                value = body.get(field)
                if isinstance(value, str):
                    total += self.count_text(value)
                elif value is not None:
                    total += self.count_text(_json_text(value))
        return total

    # tools -------------------------------------------------------------------------------------

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Tokens of tool definitions, by the cookbook's ``num_tokens_for_tools`` (cached).

        Per function: ``func_init`` + ``"name:description"``; if it has properties,
        ``prop_init`` + per property ``prop_key`` + ``"key:type:description"`` (+ ``enum_init``
        and ``enum_item`` + item per enum value); then ``func_end`` once. Beyond the cookbook,
        which ignores them, nested schema keywords of a property (``items``, ``properties``...)
        are counted as JSON, and non-function tools as their JSON.
        """
        if not tools:
            return 0
        try:
            digest = hashlib.sha256(canonical_bytes(list(tools))).hexdigest()[:32]
        except (TypeError, ValueError):
            return self._count_tools(tools)
        cached = self._tools.get(digest)
        if cached is not None:
            return cached
        count = self._count_tools(tools)
        self._tools.put(digest, count)
        return count

    def _count_tools(self, tools: Sequence[Mapping[str, Any]]) -> int:
        c = self._tool_constants
        total = 0
        functions = 0
        for tool in tools:
            function: Any = tool.get("function") if isinstance(tool, Mapping) else None
            if not isinstance(function, Mapping) and isinstance(tool, Mapping) and "name" in tool:
                function = tool  # a legacy ``functions`` entry
            if not isinstance(function, Mapping):
                total += self.count_text(_json_text(tool))
                continue
            functions += 1
            total += c.func_init
            description = function.get("description")
            description = description if isinstance(description, str) else ""
            total += self.count_text(f"{function.get('name', '')}:{description.removesuffix('.')}")
            parameters = function.get("parameters")
            properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
            if isinstance(properties, Mapping) and properties:
                total += c.prop_init
                for key, schema in properties.items():
                    total += c.prop_key + self._count_property(str(key), schema)
        if functions:
            total += c.func_end
        return total

    def _count_property(self, key: str, schema: Any) -> int:
        c = self._tool_constants
        if not isinstance(schema, Mapping):
            return self.count_text(f"{key}:{_json_text(schema)}:")
        total = 0
        kind = schema.get("type", "")
        if isinstance(kind, list):
            kind = " | ".join(str(k) for k in kind)
        elif not isinstance(kind, str):
            kind = _json_text(kind)
        enum = schema.get("enum")
        if isinstance(enum, list):
            total += c.enum_init
            for item in enum:
                total += c.enum_item
                total += self.count_text(item if isinstance(item, str) else _json_text(item))
        description = schema.get("description")
        description = description if isinstance(description, str) else ""
        total += self.count_text(f"{key}:{kind}:{description.removesuffix('.')}")
        rest = {k: v for k, v in schema.items() if k not in ("type", "description", "enum")}
        if rest:
            total += self.count_text(_json_text(rest))
        return total
