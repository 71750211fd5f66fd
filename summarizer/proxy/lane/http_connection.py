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
import logging
import time
from collections import deque
from email.utils import formatdate
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import httptools
from starlette.types import Message

if TYPE_CHECKING:
    from .http_server import HttpServer

logger = logging.getLogger("summarizer.proxy")
access_logger = logging.getLogger("summarizer.access")

HIGH_WATER = 65_536
"""Body bytes buffered for the app before the connection stops reading."""

MAX_HEAD_BYTES = 65_536
"""The most a request line and its headers may take together."""

_TOO_LARGE = f"The request's line and headers exceed {MAX_HEAD_BYTES} bytes."

LINGER = 2.0
"""Seconds a connection closing on a request it did not read whole goes on reading (and
dropping) what the client still sends."""


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


class _Date:
    """The ``date`` header's value, formatted once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = b""

    def value(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._value = formatdate(now, usegmt=True).encode("ascii")
        return self._value


_DATE = _Date()


class _Request:
    """One request as parsed: its scope, its body as it arrives, and whether it is whole."""

    __slots__ = ("buffered", "chunks", "complete", "expects_continue", "keep_alive", "scope")

    def __init__(self, scope: dict[str, Any], expects_continue: bool, keep_alive: bool) -> None:
        self.scope = scope
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.expects_continue = expects_continue
        self.keep_alive = keep_alive


class Connection(asyncio.Protocol):
    """One client connection: parses its requests and runs the app for each, in order."""

    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None  # uvloop's transports are no asyncio.Transport subclass
        self.addresses: tuple[tuple[str, int] | None, tuple[str, int] | None] = (None, None)
        """The server's and the client's (host, port)."""
        self.pending: deque[_Request] = deque()
        """Requests parsed and not yet answered (the first is being answered)."""
        self.parsing: _Request | None = None
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
        self.server.connections.add(self)
        self._wait(self.server.idle_timeout, idle=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
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
        request = _Request(scope, expects, self.parser.should_keep_alive())
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

    def _run(self, request: _Request) -> None:
        self.server.start(_Cycle(self, request).run())

    def resume_reading(self) -> None:
        """Read again (the app took the buffered body, or a request is answered)."""
        if self.reading_paused and not self.closed and not self.upgraded:
            self.reading_paused = False
            self.transport.resume_reading()

    def answered(self, request: _Request, *, keep_alive: bool) -> None:
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


class _Cycle:
    """One request's run of the app: its ``receive`` and ``send``."""

    def __init__(self, connection: Connection, request: _Request) -> None:
        self.connection = connection
        self.request = request
        self.head: bytes | None = None
        """The answer's head, written with its first body bytes."""
        self.status = 0
        self.started = False
        self.chunked = False
        self.close_delimited = False
        self.bodiless = request.scope["method"] == "HEAD"
        self.keep_alive = request.keep_alive
        self.finished = False
        self.body_given = False

    async def run(self) -> None:
        """Run the app for the request; answer 500 (and close) if it fails before any of its
        answer is written."""
        scope = self.request.scope
        try:
            await self.connection.server.app(scope, self.receive, self.send)
        except Exception:
            logger.exception("the app failed on %s %s", scope["method"], scope["path"])
        finally:
            if not self.finished:
                if not self.started or self.head is not None:  # (a head held is not written)
                    self.status = 500
                    refusal = self.connection.server.refusal
                    message = "The server failed to handle this request."
                    self.connection.write(refusal(scope["path"], 500, message))
                self.keep_alive = False
            self._log()
            self.connection.answered(self.request, keep_alive=self.keep_alive)

    async def receive(self) -> Message:
        """The next piece of the body, or ``http.disconnect`` once the client is gone (after the
        whole body: once the client is gone or the answer is finished)."""
        request, connection = self.request, self.connection
        if request.expects_continue and not self.started and not request.complete:
            request.expects_continue = False
            connection.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if self.body_given:
            while not connection.gone and not self.finished:
                connection.changed.clear()
                await connection.changed.wait()
            return {"type": "http.disconnect"}
        while not request.chunks and not request.complete and not connection.gone:
            connection.changed.clear()
            await connection.changed.wait()
        if not request.chunks and not request.complete:
            return {"type": "http.disconnect"}
        chunks = request.chunks
        body = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        request.buffered = 0
        if len(connection.pending) == 1:  # (a pipelined request waits with reading paused)
            connection.resume_reading()
        self.body_given = request.complete
        return {"type": "http.request", "body": body, "more_body": not request.complete}

    async def send(self, message: Message) -> None:
        """Frame and write an answer's head (held for its first body bytes) and body."""
        connection = self.connection
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("the answer was already started")
            self.head = self._head(message)
            self.started = True
            return
        if kind != "http.response.body" or not self.started or self.finished:
            return
        body: bytes = message.get("body", b"")
        more = bool(message.get("more_body", False))
        out = self.head or b""
        self.head = None
        if not self.bodiless:
            if self.chunked:
                if body:
                    out += b"%x\r\n%b\r\n" % (len(body), body)
                if not more:
                    out += b"0\r\n\r\n"
            else:
                out += body
        if out:
            connection.write(out)
        if not more:
            self.finished = True
            connection.changed.set()  # a ``receive`` waiting for the end returns
            if self.close_delimited:
                self.keep_alive = False
        elif not connection.writable.is_set() and not connection.gone:
            await connection.writable.wait()

    def _head(self, message: Message) -> bytes:
        status = self.status = int(message["status"])
        headers = [(bytes(n).lower(), bytes(v)) for n, v in message.get("headers", ())]
        names = {name for name, _ in headers}
        if status in (204, 304) or status < 200:
            self.bodiless = True
        elif b"content-length" not in names and not self.bodiless:
            if self.request.scope["http_version"] == "1.1":
                self.chunked = True
                headers.append((b"transfer-encoding", b"chunked"))
            else:  # HTTP/1.0 has no chunks: the body ends with the connection
                self.close_delimited = True
                self.keep_alive = False
        if any(n == b"connection" and v.lower() == b"close" for n, v in headers):
            self.keep_alive = False
        if self.connection.server.stopping:
            self.keep_alive = False
        if not self.keep_alive and b"connection" not in names:
            headers.append((b"connection", b"close"))
        elif self.keep_alive and self.request.scope["http_version"] == "1.0":
            headers.append((b"connection", b"keep-alive"))
        if b"date" not in names:
            headers.insert(0, (b"date", _DATE.value()))
        lines = [b"HTTP/1.1 %d %b\r\n" % (status, _phrase(status))]
        lines.extend(b"%b: %b\r\n" % header for header in headers)
        lines.append(b"\r\n")
        return b"".join(lines)

    def _log(self) -> None:
        """The access log's line, as uvicorn wrote it: the path as sent, without its query
        (which may carry a key)."""
        if not self.connection.server.access_log or not access_logger.isEnabledFor(logging.INFO):
            return
        scope = self.request.scope
        client = scope["client"]
        where = f"{client[0]}:{client[1]}" if client else "-"
        path = scope["raw_path"].decode("latin-1")
        access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            where,
            scope["method"],
            path,
            scope["http_version"],
            self.status,
        )


def _address(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None


def plain_refusal(path: str, status: int, message: str) -> bytes:
    """A whole plain-text answer with ``message`` that closes the connection."""
    return closing_answer(status, b"text/plain; charset=utf-8", message.encode())


def closing_answer(status: int, content_type: bytes, body: bytes) -> bytes:
    """A whole answer with ``body`` that closes the connection."""
    return (
        b"HTTP/1.1 %d %b\r\ncontent-type: %b\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n%b" % (status, _phrase(status), content_type, len(body), body)
    )
