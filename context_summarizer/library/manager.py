"""Library mode: ``ContextManager`` for hand-written agent loops, ``wrap`` for openai clients.

``ContextManager.prepare`` takes the raw history an agent keeps and returns what to send; the
agent never has to drop anything itself. ``wrap(client)`` applies the same per call to
``client.chat.completions.create`` and delegates everything else to the wrapped client.

Every front door (``prepare``, ``wrap``, the proxy) hands the engine one ``Turn``, locates it
once (``locate``/``alocate``), and settles it with ``compact``/``acompact``: its view unchanged
when no compaction is due, else a compaction under the session's lock and lease. Both run the
one loop of ``library.settling``, each with its driver: its effects (storage, locks, leases,
waits) are performed in the caller's thread, or off the event loop for async callers.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from typing import Any

import openai

from ..core.config import CompactionConfig
from ..core.effects import Turn
from ..core.errors import ConfigurationError, StoreUnavailable
from ..core.located import Located
from ..core.messages import Message
from ..core.results import CompactionEvent, PrepareResult, Trigger
from ..core.tokens import Calibration
from ..stores import ActivityLog, Store, open_store
from ..stores.effects import perform_store
from .activity import call_record
from .ahead import Drafts
from .drive import drive_async, drive_sync
from .effects import AsyncSummarizer, SyncSummarizer
from .engines import engine_for
from .sessions import LEASE_TTL_S, SessionLocks
from .settling import Settling, off_the_loop, settle
from .settling_effects import AsyncSettlingPerformer, SettlingPerformer
from .shared_calibration import SharedCalibration
from .upstream import AsyncOpenAISummaryClient, OpenAISummaryClient

__all__ = ["AsyncSummarizer", "ContextManager", "SyncSummarizer"]

logger = logging.getLogger("summarizer")

CompactionHook = Callable[[CompactionEvent], None]


class ContextManager:
    """Keeps one agent's requests inside the context window.

    ``client`` (an ``openai.OpenAI`` or ``openai.AsyncOpenAI``) is used for summary calls;
    ``store`` is a ``Store``, a SQLite path, a ``redis://`` URL, or None for an in-memory store;
    ``config`` is a ``CompactionConfig``, or its fields are given as keywords. ``lease_ttl_s``:
    how long a session's compaction lease outlives a holder that stopped renewing it (a
    process that died mid-compaction blocks its session that long).

    Calibration is shared through the store: each observation is folded into the store's sums,
    and each request reads them again when this process's copy is older than
    ``CALIBRATION_REFRESH_S``, so every process sharing a store estimates alike.
    """

    def __init__(
        self,
        *,
        client: openai.OpenAI | openai.AsyncOpenAI | None = None,
        store: Store | str | PathLike[str] | None = None,
        on_compaction: CompactionHook | None = None,
        summarizer: SyncSummarizer | None = None,
        config: CompactionConfig | None = None,
        lease_ttl_s: float = LEASE_TTL_S,
        on_ahead: Callable[[str], None] | None = None,
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
        _check_hooks(client=client, store=store, on_compaction=on_compaction, summarizer=summarizer)
        if isinstance(lease_ttl_s, bool) or not (
            isinstance(lease_ttl_s, (int, float)) and math.isfinite(lease_ttl_s) and lease_ttl_s > 0
        ):
            raise ConfigurationError(
                f"lease_ttl_s must be a positive number of seconds, got {lease_ttl_s!r}",
                problems=(("lease_ttl_s", "must be a positive number of seconds"),),
            )
        self.lease_ttl_s = float(lease_ttl_s)
        self.config = config
        self.store: Store = store if isinstance(store, Store) else open_store(store)
        self.engine = engine_for(
            self.config, calibration=Calibration(), on_compaction=on_compaction
        )
        self._sync: SyncSummarizer | None = summarizer
        self._async: AsyncOpenAISummaryClient | None = None
        if isinstance(client, openai.AsyncOpenAI):
            self._async = AsyncOpenAISummaryClient(client)
        elif isinstance(client, openai.OpenAI) and summarizer is None:
            self._sync = OpenAISummaryClient(client)
        self._locks = SessionLocks()
        self.shared_calibration = SharedCalibration(self.store, self.engine.calibration)
        self.drafts = Drafts(self.engine, self.store, on_outcome=on_ahead)
        """Compactions drafted ahead of time (``prepare_ratio``; see ``library.ahead``)."""

    # -- the whole turn -----------------------------------------------------------------------

    def prepare(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None = None,
        session: str | None = None,
        request: Mapping[str, Any] | None = None,
        force: Trigger | None = None,
        namespace: str | None = None,
        summarizer: SyncSummarizer | None = None,
        instructions: str | None = None,
    ) -> PrepareResult:
        """What to send for ``messages``: compacted when over the trigger (or when ``force``d:
        ``force="manual"`` compacts now whatever the size, as if the trigger were crossed at
        the present size, down to the target in the same proportion).

        ``request`` is the rest of the Chat Completions body (for ``max_completion_tokens``);
        ``namespace`` scopes the session (the proxy passes a hashed credential); ``summarizer``
        performs this call's summary requests instead of the client given at construction;
        ``instructions`` are added to the summary requests of a compaction made now (after the
        configured ``summary_instructions``).
        """
        turn = _turn(messages, model, tools, session, request, namespace, force, instructions)
        located = self.locate(turn)
        if not self.config.compact:
            return self.engine.unchanged(located)
        return self.compact(located, force=force, summarizer=summarizer)

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
        instructions: str | None = None,
    ) -> PrepareResult:
        """The async twin of ``prepare``; summary calls go through the ``AsyncOpenAI`` client
        (or ``summarizer``)."""
        turn = _turn(messages, model, tools, session, request, namespace, force, instructions)
        located = await self.alocate(turn)
        if not self.config.compact:
            return self.engine.unchanged(located)
        return await self.acompact(located, force=force, summarizer=summarizer)

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
        """What to send when no compaction is due now, else None (never waits on a lock)."""
        turn = _turn(messages, model, tools, session, request, namespace)
        return self.ready(self.locate(turn))

    # -- the steps of a turn ------------------------------------------------------------------

    def locate(self, turn: Turn) -> Located:
        """``turn`` resolved against the stored checkpoints: its view and its size (estimated
        with the store's shared calibration)."""
        self.shared_calibration.refresh(turn.namespace, turn.model)
        return drive_sync(self.engine.locate(turn), self._store_effect)

    async def alocate(self, turn: Turn) -> Located:
        """``locate`` in a worker thread: hashing and counting are CPU work, and the store may
        block (on a lock, a disk, a network), so the event loop never waits on either."""
        return await asyncio.to_thread(self.locate, turn)

    def ready(self, located: Located) -> PrepareResult | None:
        """The result for ``located`` when no compaction is due, else None."""
        if self.engine.needs_compaction(located):
            return None
        return self.engine.unchanged(located)

    def compact(
        self,
        located: Located,
        *,
        force: Trigger | None = None,
        summarizer: SyncSummarizer | None = None,
    ) -> PrepareResult:
        """What to send for ``located``: its view when no compaction is due (and none is
        ``force``d), else a compaction, one per session at a time across threads and processes
        sharing the store (``library.settling``)."""
        perform = SettlingPerformer(
            self.store, summarizer or self._sync, drafts=self.drafts, locks=self._locks
        )
        return drive_sync(self._settle(located, force), perform)

    async def acompact(
        self,
        located: Located,
        *,
        force: Trigger | None = None,
        summarizer: AsyncSummarizer | None = None,
    ) -> PrepareResult:
        """The async twin of ``compact``: storage and the engine's CPU work run in worker
        threads, summary calls on the event loop."""
        perform = AsyncSettlingPerformer(
            self.store, summarizer or self._async, drafts=self.drafts, locks=self._locks
        )
        return await drive_async(self._settle(located, force), perform, offload=off_the_loop)

    def _settle(self, located: Located, force: Trigger | None) -> Settling[PrepareResult]:
        return settle(self.engine, located, force=force, lease_ttl_s=self.lease_ttl_s)

    # -- ahead of time (``prepare_ratio``) ---------------------------------------------------

    def should_draft(self, located: Located) -> bool:
        """Whether a compaction of ``located`` should be drafted ahead of time now."""
        return self.drafts.should_draft(located)

    def aahead(self, located: Located, *, summarizer: AsyncSummarizer | None = None) -> None:
        """Start drafting ``located``'s compaction as a task on the running event loop when it
        is over the prepare threshold and its session drafts nothing yet (the sync callers'
        drafts start in ``compact``; see ``library.ahead``)."""
        self.drafts.astart(located, summarizer or self._async)

    # -- feedback -----------------------------------------------------------------------------

    def observe(self, result: PrepareResult, usage: Any, *, model: str, log: bool = True) -> None:
        """Feed back a response's ``usage`` (an SDK object or a dict) for calibration.

        A ``prompt_tokens`` that is not a positive ``int`` (a string, null, an object, a bool) is
        ignored. The observation is folded into the store's shared calibration too; a store
        that cannot be reached loses it (logged), never the caller's answer. ``log``: the call
        is also noted in the store's activity log (``summarizer sessions`` lists it).
        """
        self.observe_later(result, usage, model=model, log=log)()

    async def aobserve(
        self, result: PrepareResult, usage: Any, *, model: str, log: bool = True
    ) -> None:
        """``observe`` for async callers: the store writes run in a worker thread."""
        await asyncio.to_thread(self.observe_later(result, usage, model=model, log=log))

    def observe_later(
        self, result: PrepareResult, usage: Any, *, model: str, log: bool = False
    ) -> Callable[[], None]:
        """``observe`` in two halves: this session's calibration now, and the returned call,
        which writes the observation to the store (for a caller that runs it off its critical
        path; a store that cannot be reached loses it, logged). ``log``: as ``observe``'s (the
        proxy logs its own, fuller records)."""
        prompt_tokens = _prompt_tokens(usage)
        record = self.engine.observe(result, model=model, prompt_tokens=prompt_tokens)
        self.shared_calibration.expect(result.namespace, model)
        activity = self.store if log and isinstance(self.store, ActivityLog) else None

        def write() -> None:
            try:
                self.shared_calibration.share(result, model, prompt_tokens)
                if record is not None:
                    perform_store(self.store, record)
                if activity is not None:
                    called = call_record(result, usage, model=model, prompt_tokens=prompt_tokens)
                    activity.log_request(called)
            except StoreUnavailable as exc:
                logger.warning("usage not recorded in the store: %s", exc)

        return write

    def close(self) -> None:
        """Cancel drafts under way and close the store."""
        self.drafts.close()
        self.store.close()

    def _store_effect(self, effect: Any) -> Any:
        return perform_store(self.store, effect)


def _check_hooks(*, client: Any, store: Any, on_compaction: Any, summarizer: Any) -> None:
    """``ConfigurationError`` naming each keyword that is not what it must be."""
    problems = []
    if client is not None and not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        problems.append(
            ("client", f"must be an openai.OpenAI or AsyncOpenAI, not {type(client)!r}")
        )
    if store is not None and not isinstance(store, (Store, str, PathLike)):
        problems.append(("store", f"must be a Store, a SQLite path or None, not {type(store)!r}"))
    for name, hook in (("on_compaction", on_compaction), ("summarizer", summarizer)):
        if hook is not None and not callable(hook):
            problems.append((name, f"must be callable, not {type(hook)!r}"))
    if problems:
        listed = "; ".join(f"{field}: {problem}" for field, problem in problems)
        raise ConfigurationError(
            f"invalid ContextManager arguments: {listed}", problems=tuple(problems)
        )


def _turn(
    messages: Sequence[Message],
    model: str,
    tools: Sequence[Mapping[str, Any]] | None,
    session: str | None,
    request: Mapping[str, Any] | None,
    namespace: str | None,
    force: Trigger | None = None,
    instructions: str | None = None,
) -> Turn:
    return Turn(
        messages=messages,
        model=model,
        tools=tools,
        session=session,
        request=request or {},
        namespace=namespace or "",
        compact_now=force == "manual",
        instructions=instructions,
    )


def _prompt_tokens(usage: Any) -> int | None:
    """``usage.prompt_tokens`` when it is a positive ``int`` (never a bool, string or null)."""
    prompt_tokens = (
        usage.get("prompt_tokens")
        if isinstance(usage, Mapping)
        else getattr(usage, "prompt_tokens", None)
    )
    if type(prompt_tokens) is not int or prompt_tokens <= 0:
        return None
    return prompt_tokens
