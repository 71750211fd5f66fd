"""``Locator``: the threads the lane locates its requests in (``ChatContext.begin_locating``)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
A = TypeVar("A")

LOCATING_THREADS = 4
"""Lane requests located at once (each one's locating is short; more wait their turn)."""


class Locator:
    """A pool of locating threads, open while the proxy serves with the lane: a request sent
    upstream before it is located is located in one of them while the upstream works."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None

    def open(self) -> None:
        """Start taking work."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(LOCATING_THREADS, "summarizer-locate")

    def close(self) -> None:
        """Stop taking work; what is queued still runs (a lane answer in flight takes it up)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def submit(self, work: Callable[[A], T], arg: A) -> Future[T]:
        """``work(arg)`` in a locating thread."""
        if self._pool is None:
            raise RuntimeError("the locator is not open (the lane runs only while serving)")
        return self._pool.submit(work, arg)
