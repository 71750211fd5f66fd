"""Every other ``/v1`` route: forwarded as is, the answer relayed as it arrives."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import httpx2
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .apis import api_for_path, is_gemini_path
from .body import parse_body
from .errors import ProxyError, error_event, error_payload, unknown_path
from .exchange import OFFLOAD_BYTES
from .headers import response_headers
from .intake import (
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
    body_pieces,
    read_body,
    unread_body,
)
from .model_routes import ModelRoute
from .paths import UnsafePath, upstream_path
from .settings import Settings
from .upstream import Upstream

logger = logging.getLogger("context_summarizer.proxy")


async def passthrough(request: Request, *, upstream: Upstream, settings: Settings) -> Response:
    """Any other ``/v1`` route: forwarded as is, the answer relayed as it arrives.

    The path goes upstream as the client wrote it, once ``upstream_path`` has checked that it
    stays under the upstream's base path; any other is refused with 400 and never forwarded.
    It goes to the top-level upstream, or (with ``[[models]]`` configured) to the route of the
    ``model`` its JSON body names (``/v1/messages/count_tokens``, ``/v1/embeddings``...), whose
    body is then read before it is sent.
    """
    if is_gemini_path(request.url.path):  # an OpenAI or Anthropic upstream serves none
        raise unknown_path(request.url.path)
    try:
        path = upstream_path(request.scope.get("raw_path") or request.scope["path"].encode())
    except UnsafePath as exc:
        raise ProxyError(
            400,
            f"This path is not forwarded upstream: {exc}. A path must stay under /v1/.",
            code="invalid_path",
        ) from None
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    # A body is streamed through as it arrives; a request without one is sent without one
    # (not as an empty chunked body, which some servers refuse on GET).
    content: AsyncIterator[bytes] | bytes | None = None
    route = upstream.routes.default
    try:
        if has_body and settings.models and _is_json(request.headers.get("content-type")):
            content = await read_body(request, settings.max_body_bytes, settings.body_read_timeout)
            route = upstream.route_for(await _model_named(content))
        elif has_body:
            content = body_pieces(request, settings.body_read_timeout)
        upstream_request = upstream.http.build_request(
            request.method,
            route.url(path, request.url.query),
            content=content,
            headers=upstream.forward_headers(
                request.headers, key_header=_key_header(request.url.path), route=route
            ),
        )
        response = await upstream.http.send(upstream_request, stream=True)
    except (BodyTooLarge, BodyTimeout, ClientGone) as exc:
        raise unread_body(
            request, exc, limit=settings.max_body_bytes, timeout=settings.body_read_timeout
        ) from None
    except httpx2.TransportError as exc:
        raise upstream.failure(exc, route) from exc
    if response.status_code >= 400:
        upstream.errors.labels(str(response.status_code)).inc()
    headers = dict(response_headers(response.headers.items()))
    return StreamingResponse(
        _relay(request, response, upstream, route),
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
    request: Request, response: httpx2.Response, upstream: Upstream, route: ModelRoute
) -> AsyncIterator[bytes]:
    """The upstream's body as it arrives. If the upstream breaks off: a warning, a count, an
    SSE error event for an event stream (the SDKs raise on it), and the body ends there."""
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx2.TransportError as exc:
        timeout = isinstance(exc, httpx2.TimeoutException)
        upstream.errors.labels("timeout" if timeout else "stream_interrupted").inc()
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


def _key_header(path: str) -> str:
    """The header an upstream key goes in for ``path``'s API (``authorization`` by default)."""
    api = api_for_path(path)
    return api.key_header if api is not None else "authorization"
