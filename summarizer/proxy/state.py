"""What one running proxy holds: settings, store, context manager, HTTP client, metrics.

Built by ``create_app`` (never at import). The HTTP client is opened by the app's lifespan so its
connection pool belongs to the server's event loop.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai
from starlette.responses import Response

from ..core.results import CompactionEvent, SummarizeCall, SummaryOutcome
from ..library.manager import ContextManager
from ..library.upstream import AsyncOpenAISummaryClient
from ..stores import Store, open_store
from .errors import error_response
from .fast_path import FastPath
from .headers import request_headers
from .metrics import ProxyMetrics
from .settings import Settings

logger = logging.getLogger("summarizer.proxy")

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
        self.store = store if store is not None else open_store(settings.db_path())
        self.context = ContextManager(
            store=self.store,
            on_compaction=self._record_compaction,
            config=settings.compaction,
        )
        self._transport = transport
        self._http: httpx2.AsyncClient | None = None
        self.upstream_host = _display_host(settings.upstream)
        self.hop_name = f"summarizer-{secrets.token_hex(8)}"
        """This proxy's name in the ``Via`` header of everything it forwards (random per
        instance): a request arriving with it has come round a loop."""
        self.fast_path = (
            FastPath(count=lambda outcome: self.metrics.fast_path.labels(outcome).inc())
            if settings.fast_path
            else None
        )
        """Recent chat bodies, to read the next ones from their new bytes (None: off)."""
        self.warned_models: set[str] = set()
        self.count_tokens_missing = False
        """Whether the upstream answered that it has no ``/messages/count_tokens``."""

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

    async def close(self) -> None:
        """Close the connection pool, and the store unless the caller passed it in."""
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

    def upstream_url(self, path: str, query: str = "") -> str:
        """The upstream URL for the part of a request path after ``/v1``."""
        return self.settings.upstream + path + (f"?{query}" if query else "")

    def forward_headers(
        self, headers: Any, *, drop: tuple[str, ...] = (), api: str = "openai"
    ) -> list[tuple[str, str]]:
        """The client's headers as sent upstream (credential replaced when a key is set: as
        ``x-api-key`` for the Anthropic API, else ``Authorization``; this proxy's hop added to
        ``Via``)."""
        key = self.settings.upstream_api_key
        return request_headers(
            headers.items(),
            upstream_api_key=key.get_secret_value() if key is not None else None,
            drop=drop,
            via=f"1.1 {self.hop_name}",
            key_header="x-api-key" if api == "anthropic" else "authorization",
        )

    def upstream_failure(self, exc: httpx2.TransportError) -> Response:
        """The 504 (timeout) or 502 (anything else) for an upstream that gave no answer."""
        if isinstance(exc, httpx2.TimeoutException):
            self.metrics.upstream_errors.labels("timeout").inc()
            return error_response(
                504,
                f"The upstream {self.upstream_host} did not answer in time.",
                type="upstream_error",
                code="upstream_timeout",
            )
        self.metrics.upstream_errors.labels("unreachable").inc()
        return error_response(
            502,
            f"Could not reach the upstream {self.upstream_host}: {type(exc).__name__}.",
            type="upstream_error",
            code="upstream_unreachable",
        )

    def summarizer_for(self, headers: Mapping[str, str]) -> Callable[[SummarizeCall], Any]:
        """Performs summary calls with the same credentials as the client's request."""
        forwarded = {
            name: value
            for name, value in self.forward_headers(headers, drop=_NOT_FOR_SUMMARY)
            # The client SDK's own instructions (e.g. raw-response mode) are not ours.
            if not name.startswith("x-stainless-")
        }
        client = openai.AsyncOpenAI(
            base_url=self.settings.upstream,
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
    return "masked" if event.masked and not event.verdicts else "summary"


def _display_host(url: str) -> str:
    """``scheme://host[:port]`` of ``url``: enough to name it, never its userinfo or query."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")
