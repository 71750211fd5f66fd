"""How the proxy answers a request its routes do not take, always in JSON, in the path's API
shape (see ``errors``), never Starlette's plain text:

- :class:`StrictRoute`: one of the proxy's own routes; a method it does not take gets a 405 with
  an ``Allow`` header instead of falling through to the ``/v1`` pass-through (``GET
  /v1/chat/completions`` is not forwarded upstream);
- :class:`UnknownPath`: the last route, every method on every path: a 404 (``HEAD``: without
  a body, like every answer to ``HEAD``);
- :func:`http_error`: the exception handler for any ``HTTPException`` Starlette raises itself.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Receive, Scope, Send

from .errors import error_response, method_not_allowed, unknown_path

__all__ = ["StrictRoute", "UnknownPath", "http_error"]


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
            response = method_not_allowed(scope["method"], scope["path"], self.methods)
            await response(scope, receive, send)
            return
        await super().handle(scope, receive, send)


class UnknownPath:
    """The ASGI app answering a path the proxy does not serve, with any method: a JSON 404 in
    the path's API shape."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the 404."""
        await unknown_path(scope["path"])(scope, receive, send)


async def http_error(request: Request, exc: Exception) -> Response:
    """An ``HTTPException`` Starlette raised (a 405 of a route that is not strict...) as a JSON
    error in the path's API shape, with its headers."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        allowed = (exc.headers or {}).get("Allow", "")
        methods = [method.strip() for method in allowed.split(",") if method.strip()]
        return method_not_allowed(request.method, request.url.path, methods)
    return error_response(exc.status_code, exc.detail, headers=dict(exc.headers or {}))
