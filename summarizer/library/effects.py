"""The performers the engine's drivers use: summary calls to the model, storage to the store
(in a worker thread for async callers, so a slow store never stalls the event loop); and, for
``settle`` (``library.settling``), the session's lock and lease, waits, and drafts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from ..core.effects import Effect
from ..core.errors import ConfigurationError
from ..core.results import SummarizeCall, SummaryOutcome
from ..stores import Store
from ..stores.effects import perform_store
from .sessions import Lease, SessionLocks
from .settling import (
    AdoptedDraft,
    AwaitDraft,
    LockSession,
    PendingDraft,
    ReleaseLease,
    SettlingEffect,
    Sleep,
    StartDraft,
    TakeLease,
    UnlockSession,
)

if TYPE_CHECKING:  # ahead.py runs its drafts with the performers below
    from .ahead import Drafts

SyncSummarizer = Callable[[SummarizeCall], SummaryOutcome]
AsyncSummarizer = Callable[[SummarizeCall], Awaitable[SummaryOutcome]]


class Performer:
    """Performs effects for ``drive_sync``: summary calls with ``summarize``, the rest against
    ``store`` (checkpoints saved under ``lease``'s fencing token once one is taken)."""

    def __init__(self, store: Store, summarize: SyncSummarizer | None) -> None:
        self.store = store
        self.summarize = summarize
        self.lease: Lease | None = None

    def __call__(self, effect: Effect) -> Any:
        """The answer to ``effect``."""
        if isinstance(effect, SummarizeCall):
            if self.summarize is None:
                raise ConfigurationError(
                    "a compaction is needed but no synchronous client was given for summary "
                    "calls: pass client=openai.OpenAI(...) (or use aprepare with an AsyncOpenAI "
                    "client)"
                )
            return self.summarize(effect)
        return perform_store(self.store, effect, fence=_fence(self.lease))


class AsyncPerformer:
    """Performs effects for ``drive_async``: summary calls with ``summarize``, storage in a
    worker thread (checkpoints saved under ``lease``'s fencing token once one is taken)."""

    def __init__(self, store: Store, summarize: AsyncSummarizer | None) -> None:
        self.store = store
        self.summarize = summarize
        self.lease: Lease | None = None

    async def __call__(self, effect: Effect) -> Any:
        """The answer to ``effect``."""
        if isinstance(effect, SummarizeCall):
            if self.summarize is None:
                raise ConfigurationError(
                    "a compaction is needed but no async client was given for summary calls: "
                    "pass client=openai.AsyncOpenAI(...)"
                )
            return await self.summarize(effect)
        fence = _fence(self.lease)
        return await asyncio.to_thread(perform_store, self.store, effect, fence=fence)


class SettlingPerformer(Performer):
    """``Performer`` for ``settle``: also the session's lock (a thread lock of ``locks``), its
    lease, waits (``time.sleep``) and ``drafts``, the manager's drafts made ahead of time (on a
    worker thread, with ``summarize``)."""

    def __init__(
        self,
        store: Store,
        summarize: SyncSummarizer | None,
        *,
        drafts: Drafts,
        locks: SessionLocks,
    ) -> None:
        super().__init__(store, summarize)
        self.drafts = drafts
        self.locks = locks
        # The session's lock while held (``locks`` keeps it weakly: it must be kept alive here).
        self._held = ExitStack()

    def __call__(self, effect: Effect | SettlingEffect) -> Any:
        """The answer to ``effect``."""
        match effect:
            case TakeLease(namespace, session, ttl_s):
                taking = Lease(self.store, namespace, session, ttl_s)
                if not taking.take():
                    return None
                self.lease = taking
                return taking.token
            case ReleaseLease():
                lease, self.lease = self.lease, None
                if lease is not None:
                    lease.release()
            case Sleep(seconds):
                time.sleep(seconds)
            case LockSession(namespace, session):
                self._held.enter_context(self.locks.thread_lock(namespace, session))
            case UnlockSession():
                self._held.close()
            case StartDraft(located):
                self.drafts.start(located, self.summarize)
            case PendingDraft(located):
                return self.drafts.pending(located)
            case AwaitDraft(job):
                return self.drafts.wait(job)
            case AdoptedDraft(result):
                return self.drafts.adopted(result)
            case _:
                return super().__call__(effect)
        return None


class AsyncSettlingPerformer(AsyncPerformer):
    """``AsyncPerformer`` for ``settle``: also the session's lock (an asyncio lock of
    ``locks``), its lease (taken and released in a worker thread; one taken by an attempt whose
    caller was cancelled meanwhile is given up), waits (``asyncio.sleep``)
    and ``drafts`` (as tasks on the running event loop, with ``summarize``)."""

    def __init__(
        self,
        store: Store,
        summarize: AsyncSummarizer | None,
        *,
        drafts: Drafts,
        locks: SessionLocks,
    ) -> None:
        super().__init__(store, summarize)
        self.drafts = drafts
        self.locks = locks
        self._held: asyncio.Lock | None = None

    async def __call__(self, effect: Effect | SettlingEffect) -> Any:
        """The answer to ``effect``."""
        match effect:
            case TakeLease(namespace, session, ttl_s):
                taking = Lease(self.store, namespace, session, ttl_s)
                try:
                    taken = await asyncio.to_thread(taking.take)
                except asyncio.CancelledError:  # the attempt runs on in its thread
                    await asyncio.to_thread(taking.abandon)
                    raise
                if not taken:
                    return None
                self.lease = taking
                return taking.token
            case ReleaseLease():
                lease, self.lease = self.lease, None
                if lease is not None:
                    await asyncio.to_thread(lease.release)
            case Sleep(seconds):
                await asyncio.sleep(seconds)
            case LockSession(namespace, session):
                lock = self.locks.task_lock(namespace, session)
                await lock.acquire()
                self._held = lock
            case UnlockSession():
                held, self._held = self._held, None
                if held is not None:
                    held.release()
            case StartDraft(located):
                self.drafts.astart(located, self.summarize)
            case PendingDraft(located):
                return self.drafts.pending(located)
            case AwaitDraft(job):
                return await self.drafts.await_(job)
            case AdoptedDraft(result):
                return self.drafts.adopted(result)
            case _:
                return await super().__call__(effect)
        return None


def _fence(lease: Lease | None) -> int | None:
    return lease.token if lease is not None else None
