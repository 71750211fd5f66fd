"""The performers of ``settle``'s own effects (``library.settling``): the session's lock and
lease, the waits between attempts, and the drafts made ahead of time; every other effect as
``effects.Performer`` and ``AsyncPerformer`` perform it."""

from __future__ import annotations

import asyncio
import time
from contextlib import ExitStack
from typing import Any

from ..core.effects import Effect
from ..stores import Store
from .ahead import Drafts
from .effects import AsyncPerformer, AsyncSummarizer, Performer, SyncSummarizer
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
