"""The prefix-chain cache that makes each request cost what is new, not the whole history.

A bounded LRU, thread-safe; losing it costs only time, never correctness, since every cached
value is recomputable from the messages. (Token counts are cached by the counters themselves.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .messages import Message, chain_step, message_digest


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
