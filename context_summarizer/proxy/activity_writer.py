"""``ActivityWriter``: the activity log written in batches on one thread.

A request only queues its record (no store lock, no disk sync on any request's path); the
thread writes what queues within ``interval`` seconds of the first, in one transaction. The
same thread runs the other store writes a request defers past its answer (``defer``: the usage
observation that calibrates the shared counts). The queue is bounded: past ``capacity`` items
an item is dropped and counted, never waited for. Closing flushes what is queued.

Queueing is an append to a deque: only the first item of a batch wakes the thread (a request
that woke it twice, through a condition, made the event loop hand the interpreter lock to it
and back at each of its answers).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from ..core.activity import Recording, RequestRecord
from ..core.summary_records import SummaryRecord
from ..stores import ActivityLog

logger = logging.getLogger("context_summarizer.proxy")

Summaries = Callable[[], list[SummaryRecord]]
"""Builds a compaction's summary records, redacted (run on the writer's thread)."""
Item = tuple[RequestRecord, Callable[[], Recording] | None, Summaries | None]
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
        self.capacity = capacity
        self.on_drop = on_drop
        self._items: deque[Item | Deferred | threading.Event | object] = deque()
        self._wake = threading.Event()
        """Set: something is queued (only the first item of a batch sets it: ``is_set`` is a
        read, ``set`` takes the event's lock and notifies)."""
        self._hurry = threading.Event()
        """Set: someone waits (a flush, the close): write without gathering."""
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._warned = False

    def submit(
        self,
        record: RequestRecord,
        recording: Callable[[], Recording] | None,
        summaries: Summaries | None = None,
    ) -> None:
        """Queue one request's record (and, with recording on, how to build its recording and
        its compaction's summary records)."""
        self._put((record, recording, summaries))

    def defer(self, write: Deferred) -> None:
        """Queue a store write that need not happen before the answer is sent (it logs its own
        failures; one that raises is logged here, once)."""
        self._put(write)

    def _put(self, item: Item | Deferred) -> None:
        self._ensure_started()
        if len(self._items) >= self.capacity:
            if self.on_drop is not None:
                self.on_drop()
            return
        self._items.append(item)
        if not self._wake.is_set():
            self._wake.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is written (False: not within ``timeout``)."""
        if self._thread is None:
            return True
        written = threading.Event()
        self._urge(written)  # past the capacity too: it is the caller's to wait
        return written.wait(timeout)

    def close(self, timeout: float = 10.0) -> None:
        """Write what is queued, then stop the thread."""
        thread = self._thread
        if thread is None:
            return
        self._urge(_STOP)
        thread.join(timeout)
        self._thread = None

    def _urge(self, marker: threading.Event | object) -> None:
        """Queue ``marker`` and have the thread write up to it at once."""
        self._items.append(marker)
        self._hurry.set()
        self._wake.set()

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
        while True:
            self._wake.wait()
            # Gather what comes within the interval: one transaction for a burst of requests,
            # not one (and its disk sync) per request.
            self._hurry.wait(self.interval)
            # Cleared before draining: an item queued from here on sets them again.
            self._hurry.clear()
            self._wake.clear()
            if self._drain():
                return

    def _drain(self) -> bool:
        """Write everything queued, in batches, answering flushes in order; True once the
        close was met (what was queued before it is written)."""
        items: list[Item | Deferred] = []
        stopping = False
        while True:
            try:
                item = self._items.popleft()
            except IndexError:
                break
            if item is _STOP:
                stopping = True
            elif isinstance(item, threading.Event):
                self._write(items)
                items = []
                item.set()
            else:
                items.append(item)  # type: ignore[arg-type]
                if len(items) >= self.batch:
                    self._write(items)
                    items = []
        self._write(items)
        return stopping

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
                self.log.log_requests([record for record, _, _ in records])
            for _, recording, summaries in records:
                if recording is not None:
                    self.log.record_conversation(recording())
                if summaries is not None:
                    self.log.record_summaries(summaries())
        except Exception as exc:  # the answers are sent: lost log lines must not be errors
            if not self._warned:
                self._warned = True
                logger.warning("could not write the activity log: %s", type(exc).__name__)
