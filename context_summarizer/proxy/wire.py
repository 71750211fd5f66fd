"""The fast lane's upstream connections: HTTP/1.1 written and read as bytes on asyncio
transports.

The lane (``proxy.lane``) streams a request body upstream while the client is still sending it,
which a client library's request-at-once interface cannot do, and it cannot afford one's
per-request machinery (a 100k-token request must cost well under a millisecond). So this module
speaks the little of HTTP/1.1 the lane needs: one request at a time per connection, a
``Content-Length`` body written as it comes, and a response parsed by ``httptools`` (the parser
uvicorn serves with), its body delivered as it arrives (chunked or not). Failures raise
``httpx2``'s own exception types, so the proxy answers them exactly as it answers the full
path's (``Upstream.failure``: 502 or 504).

A connection serves one exchange after another, pooled between them (``proxy.wire_pool``).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import AsyncIterator, Sequence
from typing import cast

import httptools
import httpx2

_HIGH_WATER = 1024 * 1024
"""Response bytes held unread before the upstream connection stops being read."""

Origin = tuple[str, str, int]
"""(scheme, host, port)."""


class _Expired(Exception):
    """The read timeout passed (``WireConnection._within_timeout`` raises ``ReadTimeout``)."""


def origin_of(parsed: httpx2.URL) -> Origin:
    """The origin a URL's connection goes to."""
    scheme = parsed.scheme
    port = parsed.port or (443 if scheme == "https" else 80)
    return scheme, parsed.host, port


class WireConnection(asyncio.Protocol):
    """One upstream HTTP/1.1 connection, one exchange at a time."""

    def __init__(self, origin: Origin, read_timeout: float) -> None:
        self.origin = origin
        self.read_timeout = read_timeout
        self.transport: asyncio.Transport | None = None
        self.fileno = -1
        """The socket's file descriptor (-1: none known)."""
        self.idle_since = 0.0
        self.broken = False
        """Never to be reused: closed, failed, or mid-exchange when abandoned."""
        self._parser = httptools.HttpResponseParser(self)
        self._loop = asyncio.get_running_loop()
        self._head: asyncio.Future[None] | None = None
        """Resolved once the response's head is in (its whole, for ``whole_response``)."""
        self._head_seen = False
        self._whole = False
        self._deadline: asyncio.TimerHandle | None = None
        self._waited: asyncio.Future[None] | None = None
        self._chunks: deque[bytes] = deque()
        self._held = 0
        self._wake: asyncio.Future[None] | None = None
        self._complete = False
        self._error: httpx2.TransportError | None = None
        self._paused = False
        self._decoder: zlib._Decompress | None = None
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.keep_alive = False

    # -- asyncio.Protocol -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        self.fileno = sock.fileno() if sock is not None else -1

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(httpx2.RemoteProtocolError(f"invalid response from the upstream: {exc}"))

    def eof_received(self) -> bool | None:
        if self._head_seen and self._close_delimited():
            self.on_message_complete()  # a body without a length ends with the connection
        self._fail(httpx2.RemoteProtocolError("the upstream closed the connection"))
        return None

    def _close_delimited(self) -> bool:
        names = {name for name, _ in self.headers}
        return b"content-length" not in names and b"transfer-encoding" not in names

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(httpx2.ReadError(f"the upstream connection was lost: {exc or 'closed'}"))

    # -- httptools callbacks ----------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200:  # an interim answer: the real head follows
            self.headers = []
            return
        self.keep_alive = self._parser.should_keep_alive()
        encoding = dict(self.headers).get(b"content-encoding", b"identity").strip().lower()
        if encoding in (b"gzip", b"x-gzip"):
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == b"deflate":
            self._decoder = zlib.decompressobj()
        elif encoding not in (b"identity", b""):
            error = f"the upstream answered in an unsupported encoding {encoding!r}"
            self._fail(httpx2.RemoteProtocolError(error))
            return
        self._head_seen = True
        self._bytes_arrived()
        if not self._whole and self._head is not None and not self._head.done():
            self._head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._held += len(body)
        if self._held > _HIGH_WATER and self.transport is not None and not self._paused:
            self._paused = True
            self.transport.pause_reading()
        self._bytes_arrived()
        self._signal()

    def on_message_complete(self) -> None:
        if 100 <= self.status < 200:
            return
        self._complete = True
        if self._whole and self._head is not None and not self._head.done():
            self._head.set_result(None)
        self._signal()

    # -- the exchange -----------------------------------------------------------------------------

    def begin(self, head: bytes, body: Sequence[bytes | memoryview] = ()) -> None:
        """Start a request: write its head and the first ``body`` pieces (more follow with
        ``write``)."""
        assert self.transport is not None
        self._head = self._loop.create_future()
        self.status, self.headers, self._complete, self._decoder = 0, [], False, None
        self._head_seen = self._whole = False
        self.transport.writelines([head, *body])

    def write(self, pieces: Sequence[bytes | memoryview]) -> None:
        """Write request body bytes, given as pieces of immutable bytes (a write the socket
        cannot take at once keeps them): one system call for all of them."""
        if self._error is not None:
            return  # reported by response_head
        assert self.transport is not None
        self.transport.writelines(pieces)

    async def response_head(self) -> None:
        """Wait for the response's status and headers (``status``, ``headers``)."""
        assert self._head is not None
        if self._error is not None and not self._head.done():
            raise self._error
        await self._within_timeout(self._head, "the upstream did not answer in time")

    async def whole_response(self) -> None:
        """Wait for the whole response: status, headers and body (``read`` then has it all).
        One wake for the lot, however many packets it came in; the read timeout holds for each
        gap between its bytes, as when reading it piece by piece."""
        assert self._head is not None
        self._whole = True
        if self._error is not None and not self._head.done():
            raise self._error
        if self._head.done() and not self._complete and self._head.exception() is None:
            self._head = self._loop.create_future()  # the head came first: wait for the rest
        await self._within_timeout(self._head, "the upstream did not answer in time")

    async def body(self) -> AsyncIterator[bytes]:
        """The response body as it arrives (decoded from chunked transfer when it is)."""
        while True:
            while self._chunks:
                chunk = self._chunks.popleft()
                self._held -= len(chunk)
                if self._paused and self._held <= _HIGH_WATER // 2 and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                yield self._decoded(chunk)
            if self._complete:
                return
            if self._error is not None:
                raise self._error
            self._wake = self._loop.create_future()
            await self._within_timeout(self._wake, "the upstream stopped sending its answer")

    async def _within_timeout(self, waited: asyncio.Future[None], problem: str) -> None:
        """Wait for ``waited``; past the read timeout (restarted by each arrival of bytes), the
        connection is closed and ``ReadTimeout`` raised."""
        self._waited = waited
        self._deadline = self._loop.call_later(self.read_timeout, self._expire)
        try:
            await waited
        except _Expired:
            self.abandon()
            raise httpx2.ReadTimeout(problem) from None
        finally:
            self._deadline.cancel()
            self._deadline = self._waited = None

    def _expire(self) -> None:
        if self._waited is not None and not self._waited.done():
            self._waited.set_exception(_Expired())

    def _bytes_arrived(self) -> None:
        """Some of the response arrived: a wait for more starts its read timeout again."""
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = self._loop.call_later(self.read_timeout, self._expire)

    def _decoded(self, chunk: bytes) -> bytes:
        """A body chunk without its content encoding (the lane asks for none, and decodes
        what an upstream sends anyway, as the full path's client does)."""
        if self._decoder is None:
            return chunk
        try:
            return self._decoder.decompress(chunk)
        except zlib.error as exc:
            self.abandon()
            error = f"undecodable answer from the upstream: {exc}"
            raise httpx2.RemoteProtocolError(error) from None

    async def read(self) -> bytes:
        """The whole response body."""
        if self._complete and self._decoder is None:  # all in already (``whole_response``)
            body = b"".join(self._chunks)
            self._chunks.clear()
            self._held = 0
            if self._paused and self.transport is not None:
                self._paused = False
                self.transport.resume_reading()
            return body
        return b"".join([chunk async for chunk in self.body()])

    @property
    def complete(self) -> bool:
        """Whether the response has been received whole."""
        return self._complete

    def abandon(self) -> None:
        """Close the connection (an exchange given up midway, or any failure)."""
        self.broken = True
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def _fail(self, error: httpx2.TransportError) -> None:
        self.broken = True
        if self._complete and self._head is not None:
            return  # the exchange had ended: a later close is the idle connection's
        if self._error is None:
            self._error = error
        if self._head is not None and not self._head.done():
            self._head.set_exception(error)
            self._head.exception()  # retrieved: response_head re-raises it
        self._signal()

    def _signal(self) -> None:
        wake, self._wake = self._wake, None
        if wake is not None and not wake.done():
            wake.set_result(None)
