"""The test upstream's own usage accounting: prompt tokens, and OpenAI-style prompt caching.

Independent of summarizer's counting, so tests compare summarizer's figures against a second
opinion: :class:`PromptTokenCounter` counts what a request's prompt costs, :class:`PrefixCache`
remembers the prefixes already answered, and :func:`cached_tokens_for` rounds a cache hit the way
OpenAI does. :func:`account_prompt` applies the three to one chat completion request.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.messages import canonical_json, chain_step, message_digest
from ..loaders.tokenizers import load_encoding

__all__ = [
    "CACHE_INCREMENT",
    "CACHE_MIN_TOKENS",
    "PrefixCache",
    "PromptAccount",
    "PromptTokenCounter",
    "account_prompt",
    "cached_tokens_for",
]

CACHE_MIN_TOKENS = 1024
"""Prompts whose matching prefix is shorter than this get no cache hit."""
CACHE_INCREMENT = 128
"""Cache hits grow in steps of this many tokens beyond ``CACHE_MIN_TOKENS``."""

TOKENS_PER_MESSAGE = 4
REPLY_PRIMING_TOKENS = 3
NON_TEXT_PART_TOKENS = 85


# --- token accounting ---------------------------------------------------------------------------


class PromptTokenCounter:
    """Counts prompt tokens with o200k_base, using this server's own rendering.

    - each message: 4 + tokens(role) + content + tokens(name) + tokens(tool_call_id)
      + tokens(refusal) + for each tool call tokens(function name) + tokens(arguments)
      (the legacy ``function_call`` likewise);
    - content: a string's tokens; for a list of parts, each part's ``text`` (or ``refusal``)
      tokens, and a fixed 85 for any part without text (images, audio, files);
    - ``tools`` (when a non-empty list): tokens of its canonical JSON (sorted keys, no spaces);
    - plus 3 tokens priming the reply.

    Message counts are memoised by message digest (LRU, ``max_entries``), so a long session
    re-sent on every turn is only tokenized once per new message.
    """

    def __init__(self, *, max_entries: int = 100_000) -> None:
        self.encoding = load_encoding("o200k_base")
        self.max_entries = max_entries
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def text(self, text: str) -> int:
        """Tokens of a string (special-token text is counted as ordinary text)."""
        return len(self.encoding.encode_ordinary(text)) if text else 0

    def _value(self, value: Any) -> int:
        if value is None:
            return 0
        return self.text(value if isinstance(value, str) else canonical_json(value))

    def _content(self, content: Any) -> int:
        if isinstance(content, str):
            return self.text(content)
        if not isinstance(content, list):
            return self._value(content)
        total = 0
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    total += self.text(text)
                    continue
            total += NON_TEXT_PART_TOKENS
        return total

    def render_message(self, message: Mapping[str, Any]) -> int:
        """Tokens of one message, uncached."""
        total = TOKENS_PER_MESSAGE + self._value(message.get("role"))
        total += self._content(message.get("content"))
        for key in ("name", "tool_call_id", "refusal"):
            total += self._value(message.get(key))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                total += self._value(function.get("name")) + self._value(function.get("arguments"))
        function_call = message.get("function_call")
        if isinstance(function_call, Mapping):
            total += self._value(function_call.get("name"))
            total += self._value(function_call.get("arguments"))
        return total

    def message(self, message: Mapping[str, Any], digest: str | None = None) -> int:
        """Tokens of one message, memoised by its digest."""
        key = digest if digest is not None else message_digest(message)
        return self.remembered(key, lambda: self.render_message(message))

    def remembered(self, key: str, count: Callable[[], int]) -> int:
        """``count()``, memoised under ``key`` (a digest of what it counts) in the same LRU."""
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        count_now = count()
        with self._lock:
            self._cache[key] = count_now
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return count_now

    def tools(self, tools: Any) -> int:
        """Tokens of the ``tools`` list (0 when absent or empty)."""
        return self.text(canonical_json(tools)) if isinstance(tools, list) and tools else 0

    def prompt(self, body: Mapping[str, Any]) -> int:
        """Prompt tokens of a chat completion request body."""
        messages = body.get("messages")
        total = self.tools(body.get("tools")) + REPLY_PRIMING_TOKENS
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, Mapping):
                total += self.message(message)
        return total


# --- prompt caching -----------------------------------------------------------------------------


def cached_tokens_for(prefix_tokens: int, prompt_tokens: int) -> int:
    """OpenAI's rounding: nothing under 1,024 tokens, then 1,024 + whole steps of 128."""
    if prefix_tokens < CACHE_MIN_TOKENS:
        return 0
    rounded = CACHE_MIN_TOKENS + CACHE_INCREMENT * ((prefix_tokens - CACHE_MIN_TOKENS) // 128)
    return min(rounded, prompt_tokens)


class PrefixCache:
    """Remembers every prefix seen, as chain hash -> cumulative tokens of that prefix.

    The chain is seeded with a digest of (model, tools), so requests for another model or with
    another tools list never share a prefix. Entries are evicted least recently used first.
    """

    def __init__(self, *, max_entries: int = 250_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def seed(model: Any, tools: Any) -> str:
        """The namespace of a request: a digest of its model and tools."""
        tools_json = canonical_json(tools if isinstance(tools, list) and tools else [])
        return hashlib.sha256(
            f"{model}\n{tools_json}".encode("utf-8", "surrogatepass")
        ).hexdigest()[:32]

    def longest_prefix(self, chain: Sequence[str]) -> int:
        """Cumulative tokens of the longest already-seen prefix of ``chain`` (0 if none)."""
        with self._lock:
            for link in reversed(chain):
                tokens = self._entries.get(link)
                if tokens is not None:
                    self._entries.move_to_end(link)
                    return tokens
        return 0

    def register(self, chain: Sequence[str], cumulative: Sequence[int]) -> None:
        """Remember every prefix of a request that was answered."""
        with self._lock:
            for link, tokens in zip(chain, cumulative, strict=True):
                self._entries[link] = tokens
                self._entries.move_to_end(link)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (a cold cache)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


# --- one request's prompt -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptAccount:
    """A chat completion request's prompt as the server bills it.

    ``chain`` holds the hash of each message prefix and ``cumulative`` its tokens, what
    :meth:`PrefixCache.register` remembers once the request is answered.
    """

    chain: list[str]
    cumulative: list[int]
    tokens: int
    cached_tokens: int


def account_prompt(
    counter: PromptTokenCounter, cache: PrefixCache, body: Mapping[str, Any]
) -> PromptAccount:
    """The prompt tokens of a valid request ``body``, and how many of them hit ``cache``."""
    messages: list[dict[str, Any]] = body["messages"]
    seed = PrefixCache.seed(body["model"], body.get("tools"))
    chain: list[str] = []
    cumulative: list[int] = []
    running = counter.tools(body.get("tools"))
    link = seed
    for item in messages:
        digest = message_digest(item)
        link = chain_step(link, digest)
        running += counter.message(item, digest)
        chain.append(link)
        cumulative.append(running)
    prompt_tokens = running + REPLY_PRIMING_TOKENS
    cached_tokens = cached_tokens_for(cache.longest_prefix(chain), prompt_tokens)
    return PromptAccount(chain, cumulative, prompt_tokens, cached_tokens)
