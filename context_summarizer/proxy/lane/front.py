"""The lane in front of the app (``proxy.lane``): a plain ASGI callable that claims the chat
requests it may take, streams their bodies upstream as ``receive`` delivers them, answers them
through ``send``, and passes everything else, and any claimed request it gives up, to the app.

Only ASGI is used: it runs under any ASGI server, and the server frames, flow-controls and
logs the lane's answers as it does the app's."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..access import RequestGuard
from ..endpoint import HANDED_OVER, OVERFLOWED
from ..errors import ProxyError
from ..fast_path import KEY_BYTES
from ..managed_request import sender
from .answer import LaneAnswer
from .arrived import ArrivedBody
from .request import ClientHeaders, HandOver, LaneRequest
from .services import LaneServices

PATH = "/v1/chat/completions"

MAX_CLIENTS = 256
"""Sets of client headers the lane keeps what it worked out from (the oldest dropped first)."""

HeaderKey = tuple[str, tuple[tuple[bytes, bytes], ...]]
"""A request's scheme and headers as sent, but ``content-length``."""

_NOT_CLAIMED = frozenset(
    {
        b"transfer-encoding",
        b"upgrade",
        b"origin",
        b"x-summarizer-compact",
        b"x-summarizer-instructions",
    }
)
"""Headers of requests the lane leaves to the app: a body without a length (its bytes cannot be
streamed under one), an upgrade, a browser's request (its CORS answer is the app's), and a
client's ask of its compaction (``proxy.controls``)."""


class LaneApp:
    """The lane, in front of the proxy's ASGI ``app``."""

    def __init__(self, app: ASGIApp, services: LaneServices) -> None:
        self.app = app
        self.services = services
        self.guard = RequestGuard(
            _unused_app, settings=services.settings, hop_name=services.upstream.hop_name
        )
        self.clients: dict[HeaderKey, ClientHeaders] = {}
        """What was worked out from each set of client headers seen lately (``client_headers``)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a request the lane claims, else pass it to the app."""
        claim = self._claim(scope) if scope["type"] == "http" and scope["path"] == PATH else None
        if claim is None:
            await self.app(scope, receive, send)
            return
        started = time.time()
        lane = LaneRequest(self.services, claim[0], Headers(scope=scope), claim[1])
        try:
            await self._serve(lane, started, scope, receive, send)
        finally:  # whatever happened, no upstream request is left unfinished
            lane.drop_upstream()

    async def _serve(
        self, lane: LaneRequest, started: float, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Read, prove and answer a claimed request, or hand it over."""
        unread = await self._read(lane, receive)
        if unread is not None:
            whole, gone = unread
            await self._hand_over(lane, HandOver(), scope, receive, send, whole=whole, gone=gone)
            return
        proven = lane.prove()
        if isinstance(proven, HandOver):
            await self._hand_over(lane, proven, scope, receive, send, whole=True)
            return
        handed = await self._answer(LaneAnswer(lane, proven, send, started), receive)
        if handed is not None:
            await self._hand_over(lane, handed, scope, receive, send, whole=True)

    def _claim(self, scope: Scope) -> tuple[ClientHeaders, int] | None:
        """Who sends a request the lane may claim, and its body's length; else None."""
        if scope["method"] != "POST" or scope.get("root_path") or scope.get("query_string"):
            return None
        if not self.services.wires.serving:  # not (yet, or any more)
            return None
        length = None
        key = []
        for header in scope["headers"]:
            name = header[0]
            if name == b"content-length":
                if length is not None or not header[1].isdigit():
                    return None
                length = int(header[1])
                continue
            if name in _NOT_CLAIMED:
                return None
            key.append((name, header[1]))
        if length is None or not KEY_BYTES <= length <= self.services.settings.max_body_bytes:
            return None
        client = self.client_headers((scope.get("scheme", "http"), tuple(key)), scope)
        return None if client is None else (client, length)

    def client_headers(self, key: HeaderKey, scope: Scope) -> ClientHeaders | None:
        """What the lane knows of this request's headers (``key``: all but its length); None
        when the guard refuses them or they name an invalid session (the app answers both)."""
        clients = self.clients
        known = clients.get(key)
        if known is not None:
            return known
        headers = Headers(scope=scope)
        try:
            self.guard.check(headers, PATH, "POST", scheme=key[0])
            who = sender(headers)
        except ProxyError:
            return None
        if len(clients) >= MAX_CLIENTS:
            del clients[next(iter(clients))]
        known = clients[key] = ClientHeaders(who)
        return known

    async def _read(self, lane: LaneRequest, receive: Receive) -> tuple[bool, bool] | None:
        """Feed the body to ``lane`` as it arrives: None once it is whole; else, as the lane
        gives it up, whether it was read whole all the same and whether the client left. A
        client slower than ``body_read_timeout`` is left to the app (which times each of its
        reads)."""
        more = True
        try:
            async with asyncio.timeout(self.services.settings.body_read_timeout):
                while more:
                    message = await receive()
                    if message["type"] != "http.request":
                        return False, True
                    more = message.get("more_body", False)
                    if not lane.feed(message.get("body", b"")):
                        return not more, False
        except TimeoutError:
            return False, False
        return None

    async def _answer(self, answer: LaneAnswer, receive: Receive) -> HandOver | None:
        """``answer.run()``, given up (its upstream request dropped) if the client leaves
        before the answer's end."""
        task = asyncio.current_task()
        assert task is not None
        left = False

        async def watch() -> None:
            nonlocal left
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
            except Exception:  # the server's to report
                return
            if not answer.finished:
                left = True
                task.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        try:
            return await answer.run()
        except asyncio.CancelledError:
            if left and task.uncancel() == 0:
                return None  # nobody to answer (the upstream request is dropped)
            raise
        finally:
            watcher.cancel()

    async def _hand_over(
        self,
        lane: LaneRequest,
        over: HandOver,
        scope: Scope,
        receive: Receive,
        send: Send,
        *,
        whole: bool,
        gone: bool = False,
    ) -> None:
        """Give the request to the app, with the body read so far (``whole``: all of it, and
        what the fast path made of it), its guessed upstream request dropped unfinished."""
        lane.drop_upstream()
        self.services.metrics.lane.labels("handed_over").inc()
        if whole and (over.parsed is not None or over.tried or over.overflowed):
            state = scope.setdefault("state", {})
            if over.parsed is not None or over.tried:
                state[HANDED_OVER] = over.parsed
            if over.overflowed:
                state[OVERFLOWED] = True
        await self.app(scope, _replay(lane.body, receive, whole=whole, gone=gone), send)


def _replay(body: ArrivedBody, receive: Receive, *, whole: bool, gone: bool) -> Receive:
    """A ``receive`` that gives the body read so far, then what ``receive`` gives (a client
    seen gone stays gone)."""
    pending = [body.joined()] if len(body) or whole else []

    async def replayed() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": not whole}
        if gone:
            return {"type": "http.disconnect"}
        return await receive()

    return replayed


async def _unused_app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
    raise RuntimeError("the lane's guard only answers refusal()")
