"""WebSocket upgrades refused with ``426 Upgrade Required``, so a client falls back to HTTP at once.

The proxy serves HTTP only. Codex CLI's built-in OpenAI provider first opens the Responses API's
WebSocket mode (``GET /v1/responses`` with ``Upgrade: websocket``); it falls back to
``POST /v1/responses`` immediately on a 426, and only after five reconnects (about 6 s) on any
other refusal (uvicorn's default is 403). Every upgrade request, on any path, gets the 426 with an
OpenAI-shaped error body: as a plain HTTP answer under the proxy's own server (which passes an
upgrade request on as an ordinary request and closes the connection after it), and as the
server's WebSocket denial response under an ASGI server with a WebSocket library (the ASGI
``websocket.http.response`` extension).
"""

from __future__ import annotations

import json

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

STATUS = 426
"""The refusal's status: Codex's signal to use HTTP instead."""
MESSAGE = (
    "This summarizer proxy serves the API over HTTP only, not over WebSocket: send "
    "POST /v1/responses (Codex CLI falls back to it by itself on this 426)."
)


def refusal_body() -> bytes:
    """The refusal's body: an OpenAI error object."""
    error = {
        "message": MESSAGE,
        "type": "invalid_request_error",
        "param": None,
        "code": "websocket_not_supported",
    }
    return json.dumps({"error": error}).encode()


def _headers(body: bytes) -> list[tuple[bytes, bytes]]:
    return [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]


class RefuseWebSockets:
    """Plain ASGI middleware answering every WebSocket upgrade with the 426 refusal."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Refuse an upgrade request; pass anything else on."""
        if scope["type"] == "websocket":
            await self._deny(scope, receive, send)
            return
        if scope["type"] == "http" and _asks_websocket(scope):
            body = refusal_body()
            start = {"type": "http.response.start", "status": STATUS, "headers": _headers(body)}
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _deny(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()  # websocket.connect: the handshake waits for this answer
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})  # the server's own 403
            return
        body = refusal_body()
        await send(
            {"type": "websocket.http.response.start", "status": STATUS, "headers": _headers(body)}
        )
        await send({"type": "websocket.http.response.body", "body": body})


def _asks_websocket(scope: Scope) -> bool:
    """Whether an HTTP request asks to be upgraded to WebSocket (the server did not upgrade it)."""
    upgrade = Headers(scope=scope).get("upgrade", "")
    return "websocket" in upgrade.lower()
