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

Which one is chosen per request by ``ErrorShape`` (plain ASGI middleware, from the path) through a
context variable, so every error this proxy writes for a request (a refusal in a middleware, an
unreachable upstream, an interrupted stream) reaches the client in its API's shape.

Messages are written here, never copied from a request's headers, so no credential can leak.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from contextvars import ContextVar
from typing import Any, Literal

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

Shape = Literal["openai", "anthropic", "google"]

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

_GEMINI_VERSIONS = ("v1beta", "v1alpha")
_GEMINI_METHODS = frozenset(
    {
        "generateContent",
        "streamGenerateContent",
        "countTokens",
        "embedContent",
        "batchEmbedContents",
        "batchGenerateContent",
        "predict",
        "predictLongRunning",
    }
)


def is_gemini_path(path: str) -> bool:
    """Whether ``path`` is one of Google's Gemini API: under ``/v1beta`` or ``/v1alpha``, or a
    Gemini method on a model under ``/v1`` (``/v1/models/NAME:generateContent``; an OpenAI model
    id with colons, ``ft:...``, is not one)."""
    first = path.lstrip("/").split("/", 1)[0]
    if first in _GEMINI_VERSIONS:
        return True
    if not path.startswith("/v1/models/"):
        return False
    _, colon, method = path.rpartition("/")[2].rpartition(":")
    return bool(colon) and method in _GEMINI_METHODS


def shape_for_path(path: str) -> Shape:
    """The error shape of requests to ``path``."""
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return "anthropic"
    return "google" if is_gemini_path(path) else "openai"


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


def error_response(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """A JSON error response with ``status``."""
    payload = error_payload(message, type=type, param=param, code=code, status=status)
    return Response(
        json.dumps(payload), status_code=status, media_type="application/json", headers=headers
    )


def unknown_path(path: str) -> Response:
    """The 404 for a path this proxy does not serve (or serves to no one, as configured)."""
    if is_gemini_path(path):
        message = (
            f"Unknown path {path}: this summarizer proxy serves Google's Gemini API only as "
            "POST /v1beta/models/MODEL:generateContent and :streamGenerateContent?alt=sse "
            "(or under /v1), besides the OpenAI and Anthropic APIs."
        )
        return error_response(404, message, code="not_found")
    return error_response(404, f"Unknown path {path}.", code="not_found")


def method_not_allowed(method: str, path: str, allowed: Iterable[str]) -> Response:
    """The 405 for ``method`` on a route that takes only ``allowed``, with their ``Allow``."""
    allow = ", ".join(sorted(allowed))
    return error_response(
        405,
        f"Method {method} is not allowed on {path}; use {allow}.",
        code="method_not_allowed",
        headers={"Allow": allow},
    )


def store_unavailable_response() -> Response:
    """The 503 for a request that needed the checkpoint store while it could not be reached
    (e.g. Redis restarting): nothing was sent upstream, the client may retry."""
    return error_response(
        503,
        "The summarizer proxy's checkpoint store is unavailable; nothing was sent upstream. "
        "Retry shortly.",
        type="server_error",
        code="store_unavailable",
        headers={"retry-after": "1"},
    )


def error_event(payload: Any) -> bytes:
    """An error as a server-sent event of the current API: ``data:`` only for OpenAI (the SDK
    raises on a payload with ``error``), ``event: error`` for Anthropic (its SDK raises on that)."""
    data = json.dumps(payload, separators=(",", ":")).encode()
    if current_shape.get() == "anthropic":
        return b"event: error\ndata: " + data + b"\n\n"
    return b"data: " + data + b"\n\n"
