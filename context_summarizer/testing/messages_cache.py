"""The Messages API's prompt as the test upstream bills it, and Anthropic's explicit caching.

**The prompt** is a sequence of blocks, in Anthropic's order: each tool of ``tools``, then each
block of ``system`` (a string is one text block), then each content block of each message (a
string content is one text block). :func:`messages_prompt` counts it with o200k_base, on its own
rendering (independent of summarizer's):

- a tool: the tokens of its canonical JSON (sorted keys, no spaces, ``cache_control`` left out);
- a text block: its text; an image, or a document that is not plain text: a fixed 85 tokens
  (a plain-text document: its text);
- ``tool_use``: its name and the canonical JSON of its ``input``; ``tool_result``: its
  ``tool_use_id`` and its content (a string, or nested blocks counted as above); ``thinking``:
  its thinking text; ``redacted_thinking``: its data;
- each message: 4 + tokens(role) more, billed with its first block (with the prompt's tail when
  it has none, an empty final assistant message);
- plus 3 tokens priming the reply, at the very end.

**Caching** (:class:`BreakpointCache`) follows Anthropic's explicit prompt caching:

1. A block with ``cache_control`` is a *breakpoint* (one inside a ``tool_result``'s content
   marks that ``tool_result``; a top-level ``cache_control`` marks the prompt's last block). The
   *prefix* at a block is everything from the first tool up to and including that block.
2. A prefix's identity is a hash chain over its blocks, seeded with the model: each link hashes
   the block's canonical JSON without ``cache_control``, where it sits (tools, system, a user or
   an assistant message) and whether it opens a message. Moving, adding or removing a
   breakpoint never changes an identity; changing any earlier byte changes every later one.
3. Reading: at each breakpoint, the cache is looked up at that block and at each of the 20
   block boundaries before it (Anthropic's lookback); the longest prefix found that an earlier
   request wrote (and that has not expired) is read: ``cache_read_input_tokens``.
4. Writing: every breakpoint's prefix is written (or refreshed) once the request is answered.
   ``cache_creation_input_tokens`` is the tokens from the end of the read prefix (or the start)
   up to the *last* breakpoint: zero when that was read too.
5. A prefix shorter than ``min_tokens`` (default 1,024) is neither written nor read, so a
   request whose last breakpoint's prefix is that short caches nothing at all.
6. ``input_tokens`` is every other token: those after the last breakpoint (or all of them, for
   a request without breakpoints, which reads and writes nothing). ``input_tokens +
   cache_read_input_tokens + cache_creation_input_tokens`` is always the whole prompt.
7. An entry lives ``ttl`` seconds (default 300; ``cache_control.ttl == "1h"``: 3,600), from its
   last write or read; ``ttl=None`` keeps entries until ``clear()`` or LRU eviction. Time comes
   from ``clock`` (default ``time.monotonic``), injectable in tests.
"""

from __future__ import annotations

import functools
import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.messages import canonical_json, chain_step, message_digest
from .accounting import (
    NON_TEXT_PART_TOKENS,
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    PromptTokenCounter,
)

__all__ = [
    "LOOKBACK_BLOCKS",
    "MESSAGES_CACHE_MIN_TOKENS",
    "MESSAGES_CACHE_TTL",
    "ONE_HOUR_TTL",
    "BreakpointCache",
    "CacheUsage",
    "MessagesPrompt",
    "block_tokens",
    "cache_control_count",
    "messages_prompt",
]

LOOKBACK_BLOCKS = 20
"""A breakpoint also reads the cache at this many block boundaries before it."""
MESSAGES_CACHE_MIN_TOKENS = 1024
"""Prefixes shorter than this are not cached (Anthropic's minimum for most models)."""
MESSAGES_CACHE_TTL = 300.0
"""Seconds an entry lives after its last write or read (``cache_control.ttl`` ``"5m"``)."""
ONE_HOUR_TTL = 3600.0
"""Seconds an entry written by a ``cache_control.ttl == "1h"`` breakpoint lives."""


# --- the prompt ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MessagesPrompt:
    """A Messages API request's prompt: its blocks' prefixes and where its breakpoints are.

    ``chain[i]`` identifies the prefix ending at block ``i`` and ``cumulative[i]`` is its tokens;
    ``breakpoints`` holds the indices of the breakpoint blocks, ascending, and ``one_hour`` those
    whose ``cache_control`` asks for a one-hour ``ttl``; ``tokens`` is the whole prompt.
    """

    chain: list[str]
    cumulative: list[int]
    breakpoints: list[int]
    one_hour: frozenset[int]
    tokens: int


def _without_cache_control(block: Mapping[str, Any]) -> dict[str, Any]:
    """``block`` without its ``cache_control`` (nor its nested blocks'): what it is, not how it
    is cached."""
    out = {key: value for key, value in block.items() if key != "cache_control"}
    if isinstance(out.get("content"), list):
        out["content"] = [
            _without_cache_control(item) if isinstance(item, Mapping) else item
            for item in out["content"]
        ]
    return out


def _cache_controls(block: Mapping[str, Any]) -> list[Any]:
    """The ``cache_control`` values set on ``block`` and on the blocks nested in its content."""
    found = [block["cache_control"]] if block.get("cache_control") is not None else []
    content = block.get("content") if block.get("type") == "tool_result" else None
    for item in content if isinstance(content, list) else ():
        if isinstance(item, Mapping) and item.get("cache_control") is not None:
            found.append(item["cache_control"])
    return found


def cache_control_count(body: Mapping[str, Any]) -> int:
    """How many ``cache_control`` markers ``body`` holds (top-level one included), the number
    Anthropic caps at 4."""
    top = 1 if body.get("cache_control") is not None else 0
    return top + sum(len(_cache_controls(block)) for _, _, block in _blocks(body))


def _blocks(body: Mapping[str, Any]) -> Iterator[tuple[str, bool, Mapping[str, Any]]]:
    """Each block of the prompt in order, as (where, opens a message, block)."""
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if isinstance(tool, Mapping):
            yield "tools", False, tool
    system = body.get("system")
    if isinstance(system, str) and system:
        yield "system", False, {"type": "text", "text": system}
    for block in system if isinstance(system, list) else ():
        if isinstance(block, Mapping):
            yield "system", False, block
    messages = body.get("messages")
    for message in messages if isinstance(messages, list) else ():
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}] if content else []
        blocks = [b for b in content if isinstance(b, Mapping)] if isinstance(content, list) else []
        for index, block in enumerate(blocks):
            yield str(message.get("role")), index == 0, block


def block_tokens(counter: PromptTokenCounter, block: Mapping[str, Any]) -> int:
    """Tokens of one content block (``cache_control`` aside), as the module docstring says."""
    kind = block.get("type")
    if kind == "text":
        return counter.text(str(block.get("text") or ""))
    if kind in ("image", "document"):
        source = block.get("source")
        if isinstance(source, Mapping) and source.get("type") == "text":
            return counter.text(str(source.get("data") or ""))
        return NON_TEXT_PART_TOKENS
    if kind == "tool_use":
        return counter.text(str(block.get("name") or "")) + counter.text(
            canonical_json(block.get("input"))
        )
    if kind == "tool_result":
        content = block.get("content")
        total = counter.text(str(block.get("tool_use_id") or ""))
        if isinstance(content, str):
            return total + counter.text(content)
        for item in content if isinstance(content, list) else ():
            total += block_tokens(counter, item) if isinstance(item, Mapping) else 0
        return total
    if kind == "thinking":
        return counter.text(str(block.get("thinking") or ""))
    if kind == "redacted_thinking":
        return counter.text(str(block.get("data") or ""))
    return counter.text(canonical_json(_without_cache_control(block)))


def _tokens(counter: PromptTokenCounter, where: str, block: Mapping[str, Any]) -> int:
    """Tokens of a tool (its canonical JSON) or of any other block."""
    return counter.text(canonical_json(block)) if where == "tools" else block_tokens(counter, block)


def messages_prompt(counter: PromptTokenCounter, body: Mapping[str, Any]) -> MessagesPrompt:
    """The prompt of a valid Messages API request ``body``: tokens, prefixes and breakpoints."""
    link = hashlib.sha256(f"anthropic\n{body.get('model')}".encode()).hexdigest()[:32]
    chain: list[str] = []
    cumulative: list[int] = []
    breakpoints: list[int] = []
    one_hour: set[int] = set()
    running = 0
    for where, opens, block in _blocks(body):
        plain = _without_cache_control(block)
        digest = message_digest({"at": where, "opens": opens, "block": plain})
        link = chain_step(link, digest)
        running += counter.remembered(digest, functools.partial(_tokens, counter, where, plain))
        if opens:
            running += TOKENS_PER_MESSAGE + counter.text(where)
        controls = _cache_controls(block)
        if controls:
            breakpoints.append(len(chain))
        if any(isinstance(c, Mapping) and c.get("ttl") == "1h" for c in controls):
            one_hour.add(len(chain))
        chain.append(link)
        cumulative.append(running)
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], Mapping):
        last = messages[-1]
        if last.get("content") in ("", []):  # an empty final assistant message: no block
            running += TOKENS_PER_MESSAGE + counter.text(str(last.get("role")))
    top = body.get("cache_control")
    if top is not None and chain and (not breakpoints or breakpoints[-1] != len(chain) - 1):
        breakpoints.append(len(chain) - 1)
    if isinstance(top, Mapping) and top.get("ttl") == "1h" and chain:
        one_hour.add(len(chain) - 1)
    tokens = running + REPLY_PRIMING_TOKENS
    return MessagesPrompt(chain, cumulative, breakpoints, frozenset(one_hour), tokens)


# --- the cache ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CacheUsage:
    """How a request's prompt splits between the cache and fresh input (Anthropic's usage)."""

    input_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int


@dataclass(slots=True)
class _Entry:
    tokens: int
    ttl: float | None
    expires: float


class BreakpointCache:
    """Anthropic's explicit prompt cache: the prefixes written at breakpoints, by identity.

    The rules are the module docstring's. ``min_tokens``: the shortest prefix cached; ``ttl``:
    seconds an entry lives after its last write or read (``None``: no expiry); ``clock``: the
    time source. Entries are evicted least recently used first beyond ``max_entries``.
    """

    def __init__(
        self,
        *,
        min_tokens: int = MESSAGES_CACHE_MIN_TOKENS,
        ttl: float | None = MESSAGES_CACHE_TTL,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 250_000,
    ) -> None:
        self.min_tokens = min_tokens
        self.ttl = ttl
        self.clock = clock
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def _live(self, link: str, now: float) -> _Entry | None:
        entry = self._entries.get(link)
        if entry is not None and entry.ttl is not None and entry.expires <= now:
            del self._entries[link]
            return None
        return entry

    def _keep(self, link: str, tokens: int, ttl: float | None, now: float) -> None:
        entry = self._entries.get(link)
        if entry is not None and ttl is not None and (entry.ttl is None or entry.ttl > ttl):
            ttl = entry.ttl  # a shorter write does not shorten a longer-lived entry
        self._entries[link] = _Entry(tokens, ttl, now + ttl if ttl is not None else 0.0)
        self._entries.move_to_end(link)

    def use(self, prompt: MessagesPrompt) -> CacheUsage:
        """Read ``prompt``'s longest cached prefix, write its breakpoints' prefixes, and say how
        its tokens split (atomically: concurrent requests see each other whole)."""
        breakpoints = prompt.breakpoints
        if not breakpoints:
            return CacheUsage(prompt.tokens, 0, 0)
        chain, cumulative = prompt.chain, prompt.cumulative
        with self._lock:
            now = self.clock()
            read_at = -1
            for point in breakpoints:
                for index in range(point, max(-1, point - LOOKBACK_BLOCKS - 1), -1):
                    if index <= read_at:
                        break
                    if self._live(chain[index], now) is not None:
                        read_at = index
                        break
            read = cumulative[read_at] if read_at >= 0 else 0
            last = breakpoints[-1]
            created = 0
            if read_at < last and cumulative[last] >= self.min_tokens:
                created = cumulative[last] - read
            if read_at >= 0:
                entry = self._entries[chain[read_at]]
                self._keep(chain[read_at], entry.tokens, entry.ttl, now)
            for point in breakpoints:
                if cumulative[point] >= self.min_tokens:
                    ttl = self.ttl
                    if point in prompt.one_hour and ttl is not None:
                        ttl = max(ttl, ONE_HOUR_TTL)
                    self._keep(chain[point], cumulative[point], ttl, now)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        return CacheUsage(prompt.tokens - read - created, read, created)

    def clear(self) -> None:
        """Forget everything (a cold cache)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
