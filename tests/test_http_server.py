"""The proxy's own HTTP/1.1 server (``lane.http_server``, ``lane.http_connection``) over real
sockets on 127.0.0.1: conformance (keep-alive, pipelining, 100-continue, chunked bodies both
ways, HTTP/1.0, HEAD, 204, backpressure both ways, graceful stop, lifespan, access log) and
hostile input (smuggling, garbage, heads too large or too slow, idle connections).

The server runs in-process on a thread with its own event loop, serving small ASGI apps written
here; clients are raw sockets for byte-exact cases, ``httpx2`` and ``http.client`` for the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.client
import logging
import re
import select
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from context_summarizer.proxy.lane.http_server import HttpServer, listening_socket, new_event_loop

pytestmark = pytest.mark.timeout(60)

Handler = Callable[[Scope, Receive, Send], Awaitable[None]]


# -- the server on a thread ------------------------------------------------------------------

new_loop: Callable[[], asyncio.AbstractEventLoop] = new_event_loop


@pytest.fixture(autouse=True, params=["uvloop", "asyncio"])
def event_loop_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test on uvloop's loop (the server's own choice) and asyncio's (where uvloop is
    missing): their transports differ in how they pause, resume and close."""
    if request.param == "asyncio":
        monkeypatch.setitem(globals(), "new_loop", asyncio.new_event_loop)
    return str(request.param)


@dataclass
class Served:
    """A server serving on a thread: ``port``, and ``stop`` from the test's thread."""

    server: HttpServer
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    sock: socket.socket
    port: int
    errors: list[BaseException] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        """One ``stop``: graceful the first time, at once the second."""
        with contextlib.suppress(RuntimeError):  # the loop is closed: serving ended
            self.loop.call_soon_threadsafe(self.server.stop)


def _start(
    app: ASGIApp,
    *,
    idle_timeout: float = 5.0,
    header_timeout: float = 5.0,
    access_log: bool = False,
    grace: float = 5.0,
) -> Served:
    sock = listening_socket("127.0.0.1", 0)
    loop = new_loop()
    server = HttpServer(
        app, idle_timeout=idle_timeout, header_timeout=header_timeout, access_log=access_log
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            loop.run_until_complete(server.serve([sock], grace=grace))
        except BaseException as exc:
            errors.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, name="http-server-test", daemon=True)
    served = Served(server, loop, thread, sock, int(sock.getsockname()[1]), errors)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started.is_set():
        if not thread.is_alive():
            thread.join()
            sock.close()
            raise errors[0] if errors else RuntimeError("the server ended before it started")
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.005)
    return served


@contextlib.contextmanager
def serving(app: ASGIApp, **options: Any) -> Iterator[Served]:
    """Serve ``app`` for the block, then stop at once (two ``stop``) and join the thread."""
    served = _start(app, **options)
    try:
        yield served
    finally:
        served.stop()
        served.stop()
        served.thread.join(timeout=10)
        served.sock.close()
        assert not served.thread.is_alive(), "the server did not stop"
    if served.errors:
        raise served.errors[0]


def wait_until(predicate: Callable[[], object], timeout: float = 5.0) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "the condition did not come about in time"
        time.sleep(0.005)


class Gate:
    """Opened by the test's thread, passed by an app on the server's loop."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def open(self) -> None:
        self.event.set()

    async def passed(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not self.event.is_set():
            if time.monotonic() > deadline:
                raise TimeoutError("the gate was not opened")
            await asyncio.sleep(0.002)


# -- ASGI apps ---------------------------------------------------------------------------------


def asgi(handler: Handler, events: list[str] | None = None) -> ASGIApp:
    """An ASGI app serving HTTP with ``handler`` and completing the lifespan (recorded in
    ``events``; startup puts ``ready`` in the lifespan state)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await handler(scope, receive, send)
            return
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                if events is not None:
                    events.append("startup")
                scope["state"]["ready"] = "yes"
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if events is not None:
                    events.append("shutdown")
                await send({"type": "lifespan.shutdown.complete"})
                return

    return app


async def read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        piece: bytes = message.get("body", b"")
        body += piece
        if not message.get("more_body", False):
            return body


async def answer(
    send: Send, status: int, body: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """A whole answer with a ``content-length``."""
    head = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers ``METHOD PATH`` and a line, then the body as it came."""
    body = await read_body(receive)
    await answer(send, 200, b"%s %s\n%s" % (scope["method"].encode(), scope["path"].encode(), body))


async def stream(send: Send, *pieces: bytes, status: int = 200) -> None:
    """An answer without a length: ``pieces`` each sent with ``more_body``, then the end."""
    await send({"type": "http.response.start", "status": status, "headers": []})
    for piece in pieces:
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


# -- a raw client --------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""
    framing: str = "none"
    """How the body was delimited: ``none``, ``length``, ``chunked`` or ``close``."""

    def header(self, name: str) -> str | None:
        values = [v for n, v in self.headers if n == name]
        assert len(values) <= 1, f"{name} sent {len(values)} times"
        return values[0] if values else None


class Closed(Exception):
    """The server closed the connection (or reset it) where more bytes were expected."""


class Raw:
    """A client socket with a read buffer, for byte-exact requests and answers."""

    def __init__(self, port: int, *, timeout: float = 5.0, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.buffer = bytearray()
        self.reset = False
        """Whether the server reset the connection rather than closing it."""

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        try:
            data = self.sock.recv(262_144)
        except ConnectionResetError:
            self.reset = True
            data = b""
        if not data:
            raise Closed
        self.buffer += data

    def line(self) -> bytes:
        while (end := self.buffer.find(b"\r\n")) < 0:
            self._fill()
        line = bytes(self.buffer[:end])
        del self.buffer[: end + 2]
        return line

    def exact(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._fill()
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def head(self) -> Answer:
        status_line = self.line()
        match = re.fullmatch(rb"HTTP/1\.1 (\d{3}) ?(.*)", status_line)
        assert match, status_line
        headers = []
        while line := self.line():
            name, _, value = line.partition(b":")
            headers.append((name.decode().lower(), value.decode().strip()))
        return Answer(int(match[1]), headers)

    def chunk(self) -> bytes:
        """The next chunk of a chunked body (``b""`` for the last, after its trailer)."""
        size = int(self.line().split(b";")[0], 16)
        if size == 0:
            while self.line():
                pass
            return b""
        data = self.exact(size)
        assert self.exact(2) == b"\r\n"
        return data

    def answer(self, *, method: str = "GET") -> Answer:
        """The next whole answer, its body read as the head says it is delimited."""
        result = self.head()
        length = result.header("content-length")
        if method == "HEAD" or result.status in (204, 304) or result.status < 200:
            return result
        if result.header("transfer-encoding") == "chunked":
            result.framing = "chunked"
            pieces = []
            while piece := self.chunk():
                pieces.append(piece)
            result.body = b"".join(pieces)
        elif length is not None:
            result.framing = "length"
            result.body = self.exact(int(length))
        else:
            result.framing = "close"
            result.body = self.rest()
        return result

    def rest(self) -> bytes:
        """Everything until the server closes the connection."""
        with contextlib.suppress(Closed):
            while True:
                self._fill()
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def closed_by_server(self, within: float = 5.0) -> bool:
        """Whether the server closes the connection, with no bytes after those read, within
        ``within`` seconds."""
        assert not self.buffer, f"bytes after the answer: {bytes(self.buffer)!r}"
        self.sock.settimeout(within)
        try:
            self._fill()
        except Closed:
            return True
        except TimeoutError:
            return False
        raise AssertionError(f"bytes arrived where the end was expected: {bytes(self.buffer)!r}")


def request(
    method: str, path: str, body: bytes | None = None, *, headers: str = "", version: str = "1.1"
) -> bytes:
    """A request's bytes, with a ``content-length`` when it has a ``body``."""
    length = f"Content-Length: {len(body)}\r\n" if body is not None else ""
    head = f"{method} {path} HTTP/{version}\r\nHost: test\r\n{length}{headers}\r\n"
    return head.encode() + (body or b"")


# -- keep-alive and pipelining -----------------------------------------------------------------


def test_keep_alive_serves_several_requests_on_one_connection() -> None:
    clients: list[Any] = []

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        clients.append(scope["client"])
        await echo(scope, receive, send)

    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        for number in range(3):
            raw.send(request("POST", f"/r{number}", b"body %d" % number))
            got = raw.answer()
            assert (got.status, got.body) == (200, b"POST /r%d\nbody %d" % (number, number))
            assert got.header("connection") is None
        with httpx2.Client(base_url=served.url) as client:
            for number in range(3):
                assert client.get(f"/h{number}").text == f"GET /h{number}\n"
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=5)
        try:
            for number in range(3):
                conn.request("PUT", f"/c{number}", body=b"x" * number)
                assert conn.getresponse().read() == b"PUT /c%d\n%s" % (number, b"x" * number)
        finally:
            conn.close()
    assert len(clients) == 9
    assert len(set(clients[:3])) == len(set(clients[3:6])) == len(set(clients[6:])) == 1
    assert len(set(clients)) == 3


def test_pipelined_requests_are_answered_one_at_a_time_in_order() -> None:
    running = 0
    most = 0

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        if scope["path"] == "/slow":
            await asyncio.sleep(0.1)  # the later requests are parsed meanwhile
        if scope["method"] == "GET":  # answered without a call to receive
            await answer(send, 200, b"GET %s\n" % scope["path"].encode())
        else:
            await echo(scope, receive, send)
        running -= 1

    pipelined = (
        request("POST", "/slow", b"first")
        + request("POST", "/second", b"second body", headers="Content-Type: text/plain\r\n")
        + request("GET", "/third")
    )
    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        raw.send(pipelined)
        bodies = [raw.answer().body for _ in range(3)]
        assert bodies == [b"POST /slow\nfirst", b"POST /second\nsecond body", b"GET /third\n"]
        assert not raw.buffer
        raw.send(request("GET", "/after"))  # the connection reads again once they are answered
        assert raw.answer().body == b"GET /after\n"
    assert most == 1


def test_pipelined_garbage_after_a_request_closes_the_connection_after_its_answer() -> None:
    calls: list[str] = []

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope["path"])
        await asyncio.sleep(0.05)
        await echo(scope, receive, send)

    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/good") + b"\x00\x01 not http at all\r\n\r\n")
        assert raw.answer().body == b"GET /good\n"
        assert raw.closed_by_server()
    assert calls == ["/good"]


# -- request bodies ----------------------------------------------------------------------------


def test_expect_100_continue_gets_an_interim_answer_before_the_final_one() -> None:
    with serving(asgi(echo)) as served, Raw(served.port) as raw:
        raw.send(request("POST", "/up", headers="Expect: 100-continue\r\nContent-Length: 5\r\n"))
        interim = raw.head()
        assert interim.status == 100 and interim.headers == []
        assert not raw.buffer
        raw.send(b"hello")
        final = raw.answer()
        assert (final.status, final.body) == (200, b"POST /up\nhello")


def test_expect_100_continue_is_not_answered_when_the_app_does_not_read_the_body() -> None:
    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(send, 413, b"too big")

    with serving(asgi(refuse)) as served, Raw(served.port) as raw:
        raw.send(
            request("POST", "/up", headers="Expect: 100-continue\r\nContent-Length: 100000\r\n")
        )
        final = raw.answer()
        assert (final.status, final.body) == (413, b"too big")
        assert raw.closed_by_server()  # the body was never sent, so it cannot be skipped


def test_chunked_request_body_reaches_the_app_whole() -> None:
    with serving(asgi(echo)) as served, Raw(served.port) as raw:
        raw.send(request("POST", "/chunked", headers="Transfer-Encoding: chunked\r\n"))
        for piece in (b"5\r\nhello\r\n", b"1;ext=1\r\n ", b"\r\n", b"5\r\nworld\r\n", b"0\r\n"):
            raw.send(piece)
            time.sleep(0.01)
        raw.send(b"\r\n")
        got = raw.answer()
        assert (got.status, got.body) == (200, b"POST /chunked\nhello world")
        raw.send(request("GET", "/next"))  # the body's end was found: the connection goes on
        assert raw.answer().body == b"GET /next\n"


def test_large_body_arrives_intact_and_the_server_stops_reading_while_the_app_lags() -> None:
    pieces: list[int] = []

    async def slow_reader(scope: Scope, receive: Receive, send: Send) -> None:
        digest = hashlib.sha256()
        while True:
            await asyncio.sleep(0.005)  # far slower than loopback
            message = await receive()
            pieces.append(len(message["body"]))
            digest.update(message["body"])
            if not message["more_body"]:
                break
        await answer(send, 200, digest.hexdigest().encode())

    body = hashlib.sha256(b"seed").digest() * (6 * 1024 * 1024 // 32)  # 6 MiB
    with serving(asgi(slow_reader)) as served, httpx2.Client(base_url=served.url) as client:
        got = client.post("/upload", content=body, timeout=30)
    assert got.status_code == 200
    assert got.text == hashlib.sha256(body).hexdigest()
    assert sum(pieces) == len(body)
    # Unread body bytes held for the app stay near the high-water mark (64 KiB, plus one read).
    assert max(pieces) <= 1024 * 1024, max(pieces)


# -- hostile input -------------------------------------------------------------------------------


SMUGGLING = {
    "length and chunked": "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
    "chunked and length": "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    "two lengths": "Content-Length: 5\r\nContent-Length: 6\r\n",
    "chunked not last": "Transfer-Encoding: chunked, identity\r\n",
    "space before colon": "Content-Length : 5\r\n",
    "folded header": "X-A: 1\r\n Content-Length: 5\r\n",
}


@pytest.mark.parametrize("headers", SMUGGLING.values(), ids=SMUGGLING.keys())
def test_ambiguous_body_framing_is_refused_with_400_and_the_connection_closed(
    headers: str,
) -> None:
    calls: list[str] = []

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope["path"])
        await echo(scope, receive, send)

    smuggled = request("GET", "/smuggled")
    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        raw.send(f"POST /front HTTP/1.1\r\nHost: test\r\n{headers}\r\n".encode())
        raw.send(b"0\r\n\r\n" + smuggled)
        got = raw.answer()
        assert got.status == 400
        assert got.header("connection") == "close"
        assert raw.closed_by_server()
    assert calls == []


@pytest.mark.parametrize(
    "garbage",
    [b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(64), b"HELLO\r\n\r\n", b"GET\r\n\r\n"],
    ids=["tls hello", "word", "no target"],
)
def test_garbage_is_answered_400_and_the_connection_closed(garbage: bytes) -> None:
    with serving(asgi(echo)) as served, Raw(served.port) as raw:
        raw.send(garbage)
        got = raw.answer()
        assert got.status == 400
        assert got.header("connection") == "close"
        assert raw.closed_by_server()


@pytest.mark.parametrize("piece", [None, 2_000], ids=["whole", "in pieces"])
def test_head_just_under_the_limit_is_served(piece: int | None) -> None:
    head = request("GET", "/fine", headers=f"X-Big: {'a' * 30_000}\r\nX-Too: {'b' * 30_000}\r\n")
    with serving(asgi(echo)) as served, Raw(served.port) as raw:
        for start in range(0, len(head), piece or len(head)):
            raw.send(head[start : start + (piece or len(head))])
            if piece:
                time.sleep(0.002)  # read apart by the server
        assert raw.answer().status == 200


@pytest.mark.parametrize("shape", ["many headers", "one header", "long target"])
def test_head_over_64_kib_is_answered_431(shape: str) -> None:
    if shape == "many headers":
        head = request("GET", "/", headers="".join(f"X-{n}: {'v' * 1000}\r\n" for n in range(70)))
    elif shape == "one header":
        head = request("GET", "/", headers=f"X-Big: {'v' * 70_000}\r\n")
    else:
        head = request("GET", "/" + "p" * 70_000)
    with serving(asgi(echo)) as served, Raw(served.port) as raw:
        raw.send(head)
        got = raw.answer()
        assert got.status == 431
        assert raw.closed_by_server()


def test_endless_header_is_answered_431_without_waiting_for_its_end() -> None:
    """A header value that never ends must not be buffered until the head's timeout."""
    with serving(asgi(echo), header_timeout=30) as served, Raw(served.port) as raw:
        raw.send(b"GET / HTTP/1.1\r\nHost: test\r\nX-Endless: ")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(64):  # 4 MiB at most, in pieces the server reads apart
                raw.send(b"v" * 65_536)
                if select.select([raw.sock], [], [], 0.01)[0]:
                    break
        got = raw.answer()
        assert got.status == 431
        assert raw.closed_by_server()


def test_head_trickled_slower_than_header_timeout_gets_408_and_close() -> None:
    head = request("GET", "/slowloris", headers="X-Pad: " + "p" * 100 + "\r\n")
    with serving(asgi(echo), header_timeout=0.4) as served, Raw(served.port) as raw:
        began = time.monotonic()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for byte in head:  # 2.6 s at this pace: the timeout falls well inside
                if select.select([raw.sock], [], [], 0)[0]:
                    break
                raw.send(bytes([byte]))
                time.sleep(0.02)
        got = raw.answer()
        waited = time.monotonic() - began
        assert got.status == 408
        assert got.header("connection") == "close"
        assert raw.closed_by_server()
        assert 0.4 <= waited < 2, waited


def test_slow_answer_is_not_cut_by_the_head_or_idle_timeouts() -> None:
    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.7)
        await echo(scope, receive, send)

    with (
        serving(asgi(slow), header_timeout=0.3, idle_timeout=0.3) as served,
        Raw(served.port) as raw,
    ):
        raw.send(request("POST", "/slow", b"x"))
        assert raw.answer().body == b"POST /slow\nx"


def test_idle_connection_is_closed_after_idle_timeout() -> None:
    with (
        serving(asgi(echo), idle_timeout=0.3) as served,
        Raw(served.port) as never_spoke,
        Raw(served.port) as raw,
    ):
        raw.send(request("GET", "/once"))
        assert raw.answer().status == 200
        answered = time.monotonic()
        assert raw.closed_by_server(within=3)
        assert time.monotonic() - answered >= 0.25  # (the server's clock began a little earlier)
        assert never_spoke.closed_by_server(within=3)


# -- answers -----------------------------------------------------------------------------------


def test_http10_answer_without_length_ends_with_the_connection() -> None:
    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        await stream(send, b"abc", b"def")

    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        raw.send(b"GET /old HTTP/1.0\r\n\r\n")
        got = raw.answer()
        assert got.status == 200
        assert got.framing == "close"
        assert got.header("transfer-encoding") is None
        assert got.header("connection") == "close"
        assert got.body == b"abcdef"


KEEP_ALIVE = "Connection: keep-alive\r\n"


def test_http10_keep_alive_with_a_length_keeps_the_connection() -> None:
    with serving(asgi(echo)) as served, Raw(served.port) as raw:
        for number in range(2):
            raw.send(request("GET", f"/k{number}", version="1.0", headers=KEEP_ALIVE))
            got = raw.answer()
            assert (got.framing, got.body) == ("length", b"GET /k%d\n" % number)
            assert got.header("connection") == "keep-alive"
        raw.send(request("GET", "/last", version="1.0"))
        assert raw.answer().header("connection") == "close"
        assert raw.closed_by_server()


def test_http11_connection_close_request_closes_after_the_answer() -> None:
    with serving(asgi(echo)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/bye", headers="Connection: close\r\n") + request("GET", "/no"))
        got = raw.answer()
        assert got.body == b"GET /bye\n"
        assert got.header("connection") == "close"
        assert raw.closed_by_server()


def test_head_gets_the_headers_without_the_body() -> None:
    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(send, 200, b"hello")

    async def streaming(scope: Scope, receive: Receive, send: Send) -> None:
        await stream(send, b"hello")

    for app in (handler, streaming):
        with serving(asgi(app)) as served, Raw(served.port) as raw:
            raw.send(request("HEAD", "/h") + request("GET", "/g"))
            head = raw.answer(method="HEAD")
            assert head.status == 200
            assert head.header("transfer-encoding") is None
            assert head.header("content-length") == ("5" if app is handler else None)
            got = raw.answer()  # right after the HEAD answer's head: no body bytes between
            assert got.body == b"hello"


def test_204_and_304_have_no_body() -> None:
    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        status = int(scope["path"][1:])
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"dropped", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/204") + request("GET", "/304") + request("GET", "/200"))
        for status in (204, 304):
            got = raw.answer()
            assert got.status == status
            assert got.header("transfer-encoding") is None
        last = raw.answer()
        assert (last.status, last.framing, last.body) == (200, "chunked", b"dropped")


def test_streamed_answer_is_chunked_and_each_chunk_is_sent_before_the_next_is_made() -> None:
    gate = Gate()

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        await gate.passed()  # opened by the client once it has the first chunk
        await send({"type": "http.response.body", "body": b"second", "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/stream"))
        head = raw.head()
        assert head.status == 200
        assert head.header("transfer-encoding") == "chunked"
        assert head.header("content-length") is None
        assert raw.chunk() == b"first"
        assert not raw.buffer
        gate.open()
        assert raw.chunk() == b"second"
        assert raw.chunk() == b""
        raw.send(request("GET", "/again"))
        assert raw.answer().body == b"firstsecond"


def test_slow_reader_of_a_large_answer_holds_the_app_in_send() -> None:
    """Backpressure on answers: the app's ``send`` waits while the client does not read, so the
    server buffers a bounded amount (the kernel's socket buffers and the transport's), not the
    whole answer."""
    piece = b"x" * 65_536
    total = 512  # 32 MiB
    made = 0
    in_send = False

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal made, in_send
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(total):
            in_send = True
            await send({"type": "http.response.body", "body": piece, "more_body": True})
            in_send = False
            made += 1
        await send({"type": "http.response.body", "body": b""})

    with serving(asgi(handler)) as served, Raw(served.port, rcvbuf=32_768) as raw:
        raw.send(request("GET", "/big"))
        last, since = -1, time.monotonic()
        deadline = since + 10
        while time.monotonic() - since < 0.3:  # until the app has made nothing for 0.3 s
            assert time.monotonic() < deadline, "the app never stopped making chunks"
            if made != last:
                last, since = made, time.monotonic()
            time.sleep(0.01)
        assert in_send
        assert made * len(piece) <= 16 * 1024 * 1024, made
        got = raw.answer()
        assert len(got.body) == total * len(piece)
        assert made == total


# -- the app failing or the client leaving ---------------------------------------------------------


def test_client_disconnect_mid_answer_reaches_the_app_as_http_disconnect() -> None:
    seen: list[str] = []

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append((await receive())["type"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"first", "more_body": True})
        seen.append((await receive())["type"])  # waits until the client is gone

    with serving(asgi(handler)) as served:
        with Raw(served.port) as raw:
            raw.send(request("GET", "/stream"))
            raw.head()
            assert raw.chunk() == b"first"
        wait_until(lambda: len(seen) == 2)
    assert seen == ["http.request", "http.disconnect"]


def test_client_disconnect_while_the_app_waits_for_the_body_reaches_it_as_http_disconnect() -> None:
    seen: list[Message] = []

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            seen.append(message)
            if not message.get("more_body"):
                return

    with serving(asgi(handler)) as served:
        with Raw(served.port) as raw:
            raw.send(request("POST", "/up", headers="Content-Length: 100\r\n") + b"0123456789")
            wait_until(lambda: len(seen) == 1)
        wait_until(lambda: len(seen) == 2)
    assert seen[0] == {"type": "http.request", "body": b"0123456789", "more_body": True}
    assert seen[1] == {"type": "http.disconnect"}


def test_app_error_before_answering_gives_500_and_closes() -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise ValueError("boom")

    with serving(asgi(failing)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/fail") + request("GET", "/never"))
        got = raw.answer()
        assert got.status == 500
        assert got.header("connection") == "close"
        assert raw.closed_by_server()


def test_app_error_after_its_head_but_before_any_body_gives_500() -> None:
    """The head waits for the first body bytes, so nothing is on the wire yet: the client can
    still be told the request failed."""

    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        raise ValueError("boom")

    with serving(asgi(failing)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/fail"))
        got = raw.answer()
        assert got.status == 500
        assert raw.closed_by_server()


def test_app_error_mid_answer_closes_the_connection_without_ending_the_body() -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise ValueError("boom")

    with serving(asgi(failing)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/fail") + request("GET", "/never"))
        head = raw.head()
        assert head.status == 200
        assert raw.chunk() == b"partial"
        # No last chunk: the client can tell the answer is cut short.
        assert raw.closed_by_server()


def test_answer_without_reading_a_large_body_closes_the_connection_without_a_reset() -> None:
    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(0.1)  # while the client's bytes pile up unread
        await answer(send, 413, b"too big")

    with serving(asgi(refuse)) as served, Raw(served.port) as raw:
        raw.send(request("POST", "/up", headers="Content-Length: 10000000\r\n"))

        def send_the_body() -> None:  # as a client does that does not look at the answer yet
            with contextlib.suppress(OSError):  # the server may end it before it is all sent
                for _ in range(40):
                    raw.send(b"b" * 65_536)
                    time.sleep(0.001)

        sending = threading.Thread(target=send_the_body)
        sending.start()
        got = raw.answer()
        assert (got.status, got.body) == (413, b"too big")
        assert raw.closed_by_server()
        assert not raw.reset  # a reset can cost the client the answer it has not read yet
        sending.join(timeout=5)


def test_small_unread_body_that_arrived_whole_keeps_the_connection() -> None:
    async def ignore(scope: Scope, receive: Receive, send: Send) -> None:
        await answer(send, 200, scope["path"].encode())

    with serving(asgi(ignore)) as served, Raw(served.port) as raw:
        raw.send(request("POST", "/a", b"unread") + request("POST", "/b", b"unread too"))
        assert raw.answer().body == b"/a"
        assert raw.answer().body == b"/b"


def test_websocket_upgrade_is_served_as_a_plain_request_then_closed() -> None:
    calls: list[Scope] = []

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        calls.append(scope)
        await answer(send, 426, b"no websockets")

    upgrade = request(
        "GET",
        "/ws",
        headers="Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n",
    )
    with serving(asgi(refuse)) as served, Raw(served.port) as raw:
        raw.send(upgrade + b"\x81\x85\x00\x00\x00\x00hello" + request("GET", "/after"))
        got = raw.answer()
        assert (got.status, got.body) == (426, b"no websockets")
        assert raw.closed_by_server()
    assert [scope["path"] for scope in calls] == ["/ws"]


def test_scope_carries_the_request_as_sent() -> None:
    scopes: list[Scope] = []

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        scopes.append(scope)
        await echo(scope, receive, send)

    with serving(asgi(handler)) as served, Raw(served.port) as raw:
        raw.send(request("GET", "/a%20b/c?x=1&y=%20", headers="X-Mixed-Case: Value\r\n"))
        assert raw.answer().status == 200
        local = raw.sock.getsockname()
    scope = scopes[0]
    assert scope["type"] == "http"
    assert scope["http_version"] == "1.1"
    assert (scope["path"], scope["raw_path"]) == ("/a b/c", b"/a%20b/c")
    assert scope["query_string"] == b"x=1&y=%20"
    assert (b"x-mixed-case", b"Value") in scope["headers"]
    assert scope["client"] == (local[0], local[1])
    assert scope["server"] == ("127.0.0.1", served.port)
    assert scope["state"] == {"ready": "yes"}


# -- stopping, lifespan, access log --------------------------------------------------------------


def test_graceful_stop_finishes_the_request_in_flight_and_refuses_new_connections() -> None:
    gate = Gate()
    arrived = threading.Event()

    async def slow(scope: Scope, receive: Receive, send: Send) -> None:
        arrived.set()
        await gate.passed()
        await answer(send, 200, b"finished")

    served = _start(asgi(slow), grace=20)
    try:
        with Raw(served.port) as busy, Raw(served.port) as idle:
            busy.send(request("GET", "/slow"))
            assert arrived.wait(5)
            served.stop()
            assert idle.closed_by_server()  # no request under way: closed at once

            def refused() -> bool:
                try:
                    with Raw(served.port, timeout=1) as late:
                        late.send(request("GET", "/late"))
                        late.answer()
                except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, Closed):
                    return True
                return False

            wait_until(refused, timeout=3)
            assert served.thread.is_alive()
            gate.open()
            got = busy.answer()
            assert (got.status, got.body) == (200, b"finished")
            assert got.header("connection") == "close"
            assert busy.closed_by_server()
        served.thread.join(timeout=3)  # well within the grace period
        assert not served.thread.is_alive(), "serve waited out its grace period"
    finally:
        served.stop()
        served.stop()
        served.thread.join(timeout=10)
        served.sock.close()
    assert served.errors == []


def test_second_stop_ends_serving_at_once() -> None:
    arrived = threading.Event()
    cancelled = threading.Event()

    async def stuck(scope: Scope, receive: Receive, send: Send) -> None:
        arrived.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    served = _start(asgi(stuck), grace=60)
    try:
        with Raw(served.port) as raw:
            raw.send(request("GET", "/stuck"))
            assert arrived.wait(5)
            served.stop()
            time.sleep(0.1)
            assert served.thread.is_alive()  # the first stop waits for the request
            served.stop()
            served.thread.join(timeout=5)
            assert not served.thread.is_alive()
            assert cancelled.is_set()
            assert raw.closed_by_server()
    finally:
        served.thread.join(timeout=10)
        served.sock.close()
    assert served.errors == []


def test_lifespan_startup_and_shutdown_run_once_each_around_serving() -> None:
    events: list[str] = []

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        events.append("request")
        await echo(scope, receive, send)

    with serving(asgi(handler, events)) as served:
        assert events == ["startup"]
        with httpx2.Client(base_url=served.url) as client:
            assert client.get("/").status_code == 200
            assert client.get("/").status_code == 200
        assert events == ["startup", "request", "request"]
    assert events == ["startup", "request", "request", "shutdown"]


def test_failed_startup_makes_serve_raise_runtime_error_without_serving() -> None:
    requests: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.failed", "message": "no database"})
            return
        requests.append(scope["path"])

    with pytest.raises(RuntimeError, match="no database"):
        _start(app)
    assert requests == []


def test_a_startup_that_raises_makes_serve_raise_runtime_error_without_serving() -> None:
    requests: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()
            raise OSError("the store is not writable")
        requests.append(scope["path"])

    with pytest.raises(RuntimeError, match="the store is not writable"):
        _start(app)
    assert requests == []


def access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "summarizer.access"]


def test_access_log_line_has_the_target_with_its_credentials_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="summarizer.access")

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/fail":
            raise ValueError("boom")
        await echo(scope, receive, send)

    with serving(asgi(handler), access_log=True) as served:
        with Raw(served.port) as raw:
            raw.send(request("GET", "/v1/models?key=SECRET&alt=sse"))
            assert raw.answer().status == 200
            raw.send(request("POST", "/fail?API_KEY=SECRET&%74oken=SECRET&x", b"{}"))
            assert raw.answer().status == 500
            port = raw.sock.getsockname()[1]
        wait_until(lambda: len(access_lines(caplog)) == 2)
    lines = access_lines(caplog)
    assert lines == [
        f'127.0.0.1:{port} - "GET /v1/models?key=[redacted]&alt=sse HTTP/1.1" 200',
        f'127.0.0.1:{port} - "POST /fail?API_KEY=[redacted]&%74oken=[redacted]&x HTTP/1.1" 500',
    ]
    assert "SECRET" not in caplog.text
    assert all("SECRET" not in repr(r.args) for r in caplog.records)


def test_access_log_is_off_unless_asked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="summarizer.access")
    with serving(asgi(echo)) as served, httpx2.Client(base_url=served.url) as client:
        assert client.get("/quiet").status_code == 200
    assert access_lines(caplog) == []


def test_the_server_runs_on_the_loop_asked_for(event_loop_kind: str) -> None:
    with serving(asgi(echo)) as served:
        assert type(served.loop).__module__.split(".")[0] == event_loop_kind
