"""Count the tokens of a Chat Completions request, and learn how far the count is off.

What this module guarantees:

- Counting is real tokenization. ``TiktokenCounter`` encodes with a tiktoken encoding loaded by
  ``tokenizers.load_encoding``, offline; when no file is available that raises
  ``TokenizerUnavailable``. Nothing here ever falls back to an estimate on its own:
  ``ApproximateCounter`` (characters / 4) is used only when asked for by name.
- Text is encoded with ``encode_ordinary``: a message containing ``<|endoftext|>`` or any other
  special-token spelling is counted as the plain text it is, and never raises.
- Counting never raises on a message's shape: unknown fields and content parts are counted as
  their canonical JSON, since they reach the upstream too.
- The chat overheads are the OpenAI cookbook's ("How to count tokens with tiktoken"): 3 tokens per
  message, 1 more per ``name``, 3 to prime the reply; tool definitions follow its
  ``num_tokens_for_tools``. On the cookbook's examples the counts equal the ones it reports the
  API returning (124 and 129 for its conversation, 101 and 105 with its weather tool).
- Per-message counts are cached in a bounded, thread-safe LRU keyed by
  ``messages.message_digest``, so turn N of a long session only tokenizes what is new.
- Images are estimated with OpenAI's published tile formula; audio and file parts with a
  documented flat charge. These are estimates: ``Calibration`` learns, per model, the ratio of the
  provider-reported ``usage.prompt_tokens`` to our count and corrects for it (within bounds).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from ..loaders.tokenizers import load_encoding
from .errors import ConfigurationError
from .messages import canonical_bytes, canonical_json, message_digest
from .model_limits import canonical_model_name, longest_prefix_key

if TYPE_CHECKING:
    import tiktoken

# --- encodings ------------------------------------------------------------------------------------

O200K_BASE = "o200k_base"
CL100K_BASE = "cl100k_base"
APPROXIMATE = "approximate"
"""The ``tokenizer`` value that opts in to ``ApproximateCounter``."""

MODEL_ENCODINGS: Mapping[str, str] = {
    "gpt-4o": O200K_BASE,
    "chatgpt-4o": O200K_BASE,
    "gpt-4.1": O200K_BASE,
    "gpt-4.5": O200K_BASE,
    "gpt-5": O200K_BASE,
    "o1": O200K_BASE,
    "o3": O200K_BASE,
    "o4": O200K_BASE,
    "gpt-oss": O200K_BASE,  # o200k_harmony: o200k_base's ranks plus chat special tokens
    "gpt-4": CL100K_BASE,  # gpt-4, gpt-4-32k, gpt-4-turbo (gpt-4o / gpt-4.x matched above)
    "gpt-3.5": CL100K_BASE,
    "gpt-35": CL100K_BASE,  # Azure's spelling
}
"""Model-name prefix -> tiktoken encoding, as tiktoken's own model table maps them."""

DEFAULT_ENCODING = O200K_BASE
"""Encoding for models the table does not know: an approximation for non-OpenAI tokenizers,
which ``Calibration`` corrects from the provider's reported usage."""


def encoding_for_model(model: str, overrides: Mapping[str, str] | None = None) -> str:
    """The tiktoken encoding name to count ``model``'s tokens with.

    ``overrides`` maps exact names or prefixes (``{"claude-": "cl100k_base"}``) to encodings and is
    checked first, longest match winning, against the routed and the canonical name. Then the
    built-in table, on the name without provider routing (``openai/gpt-4o`` is ``gpt-4o``). Any
    other model gets ``DEFAULT_ENCODING``.
    """
    raw = model.strip().lower()
    canonical = canonical_model_name(raw)
    if overrides:
        key = longest_prefix_key((raw, canonical), overrides)
        if key is not None:
            return overrides[key]
    key = longest_prefix_key((canonical,), MODEL_ENCODINGS)
    return MODEL_ENCODINGS[key] if key is not None else DEFAULT_ENCODING


# --- constants ------------------------------------------------------------------------------------

TOKENS_PER_MESSAGE = 3
"""Cookbook: every message is wrapped as ``<|start|>{role}<|message|>{content}<|end|>``."""
TOKENS_PER_NAME = 1
"""Cookbook: a ``name`` costs one token beyond its text."""
REPLY_PRIMING_TOKENS = 3
"""Cookbook: every reply is primed with ``<|start|>assistant<|message|>``."""
TOOL_CALL_TOKENS = 3
"""Per tool call beyond its function name and arguments; inferred empirically for
``function_call`` by hmarr/openai-chat-tokens (OpenAI publishes no figure)."""

IMAGE_LOW_TOKENS = 85
"""OpenAI vision guide: ``detail: low`` costs 85 tokens; it is also the base of a high image."""
IMAGE_TILE_TOKENS = 170
"""OpenAI vision guide: each 512 px tile of a ``detail: high`` image costs 170 tokens."""
IMAGE_TILE_SIZE = 512
IMAGE_MAX_SIDE = 2048
"""High-detail images are first scaled down to fit a 2048 x 2048 square..."""
IMAGE_SHORT_SIDE = 768
"""...then scaled down so their shortest side is 768 px (never up)."""
DEFAULT_IMAGE_SIZE = (1024, 1024)
"""Assumed size of an image whose dimensions cannot be read (a remote URL): 765 tokens high."""

AUDIO_PART_TOKENS = 1_000
"""Rough flat charge for one ``input_audio`` part. The real cost grows with the clip's length,
which is not decoded; ``Calibration`` absorbs a systematic error."""
FILE_PART_TOKENS = 1_000
"""Rough flat charge for one ``file`` part (a PDF is billed per page, which is not decoded), on
top of its file name."""


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


# --- images ---------------------------------------------------------------------------------------


def image_tokens(width: int | None, height: int | None, detail: str | None = "auto") -> int:
    """Tokens of one image under OpenAI's published rule.

    ``low`` is a flat 85. ``high`` and ``auto`` (and anything else): scale to fit 2048 x 2048, then
    scale the shortest side down to 768, and charge 85 + 170 per 512 px tile. Unknown dimensions
    are taken as ``DEFAULT_IMAGE_SIZE``.
    """
    if detail == "low":
        return IMAGE_LOW_TOKENS
    if not width or not height or width <= 0 or height <= 0:
        width, height = DEFAULT_IMAGE_SIZE
    w, h = float(width), float(height)
    longest = max(w, h)
    if longest > IMAGE_MAX_SIDE:
        w, h = w * IMAGE_MAX_SIDE / longest, h * IMAGE_MAX_SIDE / longest
    shortest = min(w, h)
    if shortest > IMAGE_SHORT_SIDE:
        w, h = w * IMAGE_SHORT_SIDE / shortest, h * IMAGE_SHORT_SIDE / shortest
    tiles = math.ceil(round(w) / IMAGE_TILE_SIZE) * math.ceil(round(h) / IMAGE_TILE_SIZE)
    return IMAGE_LOW_TOKENS + IMAGE_TILE_TOKENS * tiles


_HEADER_CHARS = 8_192  # base64 characters decoded first: 6 KB, enough for PNG, GIF, WebP
_JPEG_HEADER_CHARS = 131_072  # JPEG's size may follow EXIF data: look up to 96 KB in
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def image_size(data: bytes) -> tuple[int, int] | None:
    """``(width, height)`` read from the first bytes of a PNG, JPEG, GIF or WebP file, or None."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return _webp_size(data)
    if data[:2] == b"\xff\xd8":
        return _jpeg_size(data)
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
        return width, height
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width = int.from_bytes(data[26:28], "little") & 0x3FFF
        height = int.from_bytes(data[28:30], "little") & 0x3FFF
        return width, height
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    n = len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0x01, 0xD8) or 0xD0 <= marker <= 0xD7:  # markers without a length
            i += 2
            continue
        length = int.from_bytes(data[i + 2 : i + 4], "big")
        if marker in _JPEG_SOF:
            if i + 9 > n:
                return None
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(width), int(height)
        if length < 2:
            return None
        i += 2 + length
    return None


def data_url_image_size(url: str) -> tuple[int, int] | None:
    """Dimensions of the image in a base64 ``data:`` URL, decoding only its first kilobytes."""
    if not url.startswith("data:"):
        return None
    header, sep, payload = url.partition(",")
    if not sep or not header.endswith(";base64"):
        return None
    size: tuple[int, int] | None = None
    for limit in (_HEADER_CHARS, _JPEG_HEADER_CHARS):
        chunk = "".join(payload[:limit].split())
        chunk = chunk[: len(chunk) - len(chunk) % 4]
        try:
            data = base64.b64decode(chunk)
        except (binascii.Error, ValueError):
            return None
        size = image_size(data)
        if size is not None or data[:2] != b"\xff\xd8" or len(payload) <= limit:
            break
    return size


# --- counters -------------------------------------------------------------------------------------


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


class CacheInfo(NamedTuple):
    """Statistics of a counter's cache."""

    hits: int
    misses: int
    size: int
    maxsize: int


class _LRU:
    """A bounded, thread-safe least-recently-used map of digests to counts."""

    def __init__(self, maxsize: int) -> None:
        self._data: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()
        self.maxsize = maxsize
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> int | None:
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: str, value: int) -> None:
        if self.maxsize <= 0:
            return
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self.hits, self.misses, len(self._data), self.maxsize)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
            self.hits = 0
            self.misses = 0


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


class TiktokenCounter(_ChatCounter):
    """Exact tiktoken counting with the cookbook's chat overheads; a ``TokenCounter``."""

    def __init__(self, encoding_name: str = O200K_BASE, *, cache_size: int = 200_000) -> None:
        self.name = encoding_name
        self._encoding: tiktoken.Encoding = load_encoding(encoding_name)
        # tiktoken encodes with the GIL released, but turning millions of token ids into a Python
        # list holds it (about 110 ms for 3.4M ids). Its buffer form skips that list; it is
        # tiktoken's private API, so it is used only where present, and checked at load.
        self._count_buffer = _buffer_counter(self._encoding)
        super().__init__(
            tool_constants=TOOL_CONSTANTS.get(encoding_name, TOOL_CONSTANTS[O200K_BASE]),
            cache_size=cache_size,
        )

    def count_text(self, text: str) -> int:
        """Tokens of ``text``; special-token spellings count as ordinary text.

        A lone surrogate (JSON allows ``"\\ud800"``) counts as U+FFFD, as tiktoken itself
        encodes it. Long texts are counted without building the list of token ids.
        """
        if len(text) > _LONG_TEXT and self._count_buffer is not None:
            try:
                return self._count_buffer(text, _NO_SPECIALS).nbytes // 4
            except UnicodeEncodeError:
                return self.count_text(_without_surrogates(text))
        return len(self._encoding.encode_ordinary(text))

    def __repr__(self) -> str:
        return f"TiktokenCounter({self.name!r})"


_LONG_TEXT = 65_536
"""Texts longer than this (in characters) are counted through tiktoken's token buffer."""
_NO_SPECIALS: frozenset[str] = frozenset()


def _buffer_counter(
    encoding: tiktoken.Encoding,
) -> Callable[[str, frozenset[str]], memoryview] | None:
    """``encode_to_tiktoken_buffer`` as a memoryview maker, if this tiktoken has it and it agrees
    with ``encode_ordinary`` (special-token text included); else None."""
    core = getattr(encoding, "_core_bpe", None)
    encode = getattr(core, "encode_to_tiktoken_buffer", None)
    if encode is None:
        return None

    def count(text: str, allowed: frozenset[str]) -> memoryview:
        return memoryview(encode(text, allowed))

    probe = "def f(x):\n    return x  # <|endoftext|> done."
    try:
        agrees = count(probe, _NO_SPECIALS).nbytes // 4 == len(encoding.encode_ordinary(probe))
    except Exception:  # an API that changed shape: use the list path
        return None
    return count if agrees else None


def _without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD (what tiktoken encodes for it)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


class ApproximateCounter(_ChatCounter):
    """Characters / 4 with the same overheads: an explicit opt-in, never a fallback."""

    CHARS_PER_TOKEN = 4

    def __init__(self, *, cache_size: int = 200_000) -> None:
        self.name = APPROXIMATE
        super().__init__(tool_constants=TOOL_CONSTANTS[O200K_BASE], cache_size=cache_size)

    def count_text(self, text: str) -> int:
        """``ceil(len(text) / 4)``."""
        return -(-len(text) // self.CHARS_PER_TOKEN)

    def __repr__(self) -> str:
        return "ApproximateCounter()"


_shared_lock = threading.Lock()
_shared: dict[str, TokenCounter] = {}


def make_counter(
    model: str,
    *,
    tokenizer: str | None = None,
    encoding_overrides: Mapping[str, str] | None = None,
) -> TokenCounter:
    """The process-wide counter for ``model``, shared per encoding so caches are reused.

    ``tokenizer``: None chooses by model (``encoding_for_model``); a tiktoken encoding name forces
    it; ``"approximate"`` opts in to ``ApproximateCounter``. An encoding that cannot be loaded
    offline raises ``TokenizerUnavailable``.
    """
    name = tokenizer if tokenizer is not None else encoding_for_model(model, encoding_overrides)
    with _shared_lock:
        counter = _shared.get(name)
        if counter is None:
            counter = ApproximateCounter() if name == APPROXIMATE else TiktokenCounter(name)
            _shared[name] = counter
        return counter


# --- calibration ----------------------------------------------------------------------------------


class Calibration:
    """Ratio of provider-reported prompt tokens to our estimate, learned from usage, kept apart
    per namespace and model.

    Each observation's ratio ``reported / estimated`` is clamped to ``[min_ratio, max_ratio]`` and
    folded into an exponential moving average (weight ``alpha`` for the new sample; the first
    sample is taken as is). Each ``(namespace, model)`` is calibrated on its own, so one tenant's
    traffic (say, image-heavy requests) never moves another tenant's estimates. The number of
    pairs remembered is bounded (``max_entries``, least recently used dropped first), since both
    come from clients. Thread-safe.
    """

    def __init__(
        self,
        *,
        min_ratio: float = 0.75,
        max_ratio: float = 1.5,
        alpha: float = 0.3,
        max_entries: int = 4096,
    ) -> None:
        if not (0 < min_ratio <= 1.0 <= max_ratio and math.isfinite(max_ratio)):
            raise ConfigurationError(
                f"calibration bounds must satisfy 0 < min_ratio <= 1 <= max_ratio, "
                f"got {min_ratio} and {max_ratio}"
            )
        if not 0 < alpha <= 1:
            raise ConfigurationError(f"calibration alpha must be in (0, 1], got {alpha}")
        self.min_ratio = min_ratio
        self.max_ratio = max_ratio
        self.alpha = alpha
        self.max_entries = max_entries
        self._ratios: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._lock = threading.Lock()

    def _clamp(self, ratio: float) -> float:
        return min(self.max_ratio, max(self.min_ratio, ratio))

    def observe(self, model: str, *, estimated: int, reported: int, namespace: str = "") -> None:
        """Fold one response's ``usage.prompt_tokens`` (``reported``) against our ``estimated``.

        Non-positive values (a missing or zero usage) are ignored.
        """
        if estimated <= 0 or reported <= 0:
            return
        sample = self._clamp(reported / estimated)
        key = (namespace, model)
        with self._lock:
            previous = self._ratios.pop(key, None)
            self._ratios[key] = (
                sample if previous is None else self.alpha * sample + (1 - self.alpha) * previous
            )
            while len(self._ratios) > self.max_entries:
                self._ratios.popitem(last=False)

    def ratio(self, model: str, namespace: str = "") -> float:
        """The learned ratio for ``model`` in ``namespace`` (1.0 before any observation)."""
        with self._lock:
            value = self._ratios.get((namespace, model), 1.0)
        return self._clamp(value)

    def apply(self, model: str, estimated: int, namespace: str = "") -> int:
        """``ceil(estimated * ratio)``, immune to float noise such as 110.00000000000001."""
        return math.ceil(round(estimated * self.ratio(model, namespace), 6))

    def snapshot(self, namespace: str = "") -> dict[str, float]:
        """The learned ratios of ``namespace``, by model, for persisting."""
        with self._lock:
            return {model: r for (ns, model), r in self._ratios.items() if ns == namespace}

    def restore(self, data: Mapping[str, float], namespace: str = "") -> None:
        """Replace the learned ratios of ``namespace`` with a snapshot's; entries that are not
        positive finite numbers are skipped, the others clamped to the bounds."""
        restored: dict[tuple[str, str], float] = {}
        for model, value in data.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if math.isfinite(value) and value > 0:
                restored[(namespace, str(model))] = self._clamp(float(value))
        with self._lock:
            for key in [k for k in self._ratios if k[0] == namespace]:
                del self._ratios[key]
            self._ratios.update(restored)
