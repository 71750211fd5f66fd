"""The performers the engine's drivers use: summary calls to the model, storage to the store
(in a worker thread for async callers, so a slow store never stalls the event loop). Those of
``settle``'s own effects (the session's lock and lease, waits, drafts) are in
``settling_effects``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from ..core.effects import Effect
from ..core.errors import ConfigurationError
from ..core.results import SummarizeCall, SummaryOutcome
from ..stores import Store
from ..stores.effects import perform_store
from .sessions import Lease

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


def _fence(lease: Lease | None) -> int | None:
    return lease.token if lease is not None else None
