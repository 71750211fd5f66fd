"""The bookkeeping of ahead-of-time drafts (``library.ahead``): which jobs exist, for which
branch of which session, within which bounds.

A job belongs to the conversation it was drafted from (its *basis*: the exact messages, and the
checkpoint they stood on), not to the session name: two conversations that share a session
(parallel attempts at one task, sub-agents, a fork; the derived session name is the system
prompt and the first user message) each keep their own job. A request uses the job whose basis
it continues on the same checkpoint (the longest, if several). A job no request continues is
never cancelled by another branch's request: it is evicted by the bounds (least recently used
first: ``per_session`` jobs in a session, ``max_kept`` in the process), or dropped as ``stale``
when a request that continues its basis shows it can never be used (the branch was compacted
another way, below or at the draft's basis).
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

from ..core.located import Draft, Located, begins_with

logger = logging.getLogger("summarizer")

Outcome = str
"""What became of a job: ``started``, ``adopted``, ``stale``, ``failed``, ``busy`` (not started:
too many running), ``deferred`` (a request over the trigger went out as it was, since it fit,
while its draft was still being written), ``waited`` (one that did not fit waited for it),
``evicted`` (dropped unused by the bounds, least recently used first)."""

SessionKey = tuple[str, str]
"""(namespace, session)."""


@dataclass
class AheadJob:
    """One branch's draft in the making (or made): the compaction of the conversation of
    ``basis_count`` messages whose prefix hashes to ``basis_hash``, on checkpoint
    ``parent_id``."""

    key: SessionKey
    basis_count: int
    basis_hash: str
    parent_id: str | None
    basis_tokens: int = 0
    """The drafted conversation's size (calibrated tokens)."""
    adopting_tokens: int | None = None
    """The size of the request that waited for it (to adopt it), once one did."""
    started: float = field(default_factory=time.monotonic)
    future: asyncio.Future[Draft | None] | concurrent.futures.Future[Draft | None] | None = None
    asked: bool = False
    """Whether it asked the model for a summary (a draft that did not found nothing to
    compact yet: the conversation grown since may have some)."""

    def continued_by(self, located: Located) -> bool:
        """Whether ``located``'s conversation begins with the drafted one (whatever its
        checkpoint)."""
        return begins_with(located.chain, self.basis_count, self.basis_hash)

    def matches(self, located: Located) -> bool:
        """Whether ``located`` continues the drafted conversation, on the same checkpoint."""
        return located.checkpoint_id == self.parent_id and self.continued_by(located)

    def superseded_by(self, located: Located) -> bool:
        """Whether ``located``, which continues the drafted conversation on another checkpoint,
        shows the draft can never be used: the checkpoint it stands on lies at or below the
        basis, so every conversation continuing the basis stands on it too. (One past the
        basis was written by a later turn of ``located``'s own branch: a sibling that left the
        basis earlier may still use the draft.)"""
        checkpoint = located.checkpoint
        return checkpoint is None or checkpoint.basis_count <= self.basis_count

    def fruitless(self, located: Located) -> bool:
        """Whether it finished finding nothing to compact, asking the model nothing, and
        ``located`` has grown since: worth drafting again (a draft whose summaries failed is
        not retried before the trigger, so that a failing upstream is not asked each turn)."""
        return (
            self.done()
            and not self.asked
            and self.draft() is None
            and len(located.chain) > self.basis_count
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
    """The process's ahead-of-time jobs, by session and, within a session, by the conversation
    each was drafted from (see the module docstring); thread-safe."""

    def __init__(
        self,
        *,
        max_running: int = 4,
        max_kept: int = 256,
        per_session: int = 4,
        on_outcome: Callable[[Outcome], None] | None = None,
    ) -> None:
        self.max_running = max_running
        self.max_kept = max_kept
        self.per_session = per_session
        self.on_outcome = on_outcome
        # Least recently used first, sessions and the jobs within each.
        self._sessions: OrderedDict[SessionKey, OrderedDict[str, AheadJob]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def note(self, outcome: Outcome) -> None:
        """Count ``outcome`` (never fails the caller)."""
        if self.on_outcome is not None:
            try:
                self.on_outcome(outcome)
            except Exception:
                logger.exception("on_outcome callback failed")

    def all(self) -> list[AheadJob]:
        """Every job kept, least recently used first."""
        with self._lock:
            return [job for jobs in self._sessions.values() for job in jobs.values()]

    def current(self, located: Located) -> AheadJob | None:
        """The job drafted from a conversation ``located`` continues on the same checkpoint
        (the longest such, if several), marked as just used. A job whose basis ``located``
        continues but which it shows can never be used is cancelled and dropped (``stale``);
        the jobs of other branches of the session are left alone."""
        key = (located.namespace, located.session)
        best: AheadJob | None = None
        stale: list[AheadJob] = []
        with self._lock:
            jobs = self._sessions.get(key)
            if jobs is None:
                return None
            for job in list(jobs.values()):
                if not job.continued_by(located):
                    continue
                if job.parent_id == located.checkpoint_id:
                    if best is None or job.basis_count > best.basis_count:
                        best = job
                elif job.superseded_by(located):
                    stale.append(job)
                    self._remove(job)
            if best is not None:
                jobs.move_to_end(best.basis_hash)
                self._sessions.move_to_end(key)
        for job in stale:
            job.cancel()
            self.note("stale")
        return best

    def claim(self, located: Located) -> AheadJob | None:
        """A new job for ``located``'s conversation (the caller starts it), or None when there
        is one already or too many are running (``busy``). The least recently used job of the
        session, or of the process, makes room when a bound is reached (``evicted``)."""
        if not located.chain:
            return None
        key = (located.namespace, located.session)
        evicted: list[AheadJob] = []
        with self._lock:
            jobs = self._sessions.get(key)
            if jobs is not None and located.chain[-1] in jobs:
                return None
            if sum(1 for job in self._iter() if not job.done()) >= self.max_running:
                busy = True
            else:
                busy = False
                job = AheadJob(
                    key=key,
                    basis_count=len(located.chain),
                    basis_hash=located.chain[-1],
                    parent_id=located.checkpoint_id,
                    basis_tokens=located.calibrated_tokens,
                )
                while jobs and len(jobs) >= self.per_session:
                    evicted.append(self._remove(next(iter(jobs.values()))))
                jobs = self._sessions.setdefault(key, OrderedDict())  # (emptied: removed)
                jobs[job.basis_hash] = job
                self._sessions.move_to_end(key)
                self._count += 1
                while self._count > self.max_kept:
                    oldest = next(iter(self._sessions.values()))
                    evicted.append(self._remove(next(iter(oldest.values()))))
        for dropped in evicted:
            dropped.cancel()
            self.note("evicted")
        if busy:
            self.note("busy")
            return None
        self.note("started")
        return job

    def forget(self, job: AheadJob) -> None:
        """Drop ``job`` (adopted, failed or stale), if it is still kept."""
        with self._lock:
            jobs = self._sessions.get(job.key)
            if jobs is not None and jobs.get(job.basis_hash) is job:
                self._remove(job)

    def cancel_all(self) -> list[AheadJob]:
        """Cancel and drop every job (the manager is closing); the jobs cancelled."""
        with self._lock:
            jobs = list(self._iter())
            self._sessions.clear()
            self._count = 0
        for job in jobs:
            job.cancel()
        return jobs

    def _iter(self) -> list[AheadJob]:
        return [job for jobs in self._sessions.values() for job in jobs.values()]

    def _remove(self, job: AheadJob) -> AheadJob:
        """Drop ``job`` (kept: the caller holds the lock)."""
        jobs = self._sessions[job.key]
        del jobs[job.basis_hash]
        self._count -= 1
        if not jobs:
            del self._sessions[job.key]
        return job
