"""One request the lane claimed (``proxy.lane``): its body streamed upstream on a guess as it
arrives, then proven and answered (``proxy.lane_answer``), or handed over to the full path."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx2
from starlette.datastructures import Headers
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from ..body import kept_lead
from ..chat import HANDED_OVER, OVERFLOWED
from ..chat_request import ChatRequest
from ..fast_path import KEY_BYTES, Remembered
from ..model_routes import ModelRoute
from ..wire import Origin, WireConnection, origin_of
from .answer import LaneAnswer
from .arrived import ArrivedBody
from .bound import fits_unlocated

if TYPE_CHECKING:
    from .front import ClientHeaders, LaneProtocol

UPSTREAM_PATH = ChatRequest.upstream_path


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a route's chat requests go: the connection's origin, the request target and the
    ``Host`` header."""

    origin: Origin
    path: str
    host: str


@functools.lru_cache(maxsize=256)
def _target(route: ModelRoute) -> _Target:
    url = httpx2.URL(route.url(UPSTREAM_PATH))
    return _Target(origin_of(url), url.raw_path.decode("ascii"), url.netloc.decode("ascii"))


_MAY_END = b"} \t\r\n"
"""Bytes a JSON object's text can end with."""


class LaneRequest:
    """One claimed request: its body streamed upstream on a guess, then proven, answered, or
    handed over."""

    def __init__(
        self,
        protocol: LaneProtocol,
        cycle: RequestResponseCycle,
        app: Any,
        length: int,
        client: ClientHeaders,
    ) -> None:
        self.protocol = protocol
        self.cycle = cycle
        self.app = app
        self.length = length
        self.client = client
        self.state = protocol.proxy
        self.started = time.time()
        self.headers = Headers(raw=list(cycle.scope["headers"]))
        self.body = ArrivedBody()
        self.checked = 0
        """Bytes of the body found equal to the guessed body's (up to its last message)."""
        self.sent = 0
        """Body bytes written upstream (the body's own offsets)."""
        self.known: Remembered | None = None
        self.route: ModelRoute | None = None
        self.target: _Target | None = None
        self.lead = (b"", 0)
        self.wire: WireConnection | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.handed = False
        self.written = False
        """Whether any of the answer has been written to the client."""
        self.task: asyncio.Task[None] | None = None
        loop = protocol.loop
        self.timer = loop.call_later(self.state.settings.body_read_timeout, self._too_slow)

    # -- the body, as it arrives -------------------------------------------------------------

    def feed(self, body: bytes) -> None:
        """More of the body: checked against the guess and streamed upstream."""
        self.body.append(body)
        if self.known is None:
            if len(self.body) < KEY_BYTES:
                return
            if not self._guess():
                self.hand_over(None, whole=False)
                return
        if not self._matches():
            self.hand_over(None, whole=False)
            return
        self._stream()

    def complete(self) -> None:
        """The whole body is in: prove it, then answer it on the lane or hand it over."""
        self.timer.cancel()
        if self.handed:
            return
        if self.known is None:
            self.hand_over(None, whole=True)
            return
        fast = self.state.fast_path
        known, who = self.known, self.client.who
        assert fast is not None
        # The common case: the body extends the guessed one (its bytes before the guess's last
        # message are compared already). Proven from its new bytes alone, and its last bytes
        # sent when that proves it fits, before the whole body is joined and its request built.
        extended = None
        if self.checked >= known.end:
            after = b"".join(self.body.views(known.end, self.length))
            extended = fast.extension(known, after, self.length)
        if extended is not None:
            messages = [*known.body["messages"], *extended[0]]
            early = self.wire is not None and fits_unlocated(
                self.state, self.route, known, messages, self.length, who[0]
            )
            if early:
                self.send_early()
            parsed = fast.adopt(known, self.body.joined(), extended, self.headers, who)
        else:
            raw = self.body.joined()
            found = fast.parse(raw, self.headers, who=who, proven=(known, self.checked))
            if found is None:
                self.hand_over(None, whole=True, tried=True)
                return
            parsed = found
            early = self.wire is not None and self._fits_unlocated(parsed)
            if early:
                self.send_early()
        self.task = self.protocol.loop.create_task(LaneAnswer(self, parsed, early).run())
        self.protocol.running.add(self)
        self.task.add_done_callback(lambda _: self.protocol.running.discard(self))

    def _guess(self) -> bool:
        """Open the upstream request for the body this one most likely extends."""
        fast = self.state.fast_path
        assert fast is not None
        known = fast.newest(b"".join(self.body.views(0, KEY_BYTES)), self.client.who)
        if known is None or known.end > self.length:
            return False
        lead = kept_lead(known.raw, known.body, stream=known.body.get("stream") is True)
        if lead is None:
            return False
        self.known, self.lead, self.sent = known, lead, lead[1]
        self.route = self.state.route_for(known.body["model"])
        self.target = _target(self.route)
        pool = self.state.wire_pool
        assert pool is not None
        wire = pool.idle(self.target.origin)
        if wire is None:
            self.connecting = self.protocol.loop.create_task(self._connect(self.target.origin))
        else:
            self._begin(wire)
        return True

    def _head(self) -> bytes:
        """The upstream request's head: the full path's headers (``forward_headers`` plus the
        client library's defaults it would add), for the guessed route. An agent sends the same
        headers with every request, so the head before ``content-length`` is kept per route
        with what else the lane knows of the client's headers (``ClientHeaders``)."""
        assert self.route is not None
        size = self.length - self.lead[1] + len(self.lead[0])
        heads = self.client.heads
        start = heads.get(self.route)
        if start is None:
            start = heads[self.route] = self._head_start()
        return b"%bcontent-length: %d\r\n\r\n" % (start, size)

    def _head_start(self) -> bytes:
        """The head's lines before ``content-length``."""
        assert self.route is not None and self.target is not None
        forwarded = self.state.forward_headers(
            self.headers, drop=("accept-encoding",), api="openai", route=self.route
        )
        names = {name for name, _ in forwarded}
        defaults = [
            (name, value)
            for name, value in self.state.http.headers.items()
            if name not in names and name != "accept-encoding"
        ]
        lines = [
            f"POST {self.target.path} HTTP/1.1",
            f"host: {self.target.host}",
            *(f"{name}: {value}" for name, value in [*defaults, *forwarded]),
            "accept-encoding: identity",
        ]
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def _sendable(self) -> int:
        """How much of the body may go upstream before it is proven: never its last byte (the
        upstream cannot act on an unfinished body), and never a prefix that ends with ``}`` and
        whitespace, so that even a server that took a cut-off body as whole could not read a
        JSON object from it."""
        until = min(len(self.body), self.length - 1)
        while until > self.sent and self.body.byte(until - 1) in _MAY_END:
            until -= 1
        return until

    def _begin(self, wire: WireConnection) -> None:
        self.wire = wire
        until = max(self._sendable(), self.sent)
        wire.begin(self._head() + self.lead[0], self.body.views(self.sent, until))
        self.sent = until

    async def _connect(self, origin: Any) -> None:
        pool = self.state.wire_pool
        assert pool is not None
        try:
            wire = await pool.connect(origin)
        except httpx2.TransportError:
            return  # the full path will meet the same upstream and answer for it
        if self.handed:
            pool.discard(wire)
            return
        self._begin(wire)

    def _matches(self) -> bool:
        """Whether the bytes in so far agree with the guessed body up to its last message."""
        assert self.known is not None
        end = min(len(self.body), self.known.end)
        if self.checked < end:
            if not self.body.same_as(self.known.raw, self.checked, end):
                return False
            self.checked = end
        return True

    def _stream(self) -> None:
        """Write upstream what has arrived, short of anything that could end the body."""
        if self.wire is None:
            return
        until = self._sendable()
        if until > self.sent:
            self.wire.write(self.body.views(self.sent, until))
            self.sent = until

    def _too_slow(self) -> None:
        """The client takes longer than ``body_read_timeout``: the full path times it."""
        if not self.handed:
            self.hand_over(None, whole=False)

    # -- handing over -------------------------------------------------------------------------

    def hand_over(
        self,
        parsed: ChatRequest | None,
        *,
        whole: bool,
        tried: bool = False,
        overflowed: bool = False,
    ) -> None:
        """Give the request to uvicorn's cycle and the app, with the body read so far."""
        if self.handed:
            return
        self.handed = True
        self.timer.cancel()
        self.drop_upstream()
        self.state.metrics.lane.labels("handed_over").inc()
        protocol, cycle = self.protocol, self.cycle
        if protocol.receiving is self:
            protocol.receiving = None  # the rest of the body goes to uvicorn's on_body
        cycle.body = bytearray().join(self.body.pieces)  # uvicorn's on_body appends the rest
        if whole:
            cycle.more_body = False
            if parsed is not None or tried:
                cycle.scope["state"][HANDED_OVER] = parsed
            if overflowed:
                cycle.scope["state"][OVERFLOWED] = True
        elif len(cycle.body) > HIGH_WATER_LIMIT:
            protocol.flow.pause_reading()
        cycle.message_event.set()
        protocol.start_cycle(cycle, self.app)

    def drop_upstream(self) -> None:
        """Close the guessed upstream request, unfinished: the upstream never acts on it."""
        if self.connecting is not None:
            self.connecting.cancel()
        self.let_go(keep=False)

    def let_go(self, *, keep: bool) -> None:
        """Be done with the upstream connection: back to the pool when ``keep`` and its
        exchange ended so that it can serve another, else closed. (Once the proxy has closed
        its pool, every connection is closed already.)"""
        wire, self.wire = self.wire, None
        pool = self.state.wire_pool
        if wire is not None and pool is not None:
            if keep:
                pool.release(wire)
            else:
                pool.discard(wire)

    def client_gone(self) -> None:
        """The client closed its connection: a body still arriving is handed over (the full
        path notes a client gone mid-upload, 499); an answer under way is dropped."""
        self.timer.cancel()
        if self.task is not None:
            self.task.cancel()
            self.handed = True
            self.drop_upstream()
        elif not self.handed:
            self.hand_over(None, whole=False)

    # -- the answer ---------------------------------------------------------------------------

    def _fits_unlocated(self, parsed: ChatRequest) -> bool:
        """``fits_unlocated`` for a request proven to extend another remembered body than the
        guessed one: it must also go upstream as the same bytes."""
        previous = parsed.previous
        if (
            previous is None
            or kept_lead(parsed.raw, parsed.body, stream=parsed.stream) != self.lead
        ):
            return False
        return fits_unlocated(
            self.state,
            self.route,
            previous,
            parsed.body["messages"],
            len(parsed.raw),
            parsed.namespace,
        )

    def send_early(self) -> None:
        """``send_rest`` before the request is located (it is located while the upstream
        works): counted as ``sent_early``."""
        self.state.metrics.lane.labels("sent_early").inc()
        self.send_rest()

    def send_rest(self) -> None:
        """Send the body's last bytes: from here the lane answers, whatever comes."""
        assert self.wire is not None
        self.handed = True
        self.timer.cancel()
        self.wire.write(self.body.views(self.sent, self.length))
        self.sent = self.length
