"""What one running proxy holds: settings, store, routes (each model's upstream, key and context
manager), HTTP client, metrics.

Built by ``create_app`` (never at import). The HTTP client is opened by the app's lifespan so its
connection pool belongs to the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx2

from ..core.results import CompactionEvent
from ..library.manager import ContextManager
from ..stores import ActivityLog, SecretKeeper, Store, open_store
from ..stores.memory import MemoryStore
from ..stores.sqlite import SQLiteStore
from .activity_writer import ActivityWriter
from .fast_path import FastPath
from .metrics import ProxyMetrics
from .model_routes import RouteTable
from .settings import Settings
from .upstream import Upstream
from .wire_pool import WirePool

logger = logging.getLogger("summarizer.proxy")

LOCATING_THREADS = 4
"""Lane requests located at once (each one's locating is short; more wait their turn)."""


class ProxyState:
    """The proxy's long-lived objects, shared by every request."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        on_compaction: Callable[[CompactionEvent], None] | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = ProxyMetrics()
        self._on_compaction = on_compaction
        self._owns_store = store is None
        self.store = store if store is not None else open_store(settings.store_spec())
        self.compaction_key = (
            self.store.compaction_secret()
            if isinstance(self.store, SecretKeeper)
            else secrets.token_bytes(32)
        )
        """The secret compaction items are signed with, read once: the store's, which every
        replica sharing it reads alike (a store that keeps none: this process's own)."""
        routes = RouteTable(
            settings,
            lambda config: ContextManager(
                store=self.store,
                on_compaction=self._record_compaction,
                config=config,
                lease_ttl_s=settings.lease_ttl,
                on_ahead=lambda outcome: self.metrics.ahead.labels(outcome).inc(),
            ),
        )
        self.upstream = Upstream(
            routes,
            self.metrics.upstream_errors,
            counted=self.metrics.upstream_counts.inc,
            timeout=settings.upstream_timeout,
            transport=transport,
        )
        """Where requests go: routes, the HTTP client, forwarded headers, failures."""
        self.context = routes.default.context
        """The context manager of models without a ``[[models]]`` entry of their own."""
        self.activity: ActivityWriter | None = (
            ActivityWriter(self.store, on_drop=self.metrics.activity_dropped.inc)
            if isinstance(self.store, ActivityLog)
            else None
        )
        """Writes the activity log in batches off the request path (None: the store keeps none)."""
        self.wire_pool: WirePool | None = None
        """The lane's upstream connections (``proxy.lane``), open while the proxy serves."""
        self.locator: ThreadPoolExecutor | None = None
        """The lane's locating threads (``ChatContext.begin_locating``), with ``wire_pool``."""
        self.fast_path = (
            FastPath(count=lambda outcome: self.metrics.fast_path.labels(outcome).inc())
            if settings.fast_path
            else None
        )
        """Recent chat bodies, to read the next ones from their new bytes (None: off)."""
        self.compactions = 0
        """Compactions this proxy has made: a request located before the latest one may find a
        checkpoint now (the lane sends no body on an older settling, ``fast_path.Settled``)."""
        self._compactions_lock = threading.Lock()
        self.store_is_local = isinstance(self.store, (SQLiteStore, MemoryStore))
        """Whether only this process writes checkpoints (no fleet sharing the store)."""
        self.warned_models: set[str] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the upstream connection pools (on the serving event loop)."""
        await self.upstream.open()
        if self.fast_path is not None and not self.upstream.custom_transport:
            self.wire_pool = WirePool(
                connect_timeout=30.0, read_timeout=self.settings.upstream_timeout
            )
            self.locator = ThreadPoolExecutor(LOCATING_THREADS, "summarizer-locate")

    async def close(self) -> None:
        """Close the connection pools, write the queued activity, and close the store unless the
        caller passed it in."""
        if self.activity is not None:
            await asyncio.to_thread(self.activity.close)
        if self.wire_pool is not None:
            self.wire_pool.close()
            self.wire_pool = None
        if self.locator is not None:
            # Locating queued still runs: a lane answer in flight takes it up.
            self.locator.shutdown(wait=False)
            self.locator = None
        await self.upstream.close()
        if self._owns_store:
            self.store.close()

    # -- events ---------------------------------------------------------------------------------

    def _record_compaction(self, event: CompactionEvent) -> None:
        with self._compactions_lock:
            self.compactions += 1
        m = self.metrics
        m.compactions.labels(event.trigger, _outcome(event)).inc()
        for problem in event.problems:
            m.summary_problems.labels(problem).inc()
        if event.applied:  # an abandoned compaction wrote no summary and changed nothing
            m.tokens_before.observe(event.tokens_before)
            m.tokens_after.observe(event.tokens_after)
            m.summary_latency.observe(event.latency_s)
            if event.score is not None:
                m.summary_score.observe(event.score)
            for verdict in event.verdicts:
                m.summaries.labels(verdict).inc()
        if self._on_compaction is not None:
            try:
                self._on_compaction(event)
            except Exception:  # a listener's bug must not fail the request
                logger.exception("on_compaction callback failed")


def _outcome(event: CompactionEvent) -> str:
    """The ``outcome`` label of ``summarizer_compactions_total`` for ``event``."""
    if not event.applied:
        return "abandoned"
    if event.failure:
        return "fallback"
    if event.ledger_only:
        return "ledger"
    return "masked" if event.masked and not event.verdicts else "summary"
