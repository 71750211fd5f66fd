"""``ProxyServices``: what one running proxy is made of, built once by ``create_app`` (never at
import), each service handed only to the code that uses it.

- ``settings``, the ``store`` and its ``compaction_key``;
- ``upstream`` (routes, HTTP client, forwarded headers, failures) and ``metrics``;
- ``exchange``: what a managed request's exchange uses (``ExchangeServices``);
- the lane's: ``fast_path`` (recent chat bodies) and ``wire_pool`` (its upstream connections).

Its ``open`` and ``close`` are the app's lifespan: the HTTP client and the lane's pools open on
the serving event loop, so their connections belong to it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable

import httpx2

from ..core.results import CompactionEvent
from ..library.manager import ContextManager
from ..stores import ActivityLog, SecretKeeper, Store, open_store
from ..stores.memory import MemoryStore
from ..stores.sqlite import SQLiteStore
from .activity_writer import ActivityWriter
from .compaction_tally import CompactionTally
from .exchange_services import ExchangeServices
from .fast_path import FastPath
from .lane.services import LaneServices
from .locator import Locator
from .metrics import ProxyMetrics
from .model_routes import RouteTable
from .settings import Settings
from .upstream import Upstream
from .wire_pool import WirePool


class ProxyServices:
    """The proxy's long-lived services, built from ``settings``."""

    def __init__(
        self,
        settings: Settings,
        *,
        store: Store | None = None,
        on_compaction: Callable[[CompactionEvent], None] | None = None,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics = ProxyMetrics()
        self._owns_store = store is None
        self.store = store if store is not None else open_store(settings.store_spec())
        self.compaction_key = (
            self.store.compaction_secret()
            if isinstance(self.store, SecretKeeper)
            else secrets.token_bytes(32)
        )
        """The secret compaction items are signed with, read once: the store's, which every
        replica sharing it reads alike (a store that keeps none: this process's own)."""
        tally = CompactionTally(
            metrics,
            local=isinstance(self.store, (SQLiteStore, MemoryStore)),
            listener=on_compaction,
        )
        routes = RouteTable(
            settings,
            lambda config: ContextManager(
                store=self.store,
                on_compaction=tally.record,
                config=config,
                lease_ttl_s=settings.lease_ttl,
                on_ahead=lambda outcome: metrics.ahead.labels(outcome).inc(),
            ),
        )
        self.upstream = Upstream(
            routes,
            metrics.upstream_errors,
            counted=metrics.upstream_counts.inc,
            timeout=settings.upstream_timeout,
            transport=transport,
        )
        self.context = routes.default.context
        """The context manager of models without a ``[[models]]`` entry of their own."""
        self.exchange = ExchangeServices(
            upstream=self.upstream,
            metrics=metrics,
            tally=tally,
            locator=Locator(),
            activity=(
                ActivityWriter(self.store, on_drop=metrics.activity_dropped.inc)
                if isinstance(self.store, ActivityLog)
                else None
            ),
            record=settings.record,
            keepalive_interval=settings.keepalive_interval,
        )
        self.fast_path = (
            FastPath(count=lambda outcome: metrics.fast_path.labels(outcome).inc())
            if settings.fast_path
            else None
        )
        """Recent chat bodies, to read the next ones from their new bytes (None: off)."""
        self.wire_pool: WirePool | None = (
            WirePool(connect_timeout=30.0, read_timeout=settings.upstream_timeout)
            if self.fast_path is not None and not self.upstream.custom_transport
            else None
        )
        """The lane's upstream connections (``proxy.lane``; None: the lane cannot run)."""

    @property
    def lane(self) -> LaneServices | None:
        """What the lane uses (None: it cannot run: the fast path is off, or the upstream
        transport is a custom one)."""
        if self.fast_path is None or self.wire_pool is None:
            return None
        return LaneServices(self.exchange, self.fast_path, self.wire_pool, self.settings)

    @property
    def activity(self) -> ActivityWriter | None:
        """The activity log's writer (None: the store keeps none)."""
        return self.exchange.activity

    async def open(self) -> None:
        """Open the upstream connection pools (on the serving event loop)."""
        await self.upstream.open()
        if self.wire_pool is not None:
            self.wire_pool.open()
            self.exchange.locator.open()

    async def close(self) -> None:
        """Close the connection pools, write the queued activity, and close the store unless the
        caller passed it in."""
        for manager in self.upstream.routes.managers:
            await manager.drafts.aclose()
        if self.activity is not None:
            await asyncio.to_thread(self.activity.close)
        if self.wire_pool is not None:
            self.wire_pool.close()
        self.exchange.locator.close()
        await self.upstream.close()
        if self._owns_store:
            self.store.close()
