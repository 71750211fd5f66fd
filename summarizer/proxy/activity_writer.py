"""``ActivityWriter``: the activity log written in batches on one thread.

A request only queues its record (no store lock, no disk sync on any request's path); the
thread writes what queues within ``interval`` seconds of the first, in one transaction. The
same thread runs the other store writes a request defers past its answer (``defer``: the usage
observation that calibrates the shared counts). The queue is bounded: past ``capacity`` items
an item is dropped and counted, never waited for. Closing flushes what is queued.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from ..core.activity import Recording, RequestRecord
from ..stores import ActivityLog

logger = logging.getLogger("summarizer.proxy")

Item = tuple[RequestRecord, Callable[[], Recording] | None]
Deferred = Callable[[], None]
_STOP = object()


class ActivityWriter:
    """Queues records and writes them to ``log`` in batches (see the module docstring)."""

    def __init__(
        self,
        log: ActivityLog,
        *,
        interval: float = 0.05,
        capacity: int = 10_000,
        batch: int = 500,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.log = log
        self.interval = interval
        self.batch = batch
        self.on_drop = on_drop
        self._queue: queue.Queue[Item | Deferred | threading.Event | object] = queue.Queue(
            maxsize=capacity
        )
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._warned = False

    def submit(self, record: RequestRecord, recording: Callable[[], Recording] | None) -> None:
        """Queue one request's record (and, with recording on, how to build its recording)."""
        self._put((record, recording))

    def _put(self, item: Item | Deferred) -> None:
        self._ensure_started()
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            if self.on_drop is not None:
                self.on_drop()

    def defer(self, write: Deferred) -> None:
        """Queue a store write that need not happen before the answer is sent (it logs its own
        failures; one that raises is logged here, once)."""
        self._put(write)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is written (False: not within ``timeout``)."""
        if self._thread is None:
            return True
        written = threading.Event()
        self._queue.put(written)  # past the capacity too: it is the caller's to wait
        return written.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the thread."""
        thread = self._thread
        if thread is None:
            return
        self._queue.put(_STOP)
        thread.join(timeout)
        self._thread = None

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="summarizer-activity", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        stopping = False
        while True:
            items: list[Item | Deferred] = []
            flushes: list[threading.Event] = []
            try:
                first = self._queue.get(timeout=self.interval)
            except queue.Empty:
                if stopping:
                    return
                continue
            if first is _STOP:
                stopping = True
            elif isinstance(first, threading.Event):
                flushes.append(first)
            else:
                items.append(first)  # type: ignore[arg-type]
            # Gather what comes within the interval: one transaction for a burst of requests,
            # not one (and its disk sync) per request. Once stopping, take what is queued.
            deadline = time.monotonic() + (0.0 if stopping or flushes else self.interval)
            while len(items) < self.batch and not flushes:
                try:
                    wait = max(0.0, deadline - time.monotonic())
                    more = self._queue.get(timeout=wait) if wait else self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is _STOP:
                    stopping, deadline = True, 0.0
                elif isinstance(more, threading.Event):
                    flushes.append(more)  # written at once: someone waits for it
                else:
                    items.append(more)  # type: ignore[arg-type]
            self._write(items)
            for flushed in flushes:
                flushed.set()
            if stopping and self._queue.empty():
                return

    def _write(self, items: list[Item | Deferred]) -> None:
        records = [item for item in items if isinstance(item, tuple)]
        for item in items:
            if not isinstance(item, tuple):
                try:
                    item()
                except Exception:  # the answer is sent: a lost observation is a log line
                    logger.exception("a deferred store write failed")
        try:
            if records:
                self.log.log_requests([record for record, _ in records])
            for _, recording in records:
                if recording is not None:
                    self.log.record_conversation(recording())
        except Exception as exc:  # the answers are sent: lost log lines must not be errors
            if not self._warned:
                self._warned = True
                logger.warning("could not write the activity log: %s", type(exc).__name__)
