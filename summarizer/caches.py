"""Process-local caches that make each request cost what is new, not the whole history.

Both are bounded LRUs and thread-safe; losing them costs only time, never correctness, since
every cached value is recomputable from the messages.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .messages import Message, chain_step, message_digest
from .tokens import TokenCounter


@dataclass
class _ChainEntry:
    messages: list[Message]
    digests: list[str]
    chain: list[str]


class ChainCache:
    """Digests and prefix hashes of recent conversations, extended incrementally.

    A conversation that extends one seen before reuses its hashes, so each request costs time in
    proportion to what is new (plus a C-speed equality check of the shared prefix).
    """

    def __init__(self, size: int = 256) -> None:
        self._entries: OrderedDict[str, _ChainEntry] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def digests_and_chain(self, messages: Sequence[Message]) -> tuple[list[str], list[str]]:
        """Per-message digests and the prefix chain of ``messages``."""
        if not messages:
            return [], []
        # Keyed by the first two messages (system prompt and task, typically), so sessions that
        # share a system prompt do not evict each other.
        first = ":".join(message_digest(m) for m in messages[:2])
        with self._lock:
            entry = self._entries.get(first)
            if entry is not None:
                self._entries.move_to_end(first)
        shared = 0
        if entry is not None:
            limit = min(len(entry.messages), len(messages))
            while shared < limit and (
                entry.messages[shared] is messages[shared]
                or entry.messages[shared] == messages[shared]
            ):
                shared += 1
        digests = list(entry.digests[:shared]) if entry else []
        chain = list(entry.chain[:shared]) if entry else []
        current = chain[-1] if chain else ""
        for message in messages[shared:]:
            digest = message_digest(message)
            digests.append(digest)
            current = chain_step(current, digest)
            chain.append(current)
        with self._lock:
            self._entries[first] = _ChainEntry(list(messages), digests, chain)
            self._entries.move_to_end(first)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return digests, chain


class TokenCache:
    """Token counts of messages by (encoding, digest); bounded LRU, thread-safe."""

    def __init__(self, size: int = 200_000) -> None:
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def count(self, counter: TokenCounter, message: Mapping[str, Any], digest: str) -> int:
        """Tokens of ``message``, counted once per digest."""
        key = (counter.name, digest)
        with self._lock:
            cached = self._counts.get(key)
            if cached is not None:
                self._counts.move_to_end(key)
                return cached
        tokens = counter.count_message(message)
        with self._lock:
            self._counts[key] = tokens
            if len(self._counts) > self._size:
                self._counts.popitem(last=False)
        return tokens
