"""How the proxy answers a request its routes do not take, always in JSON, in the path's API
shape (see ``errors``), never Starlette's plain text:

- :class:`StrictRoute`: one of the proxy's own routes; a method it does not take gets a 405 with
  an ``Allow`` header instead of falling through to the ``/v1`` pass-through (``GET
  /v1/chat/completions`` is not forwarded upstream);
- :class:`UnknownPath`: the last route, every method on every path: a 404 (``HEAD``: without
  a body, like every answer to ``HEAD``);
- :func:`http_error`: the exception handler for any ``HTTPException`` Starlette raises itself;
- :class:`UnprefixedPaths`: a client whose base URL lacks ``/v1`` (``base_url="http://HOST:PORT"``)
  is served as if it had it: ``POST /chat/completions`` is ``POST /v1/chat/completions``, and
  so for every root of the OpenAI and Anthropic APIs (``API_ROOTS``), as LiteLLM's proxy does.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import ProxyError, method_not_allowed, unknown_path

__all__ = ["API_ROOTS", "StrictRoute", "UnknownPath", "UnprefixedPaths", "http_error"]

API_ROOTS = frozenset(
    {
        "chat",
        "completions",
        "responses",
        "messages",
        "models",
        "embeddings",
        "moderations",
        "audio",
        "images",
        "files",
        "uploads",
        "batches",
        "fine_tuning",
        "vector_stores",
        "assistants",
        "threads",
        "conversations",
        "containers",
        "videos",
    }
)
"""The first segments of the OpenAI and Anthropic API paths, served under ``/v1`` when a client
leaves the prefix out."""


class StrictRoute(Route):
    """A route answering every method on its path: those it does not take with a JSON 405."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """A full match whenever the path matches, whatever the method (so no later route
        takes the request)."""
        match, child_scope = super().matches(scope)
        return (Match.FULL if match is Match.PARTIAL else match), child_scope

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request, or answer 405 for a method the route does not take."""
        if self.methods and scope["method"] not in self.methods:
            refusal = method_not_allowed(scope["method"], scope["path"], self.methods)
            await refusal.response()(scope, receive, send)
            return
        await super().handle(scope, receive, send)


class UnknownPath:
    """The ASGI app answering a path the proxy does not serve, with any method: a JSON 404 in
    the path's API shape."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the 404."""
        await unknown_path(scope["path"]).response()(scope, receive, send)


async def http_error(request: Request, exc: Exception) -> Response:
    """An ``HTTPException`` Starlette raised (a 405 of a route that is not strict...) as a JSON
    error in the path's API shape, with its headers."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        methods = [method.strip() for method in allowed.split(",") if method.strip()]
        return method_not_allowed(request.method, request.url.path, methods).response()
    return ProxyError(exc.status_code, exc.detail, headers=dict(exc.headers or {})).response()


async def proxy_error(request: Request, exc: Exception) -> Response:
    """A ``ProxyError`` raised while serving a request, as the JSON error of its API."""
    assert isinstance(exc, ProxyError)
    return exc.response()


class UnprefixedPaths:
    """Plain ASGI middleware, outermost: a request to an API path without its ``/v1`` prefix
    (``/chat/completions``, ``/messages``, ``/models``...) goes on as the same request under
    ``/v1``, so every guard, error shape, metric and route (the pass-through too) sees it as
    such. The access log keeps the path the client wrote."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, under ``/v1`` when it left the prefix out."""
        path: str = scope.get("path", "")
        first = path.split("/", 2)[1] if path.startswith("/") else ""
        if scope["type"] == "http" and first in API_ROOTS:
            scope = dict(scope, path="/v1" + path)
            if scope.get("raw_path") is not None:
                scope["raw_path"] = b"/v1" + scope["raw_path"]
        await self.app(scope, receive, send)
