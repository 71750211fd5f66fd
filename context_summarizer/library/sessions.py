"""Holding a session while it is compacted: a lock per session within the process, and a lease
in the store across every process sharing it, so one compaction runs at a time per session."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
import weakref

from ..core.errors import StoreUnavailable
from ..stores import Store

LEASE_TTL_S = 30.0
"""How long a compaction lease lasts unless renewed (the default of ``ContextManager``'s
``lease_ttl_s``); a holder renews it every third of that."""
LEASE_POLL_S = (0.05, 1.0)
"""First and longest wait between attempts to take a lease another process holds."""


class Lease:
    """A session's compaction lease in the store, renewed on a thread while held.

    One compaction per session at a time holds across processes sharing a store: a process that
    dies holding it blocks the session for at most ``ttl_s``. ``token`` is the fencing token the
    store granted, which every checkpoint written under the lease carries: if this holder
    stalls past ``ttl_s`` (a GC pause, a stopped process) and another takes the lease, the
    store refuses this one's write (``LeaseLost``).
    """

    def __init__(self, store: Store, namespace: str, session: str, ttl_s: float = LEASE_TTL_S):
        self.store = store
        self.key = (namespace, session)
        self.owner = uuid.uuid4().hex
        self.ttl_s = ttl_s
        self.token: int | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._abandoned = False
        self._guard = threading.Lock()

    def take(self) -> bool:
        """Take the lease if nobody else holds it; start renewing it when taken (unless it was
        ``abandon``ed meanwhile: then it is given up again, and False)."""
        token = self.store.try_lease(*self.key, self.owner, self.ttl_s)
        if token is None:
            return False
        with self._guard:
            if not self._abandoned:
                self.token = token
                self._renewer = threading.Thread(
                    target=self._renew, name="summarizer-lease", daemon=True
                )
                self._renewer.start()
                return True
        with contextlib.suppress(ValueError, StoreUnavailable):
            self.store.release_lease(*self.key, self.owner)
        return False

    def abandon(self) -> None:
        """Give the lease up whether or not a ``take`` still runs on another thread (its caller
        was cancelled): one that ends later gives up what it took at once."""
        with self._guard:
            self._abandoned = True
        self.release()

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                token = self.store.try_lease(*self.key, self.owner, self.ttl_s)
            except ValueError:  # the store was closed
                return
            except StoreUnavailable:  # try again next time; the lease may expire meanwhile
                continue
            if token != self.token:
                # It expired meanwhile (and maybe another owner took it): this holder's writes
                # carry the old token and are refused once a newer one exists.
                return

    def release(self) -> None:
        """Stop renewing and give the lease up."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        # A closed or unreachable store: the lease expires on its own.
        with contextlib.suppress(ValueError, StoreUnavailable):
            self.store.release_lease(*self.key, self.owner)


class _SessionLock:
    """A thread lock that a weak mapping can hold (``threading.Lock`` takes no weak refs)."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


class SessionLocks:
    """The lock of each session (a thread lock and an asyncio lock), held weakly: a session's
    lock lives while some request holds or awaits it, so a process that sees many sessions never
    keeps one lock per session forever."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[tuple[str, str], _SessionLock] = (
            weakref.WeakValueDictionary()
        )
        self._alocks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._guard = threading.Lock()

    def __len__(self) -> int:
        """How many sessions have a lock now (held, or awaited by some request)."""
        with self._guard:
            return len(self._locks) + len(self._alocks)

    def thread_lock(self, namespace: str, session: str) -> _SessionLock:
        """The session's lock for threads."""
        with self._guard:
            lock = self._locks.get((namespace, session))
            if lock is None:
                lock = self._locks[(namespace, session)] = _SessionLock()
            return lock

    def task_lock(self, namespace: str, session: str) -> asyncio.Lock:
        """The session's lock for asyncio tasks."""
        with self._guard:
            lock = self._alocks.get((namespace, session))
            if lock is None:
                lock = self._alocks[(namespace, session)] = asyncio.Lock()
            return lock
