"""One request the lane claimed (``proxy.lane``): its body streamed upstream on a guess as it
arrives, then proven (``prove``) for the answer (``lane.answer``), or given up for the full path
(``HandOver``)."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import Any

import httpx2
from starlette.datastructures import Headers

from ..body import kept_lead
from ..chat_request import ChatRequest
from ..fast_path import KEY_BYTES
from ..managed_request import Sender
from ..model_routes import ModelRoute
from ..remembered import Remembered
from ..wire import Origin, WireConnection, origin_of
from .arrived import ArrivedBody
from .bound import fits_unlocated
from .services import LaneServices

UPSTREAM_PATH = ChatRequest.upstream_path


@dataclass(slots=True)
class ClientHeaders:
    """What the lane works out from a set of client headers, once: an agent sends the same
    ones with every request. Kept only for headers the proxy's guard lets through."""

    who: Sender
    """Who sends them: the credential's namespace and the session they name."""
    heads: dict[ModelRoute, bytes] = field(default_factory=dict)
    """The upstream request head before ``content-length``, per route (``LaneRequest._head``)."""


@dataclass(frozen=True, slots=True)
class HandOver:
    """The full path takes the request, with the body read so far. ``parsed``: what the fast
    path made of a whole body (None: parse it whole); ``tried``: the fast path tried it (so
    the full path does not try again); ``overflowed``: the upstream refused the lane's send of
    it as too long."""

    parsed: ChatRequest | None = None
    tried: bool = False
    overflowed: bool = False


@dataclass(frozen=True, slots=True)
class Proven:
    """A whole body proven to be the request ``parsed``; ``early``: its last bytes went
    upstream already, before it is located."""

    parsed: ChatRequest
    early: bool


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
    """One claimed request: its body streamed upstream on a guess as it arrives (``feed``),
    then proven (``prove``) and its last bytes sent (``send_rest``), or the upstream request
    dropped unfinished (``drop_upstream``)."""

    def __init__(
        self, services: LaneServices, client: ClientHeaders, headers: Headers, length: int
    ) -> None:
        self.services = services
        self.client = client
        self.headers = headers
        self.length = length
        self.body = ArrivedBody()
        self.checked = 0
        """Bytes of the body found equal to the guessed body's (up to its last message)."""
        self.sent = 0
        """Body bytes written upstream (the body's own offsets)."""
        self.known: Remembered | None = None
        self.route: ModelRoute | None = None
        self.target: _Target | None = None
        self.lead = (b"", 0)
        self.messages: list[Any] = []
        """The guessed body's messages, copied while the body streams: ``prove`` extends them
        with the new ones (no walk of the whole history between the last byte and its send)."""
        self.wire: WireConnection | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.dropped = False
        """Whether the guessed upstream request was given up."""

    # -- the body, as it arrives -------------------------------------------------------------

    def feed(self, piece: bytes) -> bool:
        """More of the body: checked against the guess and streamed upstream. False when the
        lane gives the request up (no guess, a differing byte, more bytes than announced)."""
        self.body.append(piece)
        if len(self.body) > self.length:
            return False
        if self.known is None:
            if len(self.body) < KEY_BYTES:
                return True
            if not self._guess():
                return False
        if not self._matches():
            return False
        self._stream()
        return True

    def prove(self) -> Proven | HandOver:
        """The whole body is in: the request it proves to be (its last bytes sent at once when
        it provably fits unlocated), or the hand-over."""
        fast = self.services.fast_path
        known = self.known
        if known is None or len(self.body) != self.length:
            return HandOver()
        who = self.client.who
        # The common case: the body extends the guessed one (its bytes before the guess's last
        # message are compared already). Proven from its new bytes alone, and its last bytes
        # sent when that proves it fits, before the whole body is joined and its request built.
        extended = None
        if self.checked >= known.end:
            after = b"".join(self.body.views(known.end, self.length))
            extended = fast.extension(known, after, self.length)
        if extended is not None:
            messages = self.messages
            if len(messages) != len(known.body["messages"]):  # not copied (yet)
                messages = [*known.body["messages"]]
            messages += extended[0]
            early = self.wire is not None and fits_unlocated(
                self.services.exchange.tally, self.route, known, messages, self.length, who[0]
            )
            if early:
                self.send_early()
            parsed = fast.adopt(known, self.body.joined(), extended, self.headers, who)
            return Proven(parsed, early)
        raw = self.body.joined()
        found = fast.parse(raw, self.headers, who=who, proven=(known, self.checked))
        if found is None:
            return HandOver(tried=True)
        early = self.wire is not None and self._fits_unlocated(found)
        if early:
            self.send_early()
        return Proven(found, early)

    def _guess(self) -> bool:
        """Open the upstream request for the body this one most likely extends."""
        fast = self.services.fast_path
        pool = self.services.wires
        if not pool.serving:
            return False
        known = fast.newest(b"".join(self.body.views(0, KEY_BYTES)), self.client.who)
        if known is None or known.end > self.length:
            return False
        lead = kept_lead(known.raw, known.body, stream=known.body.get("stream") is True)
        if lead is None:
            return False
        self.known, self.lead, self.sent = known, lead, lead[1]
        self.route = self.services.upstream.route_for(known.body["model"])
        self.target = _target(self.route)
        wire = pool.idle(self.target.origin)
        if wire is None:
            self.connecting = asyncio.get_running_loop().create_task(
                self._connect(self.target.origin)
            )
        else:
            self._begin(wire)
        self.messages = [*known.body["messages"]]  # once its first bytes are on their way
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
        forwarded = self.services.upstream.forward_headers(
            self.headers, drop=("accept-encoding",), key_header="authorization", route=self.route
        )
        names = {name for name, _ in forwarded}
        defaults = [
            (name, value)
            for name, value in self.services.upstream.http.headers.items()
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

    async def _connect(self, origin: Origin) -> None:
        pool = self.services.wires
        if not pool.serving:
            return
        try:
            wire = await pool.connect(origin)
        except httpx2.TransportError:
            return  # the full path will meet the same upstream and answer for it
        if self.dropped:
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
            self.services.exchange.tally,
            self.route,
            previous,
            parsed.body["messages"],
            len(parsed.raw),
            parsed.namespace,
        )

    # -- the upstream request ---------------------------------------------------------------------

    def send_early(self) -> None:
        """``send_rest`` before the request is located (it is located while the upstream
        works): counted as ``sent_early``."""
        self.services.metrics.lane.labels("sent_early").inc()
        self.send_rest()

    def send_rest(self) -> None:
        """Send the body's last bytes: from here the lane answers, whatever comes."""
        assert self.wire is not None
        self.wire.write(self.body.views(self.sent, self.length))
        self.sent = self.length

    def drop_upstream(self) -> None:
        """Close the guessed upstream request, unfinished: the upstream never acts on it."""
        self.dropped = True
        if self.connecting is not None:
            self.connecting.cancel()
        self.let_go(keep=False)

    def let_go(self, *, keep: bool) -> None:
        """Be done with the upstream connection: back to the pool when ``keep`` and its
        exchange ended so that it can serve another (and the pool still serves), else closed."""
        wire, self.wire = self.wire, None
        pool = self.services.wires
        if wire is not None:
            if keep and pool.serving:
                pool.release(wire)
            else:
                pool.discard(wire)
