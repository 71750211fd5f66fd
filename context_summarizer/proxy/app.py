"""``create_app(settings)``: the proxy's ASGI app (Starlette routing, plain ASGI middleware).

Routes:
- ``POST /v1/chat/completions``: context-managed (see ``chat``);
- ``POST /v1/messages``: Anthropic's Messages API, context-managed by the same exchange
  (``messages_request``); ``/v1/messages/count_tokens`` passes through;
- ``POST /v1/responses``: OpenAI's Responses API, likewise (``responses_request``); a request whose
  history the provider keeps (``previous_response_id``) passes through, with a warning header;
  ``POST /v1/responses/compact`` is answered by the proxy for any model (``responses_compact``);
- ``GET /v1/summarizer/sessions/{id}``: a session's checkpoints, to its own credential only;
  ``POST /v1/summarizer/sessions/{id}/compact``: compact it at its next request
  (``compaction_asks``);
- every other ``/v1/...`` route: passed through unchanged, streaming included (with
  ``[[models]]`` configured, a JSON body's ``model`` chooses the upstream, as on the routes above);
- ``GET /healthz`` and ``GET /metrics`` (Prometheus text);
- a WebSocket upgrade, on any path: 426, so a client falls back to HTTP (``websocket_refusal``);
- with ``Settings.ui``, ``GET /ui`` and its JSON API ``/ui/api/...`` (see ``ui``);
- the same paths without ``/v1`` (``/chat/completions``...): served as under ``/v1``
  (``routing.UnprefixedPaths``);
- anything else, with any method (Gemini's paths among them, ``/v1/models/NAME:generateContent``
  included, never forwarded): a JSON 404 in the path's API shape; a method a route above does
  not take: a JSON 405 with ``Allow`` (see ``routing``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import httpx2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core.errors import StoreUnavailable
from ..core.results import CompactionEvent
from ..stores import Store
from .access import RequestGuard, log_startup_notes, reader_namespace
from .apis import CHAT, api_for_path
from .compaction_asks import ask_compaction
from .cross_site import AllowedOriginsCors
from .endpoint import Endpoint
from .errors import ErrorShape, ProxyError, internal_error, store_unavailable
from .front_door import FrontDoor
from .front_doors import FRONT_DOORS
from .gemini_key import GeminiQueryKey
from .metrics import CONTENT_TYPE, ProxyMetrics
from .passthrough import passthrough
from .responses_compact import responses_compact
from .routing import StrictRoute, UnknownPath, UnprefixedPaths, http_error, proxy_error
from .services import ProxyServices
from .settings import Settings
from .ui import ui_routes
from .websocket_refusal import RefuseWebSockets

logger = logging.getLogger("context_summarizer.proxy")


async def healthz(request: Request) -> Response:
    """Liveness: the process serves requests."""
    return JSONResponse({"status": "ok"})


async def metrics(request: Request, *, metrics: ProxyMetrics) -> Response:
    """Prometheus metrics of this proxy."""
    return Response(metrics.render(), media_type=CONTENT_TYPE)


async def session_checkpoints(request: Request, *, store: Store, settings: Settings) -> Response:
    """A session's checkpoints (oldest first) with summaries, ledgers and scores.

    Only the credential that created a session can read it; any other gets the same 404 as for
    a session that does not exist (``reader_namespace`` applies ``sessions_api``).
    """
    namespace = reader_namespace(request, settings)
    session = request.path_params["session"]
    checkpoints = await asyncio.to_thread(store.list_session, namespace, session)
    if not checkpoints:
        raise ProxyError(
            404, f"No session {session!r} for this credential.", code="session_not_found"
        )
    return JSONResponse(
        {
            "object": "summarizer.session",
            "id": session,
            "checkpoints": [
                checkpoint.model_dump(
                    mode="json",
                    # The framed messages repeat each slot's summary and ledger; the tenant's
                    # namespace and the basis hash are the proxy's own bookkeeping.
                    exclude={
                        "namespace": True,
                        "basis_hash": True,
                        "overrides": True,
                        "slots": {"__all__": {"message"}},
                    },
                )
                for checkpoint in checkpoints
            ],
        }
    )


def _route_label(path: str) -> str:
    if path.startswith("/v1/summarizer/"):
        return "sessions"
    api = api_for_path(path)
    if api is not None:
        return api.name
    if path in ("/healthz", "/metrics"):
        return path[1:]
    if path == "/ui" or path.startswith("/ui/"):
        return "ui"
    return "other"


class RequestMetrics:
    """Plain ASGI middleware counting responses by route and status (streams untouched)."""

    def __init__(self, app: ASGIApp, metrics: ProxyMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, noting the status the response starts with."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = {"code": 500}

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting)
        finally:
            self.metrics.requests.labels(_route_label(scope["path"]), str(status["code"])).inc()


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.error(
        "unhandled error on %s %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        exc_info=exc,
    )
    return internal_error().response()


async def _store_unavailable(request: Request, exc: Exception) -> Response:
    logger.warning("answering 503 to %s %s: %s", request.method, request.url.path, exc)
    return store_unavailable().response()


def _endpoint(door: FrontDoor, proxy: ProxyServices) -> Endpoint:
    """The endpoint of ``door``'s routes (the fast path reads chat bodies only)."""
    return Endpoint(
        door,
        proxy.exchange,
        proxy.settings,
        proxy.compaction_key,
        proxy.fast_path if door.api is CHAT else None,
    )


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    on_compaction: Callable[[CompactionEvent], None] | None = None,
    transport: httpx2.AsyncBaseTransport | None = None,
) -> Starlette:
    """Build the proxy for ``settings``.

    ``store`` overrides the SQLite store of ``settings.db``; ``on_compaction`` is called with
    each compaction (the demo uses it); ``transport`` replaces the upstream HTTP transport.
    """
    proxy = ProxyServices(settings, store=store, on_compaction=on_compaction, transport=transport)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log_startup_notes(settings)
        await proxy.open()
        try:
            yield
        finally:
            await proxy.close()

    routes = [
        StrictRoute("/healthz", healthz, methods=["GET"]),
        StrictRoute("/metrics", partial(metrics, metrics=proxy.metrics), methods=["GET"]),
        *(
            door.route(path, _endpoint(door, proxy).serve, methods=["POST"])
            for door in FRONT_DOORS
            for path in door.routes
        ),
        StrictRoute(
            "/v1/responses/compact",
            partial(
                responses_compact,
                services=proxy.exchange,
                settings=settings,
                compaction_key=proxy.compaction_key,
            ),
            methods=["POST"],
        ),
        StrictRoute(
            "/v1/summarizer/sessions/{session:path}/compact",
            partial(ask_compaction, store=proxy.store, settings=settings),
            methods=["POST"],
        ),
        StrictRoute(
            "/v1/summarizer/sessions/{session:path}",
            partial(session_checkpoints, store=proxy.store, settings=settings),
            methods=["GET"],
        ),
        *(ui_routes(proxy.store, settings) if settings.ui else ()),
        Route(
            "/v1/{path:path}",
            partial(passthrough, upstream=proxy.upstream, settings=settings),
            methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
        ),
        Route("/{path:path}", UnknownPath()),  # every method
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            StoreUnavailable: _store_unavailable,
            HTTPException: http_error,
            ProxyError: proxy_error,
            Exception: _internal_error,
        },
    )
    app.state.proxy = proxy  # for the server: the lane, and the activity log at shutdown
    app.add_middleware(RefuseWebSockets)  # innermost: WebSocket upgrades get 426, behind the guard
    # Added next, so it runs inside RequestMetrics: its refusals are counted too.
    app.add_middleware(RequestGuard, settings=settings, hop_name=proxy.upstream.hop_name)
    if settings.allow_origins:  # outside the guard: preflights carry no key
        app.add_middleware(AllowedOriginsCors, origins=settings.allow_origins)
    app.add_middleware(RequestMetrics, metrics=proxy.metrics)
    # Every error written for a request, refusals included, takes its API's shape.
    app.add_middleware(ErrorShape)
    # Outside the guard: a Gemini key given as ?key= is checked and used as the header.
    app.add_middleware(GeminiQueryKey)
    # Outermost: /chat/completions, /responses, /messages... are served as under /v1.
    app.add_middleware(UnprefixedPaths)
    return app
