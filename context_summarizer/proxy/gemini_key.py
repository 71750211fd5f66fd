"""A Gemini API key given in the URL (``?key=...``, as Google's REST examples show) read as the
``x-goog-api-key`` header the SDKs send.

Plain ASGI middleware, outside the guard: on a Gemini path, a ``key`` query parameter is taken
out of the query string and, unless the request already carries ``x-goog-api-key``, becomes that
header. So the client-key check, the tenant namespace and what goes upstream see one credential
whichever way it came, and the key never travels on in a URL.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

from .apis import is_gemini_path

HEADER = b"x-goog-api-key"


class GeminiQueryKey:
    """Moves ``?key=`` into ``x-goog-api-key`` on Gemini's paths (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, its query key moved into the header."""
        query: bytes = scope.get("query_string") or b""
        if scope["type"] != "http" or b"key=" not in query or not is_gemini_path(scope["path"]):
            await self.app(scope, receive, send)
            return
        pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        keys = [value for name, value in pairs if name == "key"]
        if not keys:
            await self.app(scope, receive, send)
            return
        rest = urlencode([(name, value) for name, value in pairs if name != "key"])
        headers = list(scope.get("headers") or ())
        if keys[0] and not any(name.lower() == HEADER for name, _ in headers):
            headers.append((HEADER, keys[0].encode("latin-1")))
        scope = dict(scope, query_string=rest.encode("latin-1"), headers=headers)
        await self.app(scope, receive, send)
