"""Recall results waiting for their conversation's next request (``HeldRecalls``), for the
proxy and ``wrap``.

When the model calls the recall tool beside the agent's own tools, the agent's calls go to the
caller and the recall calls are taken out; their results are held here, by the credential's
namespace and the ids of the agent's calls, and every later request of that conversation that
carries the turn gets the recall exchange put back into it (``RecallCodec.spliced``) before the
engine sees it, so the model reads the results and the conversation stays the same from request
to request. Held in memory, per process: a restart, or another process of a fleet, goes on
without them (the turn then reads as the caller sent it).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from ..core.recall_codec import Held

MAX_HELD = 4096
MAX_HELD_CHARS = 64 * 1024 * 1024


class HeldRecalls:
    """Held recall results per namespace, bounded by count and characters (least recently
    used dropped first); thread-safe."""

    def __init__(self, *, max_held: int = MAX_HELD, max_chars: int = MAX_HELD_CHARS) -> None:
        self._max_held = max_held
        self._max_chars = max_chars
        self._held: OrderedDict[tuple[str, tuple[str, ...]], Held] = OrderedDict()
        self._per_namespace: dict[str, int] = {}
        self._chars = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._held)

    def put(self, namespace: str, held: Held) -> None:
        """Hold ``held`` for ``namespace``'s later requests."""
        key = (namespace, held.key)
        with self._lock:
            if key in self._held:
                self._drop(key)
            self._held[key] = held
            self._chars += held.size
            self._per_namespace[namespace] = self._per_namespace.get(namespace, 0) + 1
            while self._held and (
                len(self._held) > self._max_held or self._chars > self._max_chars
            ):
                self._drop(next(iter(self._held)))

    def finder(self, namespace: str) -> Callable[[tuple[str, ...]], Held | None] | None:
        """What ``RecallCodec.spliced`` looks held turns up with, for ``namespace`` (None when
        it holds nothing, which costs a request no walk of its messages)."""
        if not self._per_namespace.get(namespace):
            return None

        def find(key: tuple[str, ...]) -> Held | None:
            with self._lock:
                held = self._held.get((namespace, key))
                if held is not None:
                    self._held.move_to_end((namespace, key))
                return held

        return find

    def _drop(self, key: tuple[str, tuple[str, ...]]) -> None:
        held = self._held.pop(key)
        self._chars -= held.size
        left = self._per_namespace[key[0]] - 1
        if left:
            self._per_namespace[key[0]] = left
        else:
            del self._per_namespace[key[0]]
