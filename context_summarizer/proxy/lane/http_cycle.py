"""One request's run of the ASGI app on a connection of the proxy's HTTP/1.1 server
(``lane.http_connection``): the request as parsed, its ``receive`` and ``send``, and how an
answer is framed (a head written with its first body bytes; chunked on HTTP/1.1, ended by
closing on 1.0, when the app gives no length)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from email.utils import formatdate
from http import HTTPStatus
from typing import Any, Protocol
from urllib.parse import unquote

from starlette.types import ASGIApp, Message

logger = logging.getLogger("context_summarizer.proxy")
access_logger = logging.getLogger("summarizer.access")

Refusal = Callable[[str, int, str], bytes]
"""What the server answers on its own (a request it cannot parse, a head too large or too slow,
an app that failed before answering): ``(path, status, message)`` to the whole answer's bytes,
one that closes the connection."""


class Serving(Protocol):
    """What a connection and its requests need of the server (``http_server.HttpServer``)."""

    app: ASGIApp
    idle_timeout: float
    header_timeout: float
    access_log: bool
    refusal: Refusal
    stopping: bool
    state: dict[str, Any]

    def start(self, cycle: Coroutine[Any, Any, None]) -> None:
        """Run a request's cycle as a task."""

    def opened(self, connection: object) -> None:
        """A connection is made."""

    def closed(self, connection: object) -> None:
        """A connection is lost."""


class Link(Protocol):
    """What a request's cycle needs of its connection (``http_connection.Connection``)."""

    server: Serving
    pending: deque[Request]
    changed: asyncio.Event
    writable: asyncio.Event

    @property
    def gone(self) -> bool:
        """Whether the connection is closed or closing."""

    def write(self, data: bytes) -> None:
        """Write unless gone."""

    def resume_reading(self) -> None:
        """Read again."""

    def answered(self, request: Request, *, keep_alive: bool) -> None:
        """The request's answer is written."""


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


class Request:
    """One request as parsed: its scope, its body as it arrives, and whether it is whole."""

    __slots__ = ("buffered", "chunks", "complete", "expects_continue", "keep_alive", "scope")

    def __init__(self, scope: dict[str, Any], expects_continue: bool, keep_alive: bool) -> None:
        self.scope = scope
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.expects_continue = expects_continue
        self.keep_alive = keep_alive


class Cycle:
    """One request's run of the app: its ``receive`` and ``send``."""

    def __init__(self, connection: Link, request: Request) -> None:
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
        """The access log's line, as uvicorn wrote it: the target as sent, the values of its
        credential parameters (``key``, ``api_key``, ``token``...) replaced (``logged_query``)."""
        if not self.connection.server.access_log or not access_logger.isEnabledFor(logging.INFO):
            return
        scope = self.request.scope
        client = scope["client"]
        where = f"{client[0]}:{client[1]}" if client else "-"
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + logged_query(scope["query_string"])
        access_logger.info(
            '%s - "%s %s HTTP/%s" %d',
            where,
            scope["method"],
            target,
            scope["http_version"],
            self.status,
        )


CREDENTIAL_PARAMETERS = frozenset(
    {"key", "api-key", "api_key", "apikey", "token", "access_token", "auth", "password", "secret"}
)
"""Query parameters whose values the access log never shows (Gemini's API takes ``?key=``)."""


def logged_query(query: bytes) -> str:
    """``query`` as the access log shows it: each credential parameter's value replaced by
    ``[redacted]``, every other parameter as sent."""
    shown = []
    for pair in query.decode("latin-1").split("&"):
        name, equals, _ = pair.partition("=")
        if unquote(name).strip().lower() in CREDENTIAL_PARAMETERS:
            shown.append(f"{name}{equals}[redacted]")
        else:
            shown.append(pair)
    return "&".join(shown)


def plain_refusal(path: str, status: int, message: str) -> bytes:
    """A whole plain-text answer with ``message`` that closes the connection."""
    return closing_answer(status, b"text/plain; charset=utf-8", message.encode())


def closing_answer(status: int, content_type: bytes, body: bytes) -> bytes:
    """A whole answer with ``body`` that closes the connection."""
    return (
        b"HTTP/1.1 %d %b\r\ncontent-type: %b\r\ncontent-length: %d\r\n"
        b"connection: close\r\n\r\n%b" % (status, _phrase(status), content_type, len(body), body)
    )
