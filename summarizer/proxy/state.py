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
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx2
import openai
from starlette.responses import Response

from ..core.results import CompactionEvent, SummarizeCall, SummaryOutcome
from ..library.manager import ContextManager
from ..library.upstream import AsyncOpenAISummaryClient
from ..stores import ActivityLog, SecretKeeper, Store, open_store
from ..stores.memory import MemoryStore
from ..stores.sqlite import SQLiteStore
from .activity_writer import ActivityWriter
from .errors import error_response
from .fast_path import FastPath
from .headers import request_headers
from .metrics import ProxyMetrics
from .model_routes import ModelRoute, RouteTable
from .settings import Settings
from .wire_pool import WirePool

logger = logging.getLogger("summarizer.proxy")

LOCATING_THREADS = 4
"""Lane requests located at once (each one's locating is short; more wait their turn)."""

_KEY_HEADERS = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}
"""The header a route's upstream key goes in, by API (any other: ``Authorization: Bearer``)."""

# Headers of the client's request that a summary call does not reuse: the SDK sets its own.
_NOT_FOR_SUMMARY = ("content-type", "accept", "accept-encoding", "user-agent")


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
        self.routes = RouteTable(
            settings,
            lambda config: ContextManager(
                store=self.store,
                on_compaction=self._record_compaction,
                config=config,
                lease_ttl_s=settings.lease_ttl,
                on_ahead=lambda outcome: self.metrics.ahead.labels(outcome).inc(),
            ),
        )
        self.context = self.routes.default.context
        """The context manager of models without a ``[[models]]`` entry of their own."""
        self.activity: ActivityWriter | None = (
            ActivityWriter(self.store, on_drop=self.metrics.activity_dropped.inc)
            if isinstance(self.store, ActivityLog)
            else None
        )
        """Writes the activity log in batches off the request path (None: the store keeps none)."""
        self._transport = transport
        self.custom_transport = transport is not None
        """Whether the upstream transport was replaced (the lane, which has its own, is off)."""
        self._http: httpx2.AsyncClient | None = None
        self.wire_pool: WirePool | None = None
        """The lane's upstream connections (``proxy.lane``), open while the proxy serves."""
        self.locator: ThreadPoolExecutor | None = None
        """The lane's locating threads (``ChatContext.begin_locating``), with ``wire_pool``."""
        self.upstream_host = self.routes.default.host
        """The top-level upstream, as named in messages (a route's own is ``route.host``)."""
        self.hop_name = f"summarizer-{secrets.token_hex(8)}"
        """This proxy's name in the ``Via`` header of everything it forwards (random per
        instance): a request arriving with it has come round a loop."""
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
        self.count_tokens_missing: set[str] = set()
        """The upstreams (base URLs) that answered that they have no ``/messages/count_tokens``."""

    # -- lifecycle ------------------------------------------------------------------------------

    async def open(self) -> None:
        """Open the upstream connection pool (on the serving event loop)."""
        timeout = httpx2.Timeout(self.settings.upstream_timeout, connect=30.0)
        # Idle connections are dropped before uvicorn's 5 s (vLLM, llama.cpp's Python server,
        # LiteLLM) closes them, or a request sent at that moment meets "Server disconnected".
        limits = httpx2.Limits(
            max_connections=1000, max_keepalive_connections=200, keepalive_expiry=4.0
        )
        self._http = httpx2.AsyncClient(
            timeout=timeout,
            limits=limits,
            transport=self._transport,
            follow_redirects=False,
            # Shared by every client: an upstream's Set-Cookie must never reach another client.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        )
        if self.fast_path is not None and self._transport is None:
            self.wire_pool = WirePool(
                connect_timeout=30.0, read_timeout=self.settings.upstream_timeout
            )
            self.locator = ThreadPoolExecutor(LOCATING_THREADS, "summarizer-locate")

    async def close(self) -> None:
        """Close the connection pool, write the queued activity, and close the store unless the
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
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        if self._owns_store:
            self.store.close()

    @property
    def http(self) -> httpx2.AsyncClient:
        """The shared upstream HTTP client."""
        if self._http is None:
            raise RuntimeError("the proxy is not started (its lifespan has not run)")
        return self._http

    # -- upstream -------------------------------------------------------------------------------

    def route_for(self, model: object) -> ModelRoute:
        """The route of a request naming ``model`` (see ``RouteTable.route_for``)."""
        return self.routes.route_for(model)

    def upstream_url(self, path: str, query: str = "", *, route: ModelRoute | None = None) -> str:
        """The upstream URL (of ``route``, else the top-level one) for the part of a request
        path after ``/v1``."""
        return (route or self.routes.default).url(path, query)

    def forward_headers(
        self,
        headers: Any,
        *,
        drop: tuple[str, ...] = (),
        api: str = "openai",
        route: ModelRoute | None = None,
    ) -> list[tuple[str, str]]:
        """The client's headers as sent to ``route``'s upstream (the top-level one by default):
        the credential replaced when the route has a key (as ``x-api-key`` for the Anthropic
        API, ``x-goog-api-key`` for Gemini's, else ``Authorization``), this proxy's hop added to
        ``Via``."""
        key = (route or self.routes.default).api_key
        return request_headers(
            headers.items(),
            upstream_api_key=key.get_secret_value() if key is not None else None,
            drop=drop,
            via=f"1.1 {self.hop_name}",
            key_header=_KEY_HEADERS.get(api, "authorization"),
        )

    def upstream_failure(
        self, exc: httpx2.TransportError, route: ModelRoute | None = None
    ) -> Response:
        """The 504 (timeout) or 502 (anything else) for an upstream that gave no answer."""
        host = (route or self.routes.default).host
        if isinstance(exc, httpx2.TimeoutException):
            self.metrics.upstream_errors.labels("timeout").inc()
            return error_response(
                504,
                f"The upstream {host} did not answer in time.",
                type="upstream_error",
                code="upstream_timeout",
            )
        self.metrics.upstream_errors.labels("unreachable").inc()
        return error_response(
            502,
            f"Could not reach the upstream {host}: {type(exc).__name__}.",
            type="upstream_error",
            code="upstream_unreachable",
        )

    def summarizer_for(
        self, headers: Mapping[str, str], route: ModelRoute | None = None
    ) -> Callable[[SummarizeCall], Any]:
        """Performs summary calls against ``route``'s upstream (the top-level one by default)
        with the same credentials as the client's request (or the route's key)."""
        route = route or self.routes.default
        forwarded = {
            name: value
            for name, value in self.forward_headers(headers, drop=_NOT_FOR_SUMMARY, route=route)
            # The client SDK's own instructions (e.g. raw-response mode) are not ours.
            if not name.startswith("x-stainless-")
        }
        client = openai.AsyncOpenAI(
            base_url=route.upstream,
            # The SDK insists on a key; the client's own credential header (forwarded below)
            # takes precedence over the Authorization it derives from this placeholder.
            api_key="summarizer-forwarded-credential",
            default_headers=forwarded,
            http_client=self.http,
            max_retries=0,
        )
        perform = AsyncOpenAISummaryClient(client)

        async def call(request: SummarizeCall) -> SummaryOutcome:
            return await perform(request)

        return call

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
