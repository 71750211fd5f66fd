"""The counters' caches: a bounded, thread-safe LRU of digests to counts, and its statistics."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple


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
