"""``create_app(settings)``: the proxy's ASGI app (Starlette routing, plain ASGI middleware).

Routes:
- ``POST /v1/chat/completions``: context-managed (see ``chat``);
- ``POST /v1/messages``: Anthropic's Messages API, context-managed by the same exchange
  (``messages_request``); ``/v1/messages/count_tokens`` passes through;
- ``POST /v1/responses``: OpenAI's Responses API, likewise (``responses_request``); a request whose
  history the provider keeps (``previous_response_id``) passes through, with a warning header;
  ``POST /v1/responses/compact`` is answered by the proxy for any model (``responses_compact``);
- ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse`` (and
  the same under ``/v1``, the Python SDK's default version): Google's Gemini API, likewise
  (``gemini_request``), the key in ``x-goog-api-key`` (or ``?key=``, read as that header:
  ``gemini_key``);
- ``GET /v1/summarizer/sessions/{id}``: a session's checkpoints, to its own credential only;
- every other ``/v1/...`` route: passed through unchanged, streaming included (with
  ``[[models]]`` configured, a JSON body's ``model`` chooses the upstream, as on the routes above);
- ``GET /healthz`` and ``GET /metrics`` (Prometheus text);
- a WebSocket upgrade, on any path: 426, so a client falls back to HTTP (``websocket_refusal``);
- with ``Settings.ui``, ``GET /ui`` and its JSON API ``/ui/api/...`` (see ``ui``);
- the same paths without ``/v1`` (``/chat/completions``...): served as under ``/v1``
  (``routing.UnprefixedPaths``);
- anything else, with any method (Gemini's other paths among them, ``GET /v1beta/models``,
  ``:countTokens``, ``/v1/models/NAME:generateContent``, never forwarded: the top-level
  upstream may be another provider's, which must not receive a Google key): a JSON 404 in the
  path's API shape; a method a route above does not take: a JSON 405 with ``Allow`` (see
  ``routing``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx2
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..core.errors import StoreUnavailable
from ..core.results import CompactionEvent
from ..stores import Store
from .access import RequestGuard, log_startup_notes, reader_namespace
from .body import parse_body
from .chat import OFFLOAD_BYTES, chat_completions, serve_managed
from .cross_site import AllowedOriginsCors
from .errors import (
    ErrorShape,
    error_event,
    error_payload,
    error_response,
    is_gemini_path,
    store_unavailable_response,
    unknown_path,
)
from .gemini_key import GeminiQueryKey
from .gemini_request import GeminiRoute, serve_gemini
from .headers import response_headers
from .intake import (
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
    body_pieces,
    read_body,
    unread_body_response,
)
from .messages_request import parse_messages_request
from .metrics import CONTENT_TYPE
from .model_routes import ModelRoute
from .paths import UnsafePath, upstream_path
from .responses_compact import responses_compact
from .responses_trigger import parse_responses
from .routing import StrictRoute, UnknownPath, UnprefixedPaths, http_error
from .settings import Settings
from .state import ProxyState
from .ui import ui_routes
from .websocket_refusal import RefuseWebSockets

logger = logging.getLogger("summarizer.proxy")

_EVERY_METHOD = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def messages(request: Request) -> Response:
    """``POST /v1/messages`` (Anthropic's Messages API), context-managed like chat completions."""
    state: ProxyState = request.app.state.proxy
    managed = state.settings.cache_breakpoints == "managed"
    return await serve_managed(
        request, functools.partial(parse_messages_request, manage_breakpoints=managed)
    )


async def responses(request: Request) -> Response:
    """``POST /v1/responses`` (OpenAI's Responses API), context-managed like chat completions;
    one ending with a ``compaction_trigger`` item is answered by the proxy
    (``responses_trigger``)."""
    state: ProxyState = request.app.state.proxy
    chat = state.settings.responses_upstream == "chat"
    parse = functools.partial(parse_responses, key=state.compaction_key, chat_upstream=chat)
    return await serve_managed(request, parse)


async def healthz(request: Request) -> Response:
    """Liveness: the process serves requests."""
    return JSONResponse({"status": "ok"})


async def metrics(request: Request) -> Response:
    """Prometheus metrics of this proxy."""
    state: ProxyState = request.app.state.proxy
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


async def session_checkpoints(request: Request) -> Response:
    """A session's checkpoints (oldest first) with summaries, ledgers and scores.

    Only the credential that created a session can read it; any other gets the same 404 as for
    a session that does not exist (``reader_namespace`` applies ``sessions_api``).
    """
    state: ProxyState = request.app.state.proxy
    namespace = reader_namespace(request, state.settings)
    if isinstance(namespace, Response):
        return namespace
    session = request.path_params["session"]
    checkpoints = await asyncio.to_thread(state.store.list_session, namespace, session)
    if not checkpoints:
        return error_response(
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


async def passthrough(request: Request) -> Response:
    """Any other ``/v1`` route: forwarded as is, the answer relayed as it arrives.

    The path goes upstream as the client wrote it, once ``upstream_path`` has checked that it
    stays under the upstream's base path; any other is refused with 400 and never forwarded.
    It goes to the top-level upstream, or (with ``[[models]]`` configured) to the route of the
    ``model`` its JSON body names (``/v1/messages/count_tokens``, ``/v1/embeddings``...), whose
    body is then read before it is sent.
    """
    if is_gemini_path(request.url.path):  # an OpenAI or Anthropic upstream serves none
        return unknown_path(request.url.path)
    state: ProxyState = request.app.state.proxy
    settings = state.settings
    try:
        path = upstream_path(request.scope.get("raw_path") or request.scope["path"].encode())
    except UnsafePath as exc:
        return error_response(
            400,
            f"This path is not forwarded upstream: {exc}. A path must stay under /v1/.",
            code="invalid_path",
        )
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    # A body is streamed through as it arrives; a request without one is sent without one
    # (not as an empty chunked body, which some servers refuse on GET).
    content: AsyncIterator[bytes] | bytes | None = None
    route = state.routes.default
    try:
        if has_body and settings.models and _is_json(request.headers.get("content-type")):
            content = await read_body(request, settings.max_body_bytes, settings.body_read_timeout)
            route = state.route_for(await _model_named(content))
        elif has_body:
            content = body_pieces(request, settings.body_read_timeout)
        upstream_request = state.http.build_request(
            request.method,
            route.url(path, request.url.query),
            content=content,
            headers=state.forward_headers(
                request.headers,
                api="anthropic" if path.startswith("/messages/") else "openai",
                route=route,
            ),
        )
        response = await state.http.send(upstream_request, stream=True)
    except (BodyTooLarge, BodyTimeout, ClientGone) as exc:
        return unread_body_response(
            request, exc, limit=settings.max_body_bytes, timeout=settings.body_read_timeout
        )
    except httpx2.TransportError as exc:
        return state.upstream_failure(exc, route)
    if response.status_code >= 400:
        state.metrics.upstream_errors.labels(str(response.status_code)).inc()
    headers = dict(response_headers(response.headers.items()))
    return StreamingResponse(
        _relay(request, response, state, route),
        status_code=response.status_code,
        headers=headers,
        background=BackgroundTask(response.aclose),
    )


def _is_json(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` says the body is JSON."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


async def _model_named(body: bytes) -> object:
    """The ``model`` of a JSON object body (None when it is not one); a large body is parsed
    in a worker thread."""
    try:
        data = (
            await asyncio.to_thread(parse_body, body)
            if len(body) > OFFLOAD_BYTES
            else parse_body(body)
        )
    except ValueError:  # invalid, or nested too deeply: the upstream answers it
        return None
    return data.get("model") if isinstance(data, dict) else None


async def _relay(
    request: Request, response: httpx2.Response, state: ProxyState, route: ModelRoute
) -> AsyncIterator[bytes]:
    """The upstream's body as it arrives. If the upstream breaks off: a warning, a count, an
    SSE error event for an event stream (the SDKs raise on it), and the body ends there."""
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx2.TransportError as exc:
        timeout = isinstance(exc, httpx2.TimeoutException)
        state.metrics.upstream_errors.labels("timeout" if timeout else "stream_interrupted").inc()
        logger.warning(
            "the upstream %s broke off its answer to %s %s: %s",
            route.host,
            request.method,
            request.url.path,
            type(exc).__name__,
        )
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            yield b"\n\n" + error_event(
                error_payload(
                    f"The upstream {route.host} broke off its answer.",
                    type="upstream_error",
                    code="stream_interrupted",
                )
            )


def _route_label(path: str) -> str:
    if path == "/v1/chat/completions":
        return "chat"
    if path == "/v1/messages":
        return "messages"
    if path == "/v1/responses":
        return "responses"
    if is_gemini_path(path):
        return "gemini"
    if path.startswith("/v1/summarizer/"):
        return "sessions"
    if path.startswith("/v1/"):
        return "passthrough"
    if path in ("/healthz", "/metrics"):
        return path[1:]
    if path == "/ui" or path.startswith("/ui/"):
        return "ui"
    return "other"


class RequestMetrics:
    """Plain ASGI middleware counting responses by route and status (streams untouched)."""

    def __init__(self, app: ASGIApp, state: ProxyState) -> None:
        self.app = app
        self.state = state

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
            self.state.metrics.requests.labels(
                _route_label(scope["path"]), str(status["code"])
            ).inc()


async def _internal_error(request: Request, exc: Exception) -> Response:
    logger.error(
        "unhandled error on %s %s: %s",
        request.method,
        request.url.path,
        type(exc).__name__,
        exc_info=exc,
    )
    return error_response(
        500,
        "The summarizer proxy failed to handle this request.",
        type="server_error",
        code="internal_error",
    )


async def _store_unavailable(request: Request, exc: Exception) -> Response:
    logger.warning("answering 503 to %s %s: %s", request.method, request.url.path, exc)
    return store_unavailable_response()


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
    state = ProxyState(settings, store=store, on_compaction=on_compaction, transport=transport)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log_startup_notes(settings)
        await state.open()
        try:
            yield
        finally:
            await state.close()

    routes = [
        StrictRoute("/healthz", healthz, methods=["GET"]),
        StrictRoute("/metrics", metrics, methods=["GET"]),
        StrictRoute("/v1/chat/completions", chat_completions, methods=["POST"]),
        StrictRoute("/v1/messages", messages, methods=["POST"]),
        StrictRoute("/v1/responses", responses, methods=["POST"]),
        StrictRoute("/v1/responses/compact", responses_compact, methods=["POST"]),
        StrictRoute("/v1/summarizer/sessions/{session:path}", session_checkpoints, methods=["GET"]),
        GeminiRoute("/v1beta/models/{target}", serve_gemini, methods=_EVERY_METHOD),
        GeminiRoute("/v1/models/{target}", serve_gemini, methods=_EVERY_METHOD),
        *(ui_routes() if settings.ui else ()),
        Route("/v1/{path:path}", passthrough, methods=_EVERY_METHOD),
        Route("/{path:path}", UnknownPath()),  # every method
    ]
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={
            StoreUnavailable: _store_unavailable,
            HTTPException: http_error,
            Exception: _internal_error,
        },
    )
    app.state.proxy = state
    app.add_middleware(RefuseWebSockets)  # innermost: WebSocket upgrades get 426, behind the guard
    # Added next, so it runs inside RequestMetrics: its refusals are counted too.
    app.add_middleware(RequestGuard, settings=settings, hop_name=state.hop_name)
    if settings.allow_origins:  # outside the guard: preflights carry no key
        app.add_middleware(AllowedOriginsCors, origins=settings.allow_origins)
    app.add_middleware(RequestMetrics, state=state)
    # Every error written for a request, refusals included, takes its API's shape.
    app.add_middleware(ErrorShape)
    # Outside the guard: a Gemini key given as ?key= is checked and used as the header.
    app.add_middleware(GeminiQueryKey)
    # Outermost: /chat/completions, /responses, /messages... are served as under /v1.
    app.add_middleware(UnprefixedPaths)
    return app
