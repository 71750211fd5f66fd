"""Compactions drafted ahead of time (``CompactionConfig.prepare_ratio``): the background jobs.

One job per session at a time, at most ``max_running`` running in the process; each drafts the
compaction of one exact conversation (``ContextEngine.ahead``), saving nothing. A request that
crosses the trigger adopts the draft if its conversation still begins with the drafted one and
stands on the same checkpoint; otherwise the draft is dropped (a fork, an edit, another
process's compaction). A job is also cancelled as soon as a request of its session shows the
conversation has moved elsewhere. Jobs live in memory only: after a restart the next request
over the prepare threshold simply drafts again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.engine import ContextEngine
from ..core.located import Draft, Located, begins_with
from ..core.results import PrepareResult
from ..stores import Store
from .drive import drive_async, drive_sync
from .effects import AsyncPerformer, AsyncSummarizer, Performer, SyncSummarizer

logger = logging.getLogger("summarizer")

Outcome = str
"""What became of a job: ``started``, ``adopted``, ``stale``, ``failed``, ``busy`` (not started:
too many running), ``deferred`` (a request over the trigger went out as it was, since it fit,
while its draft was still being written), ``waited`` (one that did not fit waited for it)."""


@dataclass
class AheadJob:
    """One session's draft in the making (or made)."""

    key: tuple[str, str]
    basis_count: int
    basis_hash: str
    parent_id: str | None
    started: float = field(default_factory=time.monotonic)
    future: asyncio.Future[Draft | None] | concurrent.futures.Future[Draft | None] | None = None

    def matches(self, located: Located) -> bool:
        """Whether ``located`` continues the drafted conversation, on the same checkpoint."""
        return located.checkpoint_id == self.parent_id and begins_with(
            located.chain, self.basis_count, self.basis_hash
        )

    def done(self) -> bool:
        """Whether the draft is written (or failed)."""
        return self.future is not None and self.future.done()

    def draft(self) -> Draft | None:
        """The finished draft, or None when it failed or was cancelled."""
        future = self.future
        if future is None or not future.done() or future.cancelled():
            return None
        if future.exception() is not None:
            return None
        return future.result()

    def cancel(self) -> None:
        """Stop the job (a thread already summarizing finishes, and its draft is dropped)."""
        if self.future is not None:
            self.future.cancel()


class AheadJobs:
    """The process's ahead-of-time jobs, by (namespace, session); thread-safe."""

    def __init__(
        self,
        *,
        max_running: int = 4,
        max_kept: int = 256,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.max_running = max_running
        self.max_kept = max_kept
        self.on_outcome = on_outcome
        self._jobs: OrderedDict[tuple[str, str], AheadJob] = OrderedDict()
        self._lock = threading.Lock()

    def note(self, outcome: Outcome) -> None:
        """Count ``outcome`` (never fails the caller)."""
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception:
                logger.exception("on_outcome callback failed")

    def current(self, located: Located) -> AheadJob | None:
        """The session's job for this conversation; a job of the session that ``located`` no
        longer continues is cancelled and dropped (``stale``)."""
        key = (located.namespace, located.session)
        with self._lock:
            job = self._jobs.get(key)
            if job is None:
                return None
            if job.matches(located):
                return job
            del self._jobs[key]
        job.cancel()
        self.note("stale")
        return None

    def claim(self, located: Located) -> AheadJob | None:
        """A new job for ``located`` (the caller starts it), or None when the session has one or
        too many are running (``busy``)."""
        key = (located.namespace, located.session)
        with self._lock:
            if key in self._jobs:
                return None
            running = sum(1 for job in self._jobs.values() if not job.done())
            if running >= self.max_running:
                busy = True
            else:
                busy = False
                job = AheadJob(
                    key=key,
                    basis_count=len(located.chain),
                    basis_hash=located.chain[-1],
                    parent_id=located.checkpoint_id,
                )
                self._jobs[key] = job
                while len(self._jobs) > self.max_kept:
                    _, dropped = self._jobs.popitem(last=False)
                    dropped.cancel()
        if busy:
            self.note("busy")
            return None
        self.note("started")
        return job

    def forget(self, job: AheadJob) -> None:
        """Drop ``job`` (adopted, failed or stale), if it is still the session's."""
        with self._lock:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]

    def cancel_all(self) -> None:
        """Cancel and drop every job (the manager is closing)."""
        with self._lock:
            jobs = list(self._jobs.values())
            self._jobs.clear()
        for job in jobs:
            job.cancel()


class Drafts:
    """A ``ContextManager``'s ahead-of-time compactions: when to start one, running it (on a
    worker thread for sync callers, as a task for async ones), and handing a finished draft to
    the request that crosses the trigger."""

    def __init__(
        self,
        engine: ContextEngine,
        store: Store,
        *,
        on_outcome: Callable[[Outcome], None] | None = None,
        max_running: int = 4,
    ) -> None:
        self.engine = engine
        self.store = store
        self.jobs = AheadJobs(max_running=max_running, on_outcome=on_outcome)
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def should_draft(self, located: Located) -> bool:
        """Whether a draft should start for ``located`` now: over the prepare threshold and still
        fitting the window as it is, and its session drafts nothing for this conversation (a
        draft for one it no longer continues is dropped here)."""
        if located.budget.prepare_tokens is None:
            return False
        if self.jobs.current(located) is not None:
            return False  # already drafting this conversation
        return self.engine.worth_drafting(located)

    def start(self, located: Located, summarizer: SyncSummarizer | None) -> None:
        """Draft ``located``'s compaction on a worker thread, if it should be."""
        if summarizer is None or not self.should_draft(located):
            return
        job = self.jobs.claim(located)
        if job is None:
            return
        if self._pool is None:
            self._pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.jobs.max_running, thread_name_prefix="summarizer-ahead"
            )
        perform = Performer(self.store, summarizer)
        job.future = self._pool.submit(drive_sync, self.engine.ahead(located), perform)

    def astart(self, located: Located, summarizer: AsyncSummarizer | None) -> None:
        """``start`` for async callers: the draft is a task on the running event loop."""
        if summarizer is None or not self.should_draft(located):
            return
        job = self.jobs.claim(located)
        if job is None:
            return
        perform = AsyncPerformer(self.store, summarizer)
        job.future = asyncio.ensure_future(
            drive_async(self.engine.ahead(located), perform, offload=True)
        )
        job.future.add_done_callback(_retrieved)

    def pending(self, located: Located) -> AheadJob | PrepareResult | None:
        """For a request over its trigger (a draft was just started for it if it had none and
        should): its session's job for this conversation, to wait for; or, while that draft is
        still being written and the request fits the window as it is, the request unchanged (it
        goes out without waiting: ``deferred``); or None (no draft: compact as usual)."""
        job = self.jobs.current(located)
        if job is None:
            return None
        if not job.done() and located.calibrated_tokens <= located.budget.usable:
            self.jobs.note("deferred")
            return self.engine.unchanged(located)
        return job

    def wait(self, job: AheadJob) -> tuple[Draft | None, float]:
        """The job's draft once written (None if it failed), and the seconds waited for it."""
        began = time.monotonic()
        if isinstance(job.future, concurrent.futures.Future):
            concurrent.futures.wait([job.future])
        return self._finished(job, time.monotonic() - began)

    async def await_(self, job: AheadJob) -> tuple[Draft | None, float]:
        """``wait`` for async callers."""
        began = time.monotonic()
        future = job.future
        if isinstance(future, concurrent.futures.Future):
            await asyncio.wait([asyncio.wrap_future(future)])
        elif future is not None:
            await asyncio.wait([future])
        return self._finished(job, time.monotonic() - began)

    def _finished(self, job: AheadJob, waited: float) -> tuple[Draft | None, float]:
        self.jobs.forget(job)
        draft = job.draft()
        if draft is None:
            self.jobs.note("failed")
        elif waited > 0.001:
            self.jobs.note("waited")
        return draft, waited

    def adopted(self, result: PrepareResult | None) -> PrepareResult | None:
        """``result`` of ``ContextEngine.adopt`` (counted ``adopted``), or None for a stale
        draft (counted ``stale``: the request is compacted as usual). An adopted draft that
        leaves the request over its trigger still stands (it fits the window): the next
        request drafts again."""
        if result is None:
            self.jobs.note("stale")
            return None
        self.jobs.note("adopted")
        return result

    def close(self) -> None:
        """Cancel every draft under way."""
        self.jobs.cancel_all()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def _retrieved(future: asyncio.Future[Draft | None]) -> None:
    """Read a finished draft task's failure (a draft nobody adopts would otherwise be logged as
    an exception never retrieved); the failure itself is counted when the draft is used."""
    if not future.cancelled() and (exc := future.exception()) is not None:
        logger.debug("an ahead-of-time draft failed: %s", type(exc).__name__)
