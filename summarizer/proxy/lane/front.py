"""The lane: a chat request that extends its conversation's previous body is sent upstream as
its bytes arrive, and answered without the ASGI stack.

An agent's next request is its previous body plus a turn. When a ``POST /v1/chat/completions``
begins with the bytes of a body the fast path remembers (``FastPath.newest``), the lane opens an
upstream request on that guess and streams the body to it while the client is still sending,
checking each byte of the remembered prefix as it comes. Until the body is proven it holds back
the body's last byte (the upstream cannot act on an unfinished body) and any prefix that ends
like a JSON object (so even a server that took a cut-off body for a whole one could not read
one). Once the whole body is in:

- the fast path reads it (``FastPath.parse``: the same request parsing it whole would give);
- if it extends a body whose request was located with no compaction due (``Settled``), by
  valid text messages whose bytes bound their tokens (a token covers at least one byte) within
  the trigger, on the same route and to the same bytes upstream, the rest goes at once and the
  engine locates it while the upstream works (a bound the count contradicts is counted as
  ``sent_over_bound`` and logged: the next request compacts);
- else the engine locates it first, and the rest goes only if no compaction is due, its route
  is the one the guess opened and the bytes due upstream (``ChatContext.outgoing``) are exactly
  the ones streamed.

The answer is relayed with the full path's own code (``ChatExchange.answer`` and ``relay``):
usage observed, ``x-summarizer-*`` headers, the activity log. Anything else, at any point (no
remembered body, a differing byte, a body not proven, a compaction due, a rewritten body, a
slow client, a client gone mid-body, an overflow answer), hands the request over to the full
path (uvicorn's own request cycle and the app) with the bytes read so far, and drops the
upstream connection, its request unfinished.

Why: moving a 100k-token body through the ASGI server, the app and a client library costs more
than the proxy's own work on it, and the upstream cannot start reading until the proxy has read
it all. Here the two transfers overlap and a request costs little more than its new bytes.

``LaneProtocol`` is uvicorn's httptools protocol with the lane in front of its request cycle;
``lane_protocol`` returns it for a proxy, or None where it cannot run (see there). A claimed
request is a ``LaneRequest`` (``lane_request``), the early send's proof is ``lane_bound``'s and
the answer ``lane_answer``'s.
"""

from __future__ import annotations

import inspect
import logging
import urllib.request
from dataclasses import dataclass, field
from typing import Any, ClassVar

from starlette.datastructures import Headers
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import (
    HttpToolsProtocol,
    RequestResponseCycle,
)

from ..access import RequestGuard
from ..chat_request import ChatRequest, Sender, sender
from ..fast_path import KEY_BYTES
from ..model_routes import ModelRoute
from ..state import ProxyState
from .request import LaneRequest

logger = logging.getLogger("summarizer.proxy")

PATH = b"/v1/chat/completions"
UPSTREAM_PATH = ChatRequest.upstream_path

MAX_CLIENTS = 256
"""Sets of client headers the lane keeps what it worked out from (the oldest dropped first)."""

HeaderKey = tuple[tuple[bytes, bytes], ...]
"""A request's headers as sent, but ``content-length``."""


@dataclass(slots=True)
class ClientHeaders:
    """What the lane works out from a set of client headers, once: an agent sends the same
    ones with every request. Kept only for headers the proxy's guard lets through."""

    who: Sender
    """Who sends them: the credential's namespace and the session they name."""
    heads: dict[ModelRoute, bytes] = field(default_factory=dict)
    """The upstream request head before ``content-length``, per route (``LaneRequest._head``)."""


_CYCLE_PARAMETERS = {
    "scope",
    "transport",
    "flow",
    "logger",
    "access_logger",
    "access_log",
    "default_headers",
    "message_event",
    "expect_100_continue",
    "keep_alive",
    "on_response",
}


def lane_protocol(state: ProxyState) -> type[HttpToolsProtocol] | None:
    """uvicorn's HTTP protocol with the lane, for ``state``'s proxy; None when the lane cannot
    run: the fast path is off, a custom upstream transport is set, an HTTP proxy is configured
    in the environment (the full path's client goes through it; the lane would not), or this
    uvicorn's request cycle is not the one the lane was written against."""
    if state.fast_path is None or state.custom_transport:
        return None
    if {k: v for k, v in urllib.request.getproxies().items() if k != "no"}:
        logger.info("the lane is off: an HTTP proxy is configured in the environment")
        return None
    parameters = set(inspect.signature(RequestResponseCycle.__init__).parameters) - {"self"}
    hooks = ("_start_asgi_task", "on_response_complete", "on_headers_complete", "on_body")
    if parameters != _CYCLE_PARAMETERS or not all(hasattr(HttpToolsProtocol, h) for h in hooks):
        logger.info("the lane is off: this uvicorn's request cycle is not the one it knows")
        return None
    guard = RequestGuard(_unused_app, settings=state.settings, hop_name=state.hop_name)
    members = {"proxy": state, "guard": guard, "clients": {}}
    return type("LaneProtocol", (LaneProtocol,), members)


async def _unused_app(scope: Any, receive: Any, send: Any) -> None:  # pragma: no cover
    raise RuntimeError("the lane's guard only answers refusal()")


class LaneProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the lane claiming the chat requests it may take."""

    proxy: ClassVar[ProxyState]
    guard: ClassVar[RequestGuard]
    clients: ClassVar[dict[HeaderKey, ClientHeaders]]
    """What was worked out from each set of client headers seen lately (``client_headers``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._claiming = 0
        self._stashed: tuple[RequestResponseCycle, Any] | None = None
        self._client: ClientHeaders | None = None
        self.receiving: LaneRequest | None = None
        """The lane request whose body is arriving."""
        self.running: set[LaneRequest] = set()

    def on_headers_complete(self) -> None:
        self.receiving = None
        self._stashed = None
        self._claiming = self._claimable()
        try:
            super().on_headers_complete()
        finally:
            claimed, self._claiming = self._claiming, 0
        if self._stashed is not None:
            cycle, app = self._stashed
            self._stashed = None
            assert self._client is not None
            self.receiving = LaneRequest(self, cycle, app, claimed, self._client)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if self._claiming and app is self.app:
            self._stashed = (cycle, app)  # the lane's, until it hands it over
            return
        super()._start_asgi_task(cycle, app)

    def start_cycle(self, cycle: RequestResponseCycle, app: Any) -> None:
        """Run ``cycle`` through the app, as uvicorn does (a request handed over)."""
        super()._start_asgi_task(cycle, app)

    def on_body(self, body: bytes) -> None:
        if self.receiving is None:
            super().on_body(body)
        else:
            self.receiving.feed(body)

    def on_message_complete(self) -> None:
        lane, self.receiving = self.receiving, None
        if lane is None:
            super().on_message_complete()
        else:
            lane.complete()

    def connection_lost(self, exc: Exception | None) -> None:
        for lane in [*self.running, *([self.receiving] if self.receiving else [])]:
            lane.client_gone()
        super().connection_lost(exc)

    def _claimable(self) -> int:
        """The body length of a request the lane may claim, else 0."""
        if self.url != PATH or self.expect_100_continue or self.root_path:
            return 0
        if self.parser.get_method() != b"POST" or self.parser.get_http_version() != "1.1":
            return 0
        length = None
        key = []
        for header in self.headers:
            name = header[0]
            if name == b"content-length":
                if length is not None or not header[1].isdigit():
                    return 0
                length = int(header[1])
                continue
            if name in (b"transfer-encoding", b"upgrade"):
                return 0
            key.append(header)
        if length is None or not KEY_BYTES <= length <= self.proxy.settings.max_body_bytes:
            return 0
        if self.proxy.wire_pool is None:
            return 0
        self._client = self.client_headers(tuple(key))
        return 0 if self._client is None else length

    def client_headers(self, key: HeaderKey) -> ClientHeaders | None:
        """What the lane knows of this request's headers (``key``: all but its length); None
        when the guard refuses them or they name an invalid session (the full path answers
        both)."""
        clients = self.clients
        known = clients.get(key)
        if known is not None:
            return known
        headers = Headers(raw=self.headers)
        if self.guard.refusal(headers, PATH.decode(), "POST") is not None:
            return None
        who = sender(headers)
        if isinstance(who, Response):
            return None
        if len(clients) >= MAX_CLIENTS:
            del clients[next(iter(clients))]
        known = clients[key] = ClientHeaders(who)
        return known
