"""Library mode: ``ContextManager`` for hand-written agent loops, ``wrap`` for openai clients.

``ContextManager.prepare`` takes the raw history an agent keeps and returns what to send; the
agent never has to drop anything itself. ``wrap(client)`` applies the same per call to
``client.chat.completions.create`` and delegates everything else to the wrapped client.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from os import PathLike
from typing import Any, NamedTuple

import openai

from ..core.config import CompactionConfig
from ..core.engine import Located, drive_async, drive_sync
from ..core.errors import ConfigurationError
from ..core.messages import Message
from ..core.results import CompactionEvent, PrepareResult, SummarizeCall, SummaryOutcome, Trigger
from ..core.tokens import Calibration
from ..stores import Store, open_store
from .engines import engine_for
from .upstream import AsyncOpenAISummaryClient, OpenAISummaryClient

SyncSummarizer = Callable[[SummarizeCall], SummaryOutcome]
AsyncSummarizer = Callable[[SummarizeCall], Awaitable[SummaryOutcome]]

LEASE_TTL_S = 30.0
"""How long a compaction lease lasts unless renewed; a holder renews it every third of that."""
LEASE_POLL_S = (0.05, 1.0)
"""First and longest wait between attempts to take a lease another process holds."""


class _Lease:
    """A session's compaction lease in the store, renewed on a thread while held.

    One compaction per session at a time holds across processes sharing a store: a process that
    dies holding it blocks the session for at most ``LEASE_TTL_S``.
    """

    def __init__(self, store: Store, located: Located) -> None:
        self.store = store
        self.key = (located.namespace, located.session)
        self.owner = uuid.uuid4().hex
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    def take(self) -> bool:
        """Take the lease if nobody else holds it; start renewing it when taken."""
        if not self.store.try_lease(*self.key, self.owner, LEASE_TTL_S):
            return False
        self._renewer = threading.Thread(target=self._renew, name="summarizer-lease", daemon=True)
        self._renewer.start()
        return True

    def _renew(self) -> None:
        while not self._stop.wait(LEASE_TTL_S / 3):
            try:
                self.store.try_lease(*self.key, self.owner, LEASE_TTL_S)
            except ValueError:  # the store was closed
                return

    def release(self) -> None:
        """Stop renewing and give the lease up."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
        with contextlib.suppress(ValueError):  # a closed store: the lease expires on its own
            self.store.release_lease(*self.key, self.owner)


class _Args(NamedTuple):
    messages: Sequence[Message]
    model: str
    tools: Sequence[Mapping[str, Any]] | None
    session: str | None
    request: Mapping[str, Any] | None
    namespace: str | None = None


class _SessionLock:
    """A thread lock that a weak mapping can hold (``threading.Lock`` takes no weak refs)."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()


class ContextManager:
    """Keeps one agent's requests inside the context window.

    ``client`` (an ``openai.OpenAI`` or ``openai.AsyncOpenAI``) is used for summary calls;
    ``store`` is a ``Store``, a SQLite path, or None for an in-memory store; every other keyword
    is a ``CompactionConfig`` field.
    """

    def __init__(
        self,
        *,
        client: openai.OpenAI | openai.AsyncOpenAI | None = None,
        store: Store | str | PathLike[str] | None = None,
        on_compaction: Callable[[CompactionEvent], None] | None = None,
        summarizer: SyncSummarizer | None = None,
        config: CompactionConfig | None = None,
        **fields: Any,
    ) -> None:
        """The configuration is ``config`` or its fields as keywords, not both; an invalid one
        raises ``ConfigurationError``."""
        if config is None:
            config = CompactionConfig(**fields)
        elif not isinstance(config, CompactionConfig):
            raise ConfigurationError(f"config must be a CompactionConfig, not {type(config)!r}")
        elif fields:
            raise ConfigurationError(
                f"pass config= or its fields as keywords, not both (got config= and "
                f"{', '.join(sorted(fields))})"
            )
        self.config = config
        self.store: Store = (
            store
            if store is not None and not isinstance(store, (str, PathLike))
            else open_store(store)
        )
        self.engine = engine_for(
            self.config, self.store, calibration=Calibration(), on_compaction=on_compaction
        )
        self._sync: SyncSummarizer | None = summarizer
        self._async: AsyncOpenAISummaryClient | None = None
        if isinstance(client, openai.AsyncOpenAI):
            self._async = AsyncOpenAISummaryClient(client)
        elif isinstance(client, openai.OpenAI) and summarizer is None:
            self._sync = OpenAISummaryClient(client)
        # Weak: a session's lock lives while some request holds or awaits it (an agent platform
        # or the proxy sees many sessions and must not keep one lock per session forever).
        self._locks: weakref.WeakValueDictionary[tuple[str, str], _SessionLock] = (
            weakref.WeakValueDictionary()
        )
        self._alocks: weakref.WeakValueDictionary[tuple[str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )
        self._guard = threading.Lock()

    def _session_lock(self, located: Located) -> _SessionLock:
        key = (located.namespace, located.session)
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = _SessionLock()
            return lock

    def _session_alock(self, located: Located) -> asyncio.Lock:
        key = (located.namespace, located.session)
        with self._guard:
            lock = self._alocks.get(key)
            if lock is None:
                lock = self._alocks[key] = asyncio.Lock()
            return lock

    def prepare(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None = None,
        session: str | None = None,
        request: Mapping[str, Any] | None = None,
        force: Trigger | None = None,
    ) -> PrepareResult:
        """What to send for ``messages``: compacted when over the trigger (or when ``force``d).

        ``request`` is the rest of the Chat Completions body (for ``max_completion_tokens``).
        """
        args = _Args(messages, model, tools, session, request)
        located, done = self._locate(args, force)
        if done is not None:
            return done
        if self._sync is None:
            raise ConfigurationError(
                "a compaction is needed but no synchronous client was given for summary calls: "
                "pass client=openai.OpenAI(...) (or use aprepare with an AsyncOpenAI client)"
            )
        with self._session_lock(located):
            lease = _Lease(self.store, located)
            delay = LEASE_POLL_S[0]
            while True:
                # Another thread or process may have compacted this session while we waited.
                located, done = self._locate(args, force)
                if done is not None:
                    return done
                if lease.take():
                    break
                time.sleep(delay)
                delay = min(delay * 2, LEASE_POLL_S[1])
            try:
                located, done = self._locate(args, force)
                if done is not None:
                    return done
                steps = self.engine.steps(located, trigger=force or "threshold")
                return drive_sync(steps, self._sync)
            finally:
                lease.release()

    async def aprepare(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None = None,
        session: str | None = None,
        request: Mapping[str, Any] | None = None,
        force: Trigger | None = None,
        namespace: str | None = None,
        summarizer: AsyncSummarizer | None = None,
    ) -> PrepareResult:
        """The async twin of ``prepare``; summary calls go through the ``AsyncOpenAI`` client.

        ``namespace`` scopes the session (the proxy passes a hashed credential); ``summarizer``
        performs this call's summary requests instead of the client given at construction.
        """
        args = _Args(messages, model, tools, session, request, namespace)
        # Locating and compacting are CPU work (hashing, counting, planning): off the event loop.
        located, done = await asyncio.to_thread(self._locate, args, force)
        if done is not None:
            return done
        perform = summarizer or self._async
        if perform is None:
            raise ConfigurationError(
                "a compaction is needed but no async client was given for summary calls: "
                "pass client=openai.AsyncOpenAI(...)"
            )
        async with self._session_alock(located):
            lease = _Lease(self.store, located)
            delay = LEASE_POLL_S[0]
            while True:
                # Another task or process may have compacted this session while we waited.
                located, done = await asyncio.to_thread(self._locate, args, force)
                if done is not None:
                    return done
                if await asyncio.to_thread(lease.take):
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, LEASE_POLL_S[1])
            try:
                located, done = await asyncio.to_thread(self._locate, args, force)
                if done is not None:
                    return done
                steps = self.engine.steps(located, trigger=force or "threshold")
                return await drive_async(steps, perform, offload=True)
            finally:
                await asyncio.to_thread(lease.release)

    def unchanged(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None = None,
        session: str | None = None,
        request: Mapping[str, Any] | None = None,
        namespace: str | None = None,
    ) -> PrepareResult | None:
        """What to send when no compaction is needed now, else None (without waiting on locks).

        The fast path of a proxy: most requests end here, and only the others need to await a
        session lock and a summary call through ``aprepare``.
        """
        args = _Args(messages, model, tools, session, request, namespace)
        return self._locate(args, None)[1]

    def _locate(self, args: _Args, force: Trigger | None) -> tuple[Located, PrepareResult | None]:
        """Locate the request; the result too when no compaction is needed."""
        located = self.engine.locate(
            args.messages,
            model=args.model,
            tools=args.tools,
            session=args.session,
            request=args.request,
            namespace=args.namespace,
        )
        if force is None and not self.engine.needs_compaction(located):
            return located, self.engine.unchanged(located)
        return located, None

    def observe(self, result: PrepareResult, usage: Any, *, model: str) -> None:
        """Feed back a response's ``usage`` (an SDK object or a dict) for calibration.

        A ``prompt_tokens`` that is not a positive ``int`` (a string, null, an object, a bool) is
        ignored.
        """
        prompt_tokens = (
            usage.get("prompt_tokens")
            if isinstance(usage, Mapping)
            else getattr(usage, "prompt_tokens", None)
        )
        if type(prompt_tokens) is not int or prompt_tokens <= 0:
            return  # absent or not a count ("12", null, {}, true): nothing to learn from
        self.engine.observe(result, model=model, prompt_tokens=prompt_tokens)

    def close(self) -> None:
        """Close the store."""
        self.store.close()
