"""Error bodies in the shape of the API a client speaks.

- OpenAI (chat completions, Responses, every other route): ``{"error": {"message", "type",
  "param", "code"}}``;
- Anthropic (``/v1/messages`` and below): ``{"type": "error", "error": {"type", "message"}}``, the
  type named by status as Anthropic does (``invalid_request_error``, ``rate_limit_error``...);
- Google (Gemini's paths: ``/v1beta/...``, ``/v1alpha/...``, and the Gemini methods on a model
  under ``/v1``, ``/v1/models/NAME:generateContent`` among them; the proxy serves
  ``generateContent`` and ``streamGenerateContent``): ``{"error": {"code", "message",
  "status"}}``, the status named as Google does (``INVALID_ARGUMENT``, ``NOT_FOUND``,
  ``UNAUTHENTICATED``...).

Which one is chosen per request by ``ErrorShape`` (plain ASGI middleware, from the path's API,
``apis.shape_for_path``) through a
context variable, so every error this proxy writes for a request (a refusal in a middleware, an
unreachable upstream, an interrupted stream) reaches the client in its API's shape.

Messages are written here, never copied from a request's headers, so no credential can leak.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .apis import Shape, is_gemini_path, shape_for_path

current_shape: ContextVar[Shape] = ContextVar("summarizer_error_shape", default="openai")
"""The error shape of the request being served."""

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


_GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class ErrorShape:
    """Plain ASGI middleware: sets ``current_shape`` from the request path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request with its path's error shape."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = current_shape.set(shape_for_path(scope["path"]))
        try:
            await self.app(scope, receive, send)
        finally:
            current_shape.reset(token)


def error_payload(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    status: int = 400,
) -> dict[str, Any]:
    """The error object clients of the current request's API expect."""
    shape = current_shape.get()
    if shape == "anthropic":
        kind = type if type in _ANTHROPIC_TYPES.values() else _ANTHROPIC_TYPES.get(status)
        return {"type": "error", "error": {"type": kind or "api_error", "message": message}}
    if shape == "google":
        google_status = _GOOGLE_STATUSES.get(status, "UNKNOWN")
        return {"error": {"code": status, "message": message, "status": google_status}}
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


class ProxyError(Exception):
    """A request the proxy will not serve as sent, or whose upstream failed it: raised where the
    problem is found, written once at the edge in the client's API's shape (``response``, or
    ``event`` once a stream's 200 is sent)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers

    def payload(self) -> dict[str, Any]:
        """The error object, in the current request's API's shape."""
        return error_payload(
            self.message, type=self.type, param=self.param, code=self.code, status=self.status
        )

    def response(self) -> Response:
        """The error as a JSON response."""
        return Response(
            json.dumps(self.payload()),
            status_code=self.status,
            media_type="application/json",
            headers=self.headers,
        )

    def event(self) -> bytes:
        """The error as a server-sent event (``error_event``)."""
        return error_event(self.payload())


def unknown_path(path: str) -> ProxyError:
    """The 404 for a path this proxy does not serve (or serves to no one, as configured)."""
    if is_gemini_path(path):
        message = (
            f"Unknown path {path}: this summarizer proxy serves Google's Gemini API only as "
            "POST /v1beta/models/MODEL:generateContent and :streamGenerateContent?alt=sse "
            "(or under /v1), besides the OpenAI and Anthropic APIs."
        )
        return ProxyError(404, message, code="not_found")
    return ProxyError(404, f"Unknown path {path}.", code="not_found")


def method_not_allowed(method: str, path: str, allowed: Iterable[str]) -> ProxyError:
    """The 405 for ``method`` on a route that takes only ``allowed``, with their ``Allow``."""
    allow = ", ".join(sorted(allowed))
    return ProxyError(
        405,
        f"Method {method} is not allowed on {path}; use {allow}.",
        code="method_not_allowed",
        headers={"Allow": allow},
    )


def internal_error() -> ProxyError:
    """The 500 for an error the proxy did not expect (its traceback is logged, never sent)."""
    return ProxyError(
        500,
        "The summarizer proxy failed to handle this request.",
        type="server_error",
        code="internal_error",
    )


def store_unavailable() -> ProxyError:
    """The 503 for a request that needed the checkpoint store while it could not be reached
    (e.g. Redis restarting): nothing was sent upstream, the client may retry."""
    return ProxyError(
        503,
        "The summarizer proxy's checkpoint store is unavailable; nothing was sent upstream. "
        "Retry shortly.",
        type="server_error",
        code="store_unavailable",
        headers={"retry-after": "1"},
    )


def shaped_error(path: str, status: int, message: str) -> dict[str, Any]:
    """The error object for ``path``'s API, outside any request being served (the HTTP
    server's own refusals)."""
    token = current_shape.set(shape_for_path(path))
    try:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return error_payload(message, type=kind, status=status)
    finally:
        current_shape.reset(token)


def error_event(payload: Any) -> bytes:
    """An error as a server-sent event of the current API: ``data:`` only for OpenAI (the SDK
    raises on a payload with ``error``), ``event: error`` for Anthropic (its SDK raises on that)."""
    data = json.dumps(payload, separators=(",", ":")).encode()
    if current_shape.get() == "anthropic":
        return b"event: error\ndata: " + data + b"\n\n"
    return b"data: " + data + b"\n\n"
