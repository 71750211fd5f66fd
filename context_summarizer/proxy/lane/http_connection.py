"""One client connection of the proxy's HTTP/1.1 server (``lane.http_server``): requests parsed
by httptools' public parser, the ASGI app run for each in turn, answers framed and written.

What a connection does: HTTP/1.1 and 1.0, keep-alive, pipelining (requests answered one at a
time, in order), ``Expect: 100-continue``, request bodies by length or chunked (the parser
refuses both at once, and any other ambiguity, with a 400), answers by length, chunked (1.1) or
ended by closing (1.0), ``HEAD``, backpressure both ways. A request's head must be whole within
``header_timeout`` of its first byte and within ``MAX_HEAD_BYTES`` (else 408 or 431, and the
connection closes); an idle connection closes after ``idle_timeout``. A WebSocket upgrade is
served as a plain request (the app refuses it with 426) and the connection then closes.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any
from urllib.parse import unquote

import httptools

from .http_cycle import Cycle, Request, Serving

HIGH_WATER = 65_536
"""Body bytes buffered for the app before the connection stops reading."""

MAX_HEAD_BYTES = 65_536
"""The most a request line and its headers may take together."""

_TOO_LARGE = f"The request's line and headers exceed {MAX_HEAD_BYTES} bytes."

LINGER = 2.0
"""Seconds a connection closing on a request it did not read whole goes on reading (and
dropping) what the client still sends."""


class Connection(asyncio.Protocol):
    """One client connection: parses its requests and runs the app for each, in order."""

    def __init__(self, server: Serving) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None  # uvloop's transports are no asyncio.Transport subclass
        self.addresses: tuple[tuple[str, int] | None, tuple[str, int] | None] = (None, None)
        """The server's and the client's (host, port)."""
        self.pending: deque[Request] = deque()
        """Requests parsed and not yet answered (the first is being answered)."""
        self.parsing: Request | None = None
        self.head_bytes = 0
        self.head_read = 0
        """Bytes read while a head was unfinished, after the read it began in: httptools holds
        a header until it ends, so ``on_header`` alone cannot keep an endless one in bounds."""
        self.head_began = False
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self.closed = False
        self.lingering = False
        """Answered and closing: what the client still sends is read and dropped (closing a
        socket with unread bytes resets it, and the client could lose the answer)."""
        self.upgraded = False
        self.broken = False
        """A pipelined request after the one being answered could not be parsed: the
        connection closes once the answers before it are written."""
        self.reading_paused = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.changed = asyncio.Event()
        """Set whenever a body piece arrives, the body ends or the connection is lost."""
        self.timer: asyncio.TimerHandle | None = None
        self.in_head = False
        """Whether a request's head has begun and is not yet whole."""

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.addresses = (
            _address(transport.get_extra_info("sockname")),
            _address(transport.get_extra_info("peername")),
        )
        self.server.opened(self)
        self._wait(self.server.idle_timeout, idle=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.closed(self)
        self._stop_timer()
        self.writable.set()
        self.changed.set()

    def data_received(self, data: bytes) -> None:
        if self.closed or self.lingering:
            return
        if not self.in_head and not self.pending and self.parsing is None:
            # The first bytes of a request: its head must now arrive in time.
            self.in_head = True
            self._wait(self.server.header_timeout, idle=False)
        self.head_began = False
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.upgraded = True  # served as a plain request; nothing after it is read
            self.transport.pause_reading()
        except httptools.HttpParserError:
            # (A callback's exception reaches here too, as the parser's own error.)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._fail(431, _TOO_LARGE)
            else:
                self._fail(400, "The request is not valid HTTP/1.1.")
        else:
            if self.in_head and not self.head_began:
                self.head_read += len(data)
                if self.head_read > MAX_HEAD_BYTES:
                    self._fail(431, _TOO_LARGE)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # -- httptools callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self.head_bytes = 0
        self.head_began = True
        if not self.in_head:
            self.in_head = True
            self._wait(self.server.header_timeout, idle=False)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value))
        self._headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_read = 0
        self._stop_timer()
        url = httptools.parse_url(self._url)
        raw_path: bytes = url.path or b"/"
        path = raw_path.decode("latin-1")
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": self.parser.get_http_version(),
            "server": self.addresses[0],
            "client": self.addresses[1],
            "scheme": "http",
            "method": self.parser.get_method().decode("ascii"),
            "root_path": "",
            "path": unquote(path) if "%" in path else path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": self._headers,
            "state": dict(self.server.state),
        }
        expects = any(n == b"expect" and v.lower() == b"100-continue" for n, v in self._headers)
        request = Request(scope, expects, self.parser.should_keep_alive())
        self.parsing = request
        self.pending.append(request)
        if len(self.pending) == 1:
            self._run(request)

    def on_body(self, body: bytes) -> None:
        request = self.parsing
        if request is None:
            return
        request.chunks.append(body)
        request.buffered += len(body)
        self.changed.set()
        if request.buffered > HIGH_WATER and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        request = self.parsing
        if request is not None:
            request.complete = True
            self.changed.set()
        self.parsing = None
        if len(self.pending) > 1 and not self.reading_paused:
            # Pipelined: read no further until the requests before are answered.
            self.reading_paused = True
            self.transport.pause_reading()

    # -- running the app --------------------------------------------------------------------

    def _run(self, request: Request) -> None:
        self.server.start(Cycle(self, request).run())

    def resume_reading(self) -> None:
        """Read again (the app took the buffered body, or a request is answered)."""
        if self.reading_paused and not self.closed and not self.upgraded:
            self.reading_paused = False
            self.transport.resume_reading()

    def answered(self, request: Request, *, keep_alive: bool) -> None:
        """``request``'s answer is written: close, or take up the next request."""
        self.pending.popleft()
        if not request.complete:
            # A body the app left unread is not skipped over: the connection ends instead.
            self.close_lingering()
            return
        if not keep_alive or self.upgraded or self.server.stopping:
            self.close()
            return
        if self.pending:
            self._run(self.pending[0])
        elif self.broken:
            self.close()
            return
        elif not self.in_head:
            self._wait(self.server.idle_timeout, idle=True)
        if not self.broken:
            self.resume_reading()

    def close(self) -> None:
        """Close the connection (after what is written)."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self._stop_timer()
            self.transport.close()
            self.changed.set()

    def close_lingering(self) -> None:
        """Close once the client stops sending (within ``LINGER`` seconds): what was written
        reaches it rather than a reset."""
        if self.closed or self.lingering:
            return
        self.lingering = True
        self._stop_timer()
        self.parsing = None
        self.changed.set()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()
        self.timer = asyncio.get_running_loop().call_later(LINGER, self.close)

    def eof_received(self) -> None:
        if self.lingering:
            self.close()

    @property
    def gone(self) -> bool:
        """Whether the connection is closed or closing: nothing more is read or written."""
        return self.closed or self.lingering

    def write(self, data: bytes) -> None:
        """Write ``data`` unless the connection is closed or closing."""
        if not self.gone:
            self.transport.write(data)

    def _fail(self, status: int, message: str) -> None:
        """Refuse what cannot be served: answered at once when no request is under way, the
        connection closed at once when the request under way is the one at fault, else after
        the answers before it."""
        if not self.pending:
            path = self._url.partition(b"?")[0].decode("latin-1")
            self.write(self.server.refusal(path, status, message))
        elif self.parsing is None:
            self.broken = True
            self.transport.pause_reading()
            return
        self.close_lingering()

    def _count(self, size: int) -> None:
        self.head_bytes += size
        if self.head_bytes > MAX_HEAD_BYTES:
            raise ValueError("the request's head is too large")  # stops the parser

    def _wait(self, seconds: float, *, idle: bool) -> None:
        """Close the connection if, within ``seconds``, no request's head (``idle``: no byte
        of a request) arrives."""
        self._stop_timer()
        self.timer = asyncio.get_running_loop().call_later(seconds, self._timed_out, idle)

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self, idle: bool) -> None:
        self.timer = None
        if idle:
            if not self.pending and not self.in_head:
                self.close()
        elif self.in_head:
            self._fail(408, "The request's line and headers did not arrive in time.")


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None
