"""Compactions drafted ahead of time (``CompactionConfig.prepare_ratio``): the background jobs.

Each job drafts the compaction of one exact conversation (``ContextEngine.ahead``), saving
nothing; at most ``max_running`` run in the process. Jobs are kept per branch of a session
(``ahead_jobs``: parallel conversations under one session name each keep their own, within small
bounds). A request that crosses the trigger adopts the draft of a conversation it begins with,
on the same checkpoint; any other draft is never used (a fork, an edit, another process's
compaction). Jobs live in memory only: after a restart the next request over the prepare
threshold simply drafts again.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from ..core.engine import ContextEngine
from ..core.located import Draft, Located
from ..core.results import PrepareResult, SummarizeCall, SummaryOutcome
from ..stores import Store
from .ahead_jobs import AheadJob, AheadJobs, Outcome
from .drive import drive_async, drive_sync
from .effects import AsyncPerformer, AsyncSummarizer, Performer, SyncSummarizer

__all__ = ["AheadJob", "AheadJobs", "Drafts", "Outcome"]

logger = logging.getLogger("summarizer")


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
        # What each session's conversation last grew between a draft and the request that
        # adopted it: the next draft aims that much lower (``ContextEngine.ahead``).
        self._growth: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._growth_lock = threading.Lock()

    def growth(self, located: Located) -> int:
        """The growth the next draft of ``located``'s session should expect before adoption."""
        with self._growth_lock:
            return self._growth.get((located.namespace, located.session), 0)

    def should_draft(self, located: Located) -> bool:
        """Whether a draft should start for ``located`` now: over the prepare threshold and still
        fitting the window as it is, and no draft of a conversation it continues, on its
        checkpoint, is kept (one it shows unusable is dropped here)."""
        if located.budget.prepare_tokens is None:
            return False
        if (job := self.jobs.current(located)) is not None:
            if not job.fruitless(located):
                return False  # already drafting this conversation
            self.jobs.forget(job)  # it found nothing to compact then: look again
            self.jobs.note("failed")
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
        perform = Performer(self.store, _noting_sync(job, summarizer))
        ahead = self.engine.ahead(located, growth=self.growth(located))
        job.future = self._pool.submit(drive_sync, ahead, perform)

    def astart(self, located: Located, summarizer: AsyncSummarizer | None) -> None:
        """``start`` for async callers: the draft is a task on the running event loop."""
        if summarizer is None or not self.should_draft(located):
            return
        job = self.jobs.claim(located)
        if job is None:
            return
        perform = AsyncPerformer(self.store, _noting_async(job, summarizer))
        ahead = self.engine.ahead(located, growth=self.growth(located))
        job.future = asyncio.ensure_future(drive_async(ahead, perform, offload=True))
        job.future.add_done_callback(_retrieved)

    def pending(self, located: Located) -> AheadJob | PrepareResult | None:
        """For a request over its trigger (a draft was just started for it if it had none and
        should): the job of a conversation it continues, to wait for; or, while that draft is
        still being written and the request fits the window as it is, the request unchanged (it
        goes out without waiting: ``deferred``); or None (no draft: compact as usual)."""
        job = self.jobs.current(located)
        if job is None:
            return None
        if not job.done() and located.calibrated_tokens <= located.budget.usable:
            self.jobs.note("deferred")
            return self.engine.unchanged(located).model_copy(
                update={"held_back": "its summary is still being written ahead of time"}
            )
        job.adopting_tokens = located.calibrated_tokens
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
        if draft is not None and job.adopting_tokens is not None:
            with self._growth_lock:
                self._growth[job.key] = max(0, job.adopting_tokens - job.basis_tokens)
                self._growth.move_to_end(job.key)
                while len(self._growth) > self.jobs.max_kept:
                    self._growth.popitem(last=False)
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

    async def aclose(self) -> None:
        """``close``, then wait for the cancelled drafts of the running event loop to end: a
        draft's step running in a worker thread ends at its next effect, and a task the loop
        still holds when it stops is reported as destroyed while pending."""
        jobs = self.jobs.cancel_all()
        loop = asyncio.get_running_loop()
        tasks = [
            job.future
            for job in jobs
            if isinstance(job.future, asyncio.Future) and job.future.get_loop() is loop
        ]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self.close()


def _noting_sync(job: AheadJob, summarizer: SyncSummarizer) -> SyncSummarizer:
    """``summarizer``, marking ``job`` as having asked the model."""

    def summarize(call: SummarizeCall) -> SummaryOutcome:
        job.asked = True
        return summarizer(call)

    return summarize


def _noting_async(job: AheadJob, summarizer: AsyncSummarizer) -> AsyncSummarizer:
    """``_noting_sync`` for async summarizers."""

    async def summarize(call: SummarizeCall) -> SummaryOutcome:
        job.asked = True
        return await summarizer(call)

    return summarize


def _retrieved(future: asyncio.Future[Draft | None]) -> None:
    """Read a finished draft task's failure (a draft nobody adopts would otherwise be logged as
    an exception never retrieved); the failure itself is counted when the draft is used."""
    if not future.cancelled() and (exc := future.exception()) is not None:
        logger.debug("an ahead-of-time draft failed: %s", type(exc).__name__)
