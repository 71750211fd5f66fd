"""The prefix-chain cache that makes each request cost what is new, not the whole history.

A bounded LRU, thread-safe; losing it costs only time, never correctness, since every cached
value is recomputable from the messages. (Token counts are cached by the counters themselves.)
It is bounded twice: by conversations, and by their total size, since an entry holds a whole
parsed conversation and a proxy may see many long ones.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .messages import Message, chain_step, digest_and_size, message_digest

DEFAULT_MAX_BYTES = 128 * 1024 * 1024
"""Default bound on the canonical JSON size of the conversations held (the parsed objects take
somewhat more memory than that)."""


@dataclass
class _ChainEntry:
    messages: list[Message]
    digests: list[str]
    chain: list[str]
    sizes: list[int]
    """``sizes[i]``: canonical JSON bytes of ``messages[: i + 1]``."""

    @property
    def size(self) -> int:
        return self.sizes[-1] if self.sizes else 0


class ChainCache:
    """Digests and prefix hashes of recent conversations, extended incrementally.

    A conversation that extends one seen before reuses its hashes, so each request costs time in
    proportion to what is new (plus a C-speed equality check of the shared prefix).
    """

    def __init__(self, size: int = 256, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self._entries: OrderedDict[str, _ChainEntry] = OrderedDict()
        self._size = size
        self._max_bytes = max_bytes
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes_held(self) -> int:
        """Canonical JSON bytes of the conversations held."""
        return self._bytes

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
            prefix = messages[:known]
            if known <= len(messages) and entry.messages == (
                prefix if isinstance(prefix, list) else list(prefix)
            ):
                shared = known  # the usual case, an append-only conversation: one C-level compare
            limit = min(known, len(messages))
            while shared < limit and (
                entry.messages[shared] is messages[shared]
                or entry.messages[shared] == messages[shared]
            ):
                shared += 1
        if check is not None:
            check(shared)
        # Slices: the entry's own lists stay as they are (earlier callers hold them).
        digests = entry.digests[:shared] if entry else []
        chain = entry.chain[:shared] if entry else []
        sizes = entry.sizes[:shared] if entry else []
        current = chain[-1] if chain else ""
        total = sizes[-1] if sizes else 0
        for message in messages[shared:]:
            digest, size = digest_and_size(message)
            digests.append(digest)
            current = chain_step(current, digest)
            chain.append(current)
            total += size
            sizes.append(total)
        with self._lock:
            replaced = self._entries.pop(first, None)
            if replaced is not None:
                self._bytes -= replaced.size
            self._entries[first] = _ChainEntry(list(messages), digests, chain, sizes)
            self._bytes += total
            # The newest conversation stays even alone over the byte bound: it is the one in use.
            while len(self._entries) > 1 and (
                len(self._entries) > self._size or self._bytes > self._max_bytes
            ):
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.size
        return digests, chain
