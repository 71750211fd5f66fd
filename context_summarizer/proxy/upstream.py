"""``Upstream``: where the proxy's requests go and how they are sent.

One object per running proxy: the route table (each model's upstream, key and context manager),
the HTTP client its connection pool belongs to, the headers a forwarded request carries (the
client's, its credential replaced by a route's key, this proxy's hop in ``Via``), and what a
failure to reach the upstream becomes for the client. Every path that talks to an upstream (the
managed exchange, summary calls, counting, the passthrough) goes through it; nothing else holds
an HTTP client.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any

import httpx2
import openai

from ..core.results import SummarizeCall, SummaryOutcome
from ..library.upstream import AsyncOpenAISummaryClient
from .errors import ProxyError
from .headers import request_headers
from .metrics import UpstreamErrors
from .model_routes import ModelRoute, RouteTable

logger = logging.getLogger("context_summarizer.proxy")

# Headers of the client's request that a summary call does not reuse: the SDK sets its own.
_NOT_FOR_SUMMARY = ("content-type", "accept", "accept-encoding", "user-agent")


class Upstream:
    """The proxy's upstreams: routes, the shared HTTP client, forwarded headers, failures."""

    def __init__(
        self,
        routes: RouteTable,
        errors: UpstreamErrors,
        *,
        counted: Callable[[], None] = lambda: None,
        timeout: float,
        transport: httpx2.AsyncBaseTransport | None = None,
    ) -> None:
        self.routes = routes
        self.errors = errors
        """``summarizer_upstream_errors_total``, counted where an upstream fails."""
        self.counted = counted
        """Counts a prompt the upstream counted for the proxy (``upstream_count``)."""
        self.timeout = timeout
        self._transport = transport
        self.custom_transport = transport is not None
        """Whether the transport was replaced (the lane, which has its own, is then off)."""
        self._http: httpx2.AsyncClient | None = None
        self.hop_name = f"summarizer-{secrets.token_hex(8)}"
        """This proxy's name in the ``Via`` header of everything it forwards (random per
        instance): a request arriving with it has come round a loop."""
        self.count_tokens_missing: set[str] = set()
        """The upstreams (base URLs) that answered that they have no ``/messages/count_tokens``."""

    async def open(self) -> None:
        """Open the connection pool (on the serving event loop)."""
        # Idle connections are dropped before uvicorn's 5 s (vLLM, llama.cpp's Python server,
        # LiteLLM) closes them, or a request sent at that moment meets "Server disconnected".
        limits = httpx2.Limits(
            max_connections=1000, max_keepalive_connections=200, keepalive_expiry=4.0
        )
        self._http = httpx2.AsyncClient(
            timeout=httpx2.Timeout(self.timeout, connect=30.0),
            limits=limits,
            transport=self._transport,
            follow_redirects=False,
            # Shared by every client: an upstream's Set-Cookie must never reach another client.
            cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        )

    async def close(self) -> None:
        """Close the connection pool."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    @property
    def http(self) -> httpx2.AsyncClient:
        """The shared HTTP client."""
        if self._http is None:
            raise RuntimeError("the proxy is not started (its lifespan has not run)")
        return self._http

    @property
    def default(self) -> ModelRoute:
        """The top-level route: models without a ``[[models]]`` entry of their own."""
        return self.routes.default

    def route_for(self, model: object) -> ModelRoute:
        """The route of a request naming ``model`` (see ``RouteTable.route_for``)."""
        return self.routes.route_for(model)

    def forward_headers(
        self,
        headers: Any,
        *,
        drop: tuple[str, ...] = (),
        key_header: str = "authorization",
        route: ModelRoute | None = None,
    ) -> list[tuple[str, str]]:
        """The client's headers as sent to ``route``'s upstream (the top-level one by default):
        the credential replaced when the route has a key (sent as ``key_header``, the API's own:
        ``authorization`` as a bearer token, ``x-api-key``, ``x-goog-api-key``), this proxy's
        hop added to ``Via``."""
        key = (route or self.routes.default).api_key
        return request_headers(
            headers.items(),
            upstream_api_key=key.get_secret_value() if key is not None else None,
            drop=drop,
            via=f"1.1 {self.hop_name}",
            key_header=key_header,
        )

    def failure(self, exc: httpx2.TransportError, route: ModelRoute | None = None) -> ProxyError:
        """The 504 (timeout) or 502 (anything else) for an upstream that gave no answer."""
        host = (route or self.routes.default).host
        if isinstance(exc, httpx2.TimeoutException):
            self.errors.labels("timeout").inc()
            return ProxyError(
                504,
                f"The upstream {host} did not answer in time.",
                type="upstream_error",
                code="upstream_timeout",
            )
        self.errors.labels("unreachable").inc()
        return ProxyError(
            502,
            f"Could not reach the upstream {host}: {type(exc).__name__}.",
            type="upstream_error",
            code="upstream_unreachable",
        )

    def chat_summarizer(
        self, headers: Mapping[str, str], route: ModelRoute | None = None
    ) -> Callable[[SummarizeCall], Any]:
        """Performs summary calls as chat completions against ``route``'s upstream (the
        top-level one by default) with the same credentials as the client's request (or the
        route's key)."""
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
