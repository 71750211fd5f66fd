"""The prefix-chain cache that makes each request cost what is new, not the whole history.

A bounded LRU, thread-safe; losing it costs only time, never correctness, since every cached
value is recomputable from the messages. (Token counts are cached by the counters themselves.)
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
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

    def digests_and_chain(
        self,
        messages: Sequence[Message],
        *,
        check: Callable[[int], object] | None = None,
    ) -> tuple[list[str], list[str]]:
        """Per-message digests and the prefix chain of ``messages``.

        ``check(start)`` is called before anything is cached, with the length of the prefix this
        cache already knows (and so already checked): a validator can skip that prefix, and a
        conversation that fails it is never remembered.
        """
        if not messages:
            if check is not None:
                check(0)
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
            known = len(entry.messages)
            if known <= len(messages) and entry.messages == list(messages[:known]):
                shared = known  # the usual case, an append-only conversation: one C-level compare
            limit = min(known, len(messages))
            while shared < limit and (
                entry.messages[shared] is messages[shared]
                or entry.messages[shared] == messages[shared]
            ):
                shared += 1
        if check is not None:
            check(shared)
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
