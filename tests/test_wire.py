"""The lane's upstream connections (``context_summarizer.proxy.wire``) against a real socket server
that answers exactly the bytes each test gives it: bodies by length, chunked, or ended by the
connection's close; gzip and deflate decoded; failures raised as httpx2's transport errors;
pooled connections reused only while the server keeps them."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx2
import pytest

from context_summarizer.proxy.wire_pool import WirePool

REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"


@asynccontextmanager
async def server(
    answer: Callable[[int], bytes | None], *, close: bool = False
) -> AsyncIterator[tuple[tuple[str, str, int], list[int]]]:
    """A server answering its n-th request (from 0, across connections) with ``answer(n)``
    (None: no answer), closing the connection after each answer when ``close``."""
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        reply: bytes | None = b""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                served.append(len(served))
                reply = answer(len(served) - 1)
                if reply is not None:
                    writer.write(reply)
                    await writer.drain()
                if close or reply is None:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if reply is None:
                await asyncio.sleep(0.3)
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    try:
        yield ("http", "127.0.0.1", port), served
    finally:
        listening.close()


async def exchange(pool: WirePool, origin: tuple[str, str, int]) -> tuple[int, bytes, bool]:
    """One request: its status, body, and whether the connection went back to the pool."""
    wire = pool.idle(origin) or await pool.connect(origin)
    wire.begin(REQUEST)
    await wire.response_head()
    body = await wire.read()
    pool.release(wire)
    return wire.status, body, not wire.broken


def respond(body: bytes, *headers: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body


PAYLOAD = b'{"choices": [{"message": {"content": "ok"}}]}' * 50


@pytest.mark.parametrize(
    "reply",
    [
        respond(PAYLOAD, b"content-length: %d" % len(PAYLOAD)),
        respond(
            b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n"
            % (100, PAYLOAD[:100], len(PAYLOAD) - 100, PAYLOAD[100:]),
            b"transfer-encoding: chunked",
        ),
        respond(
            gzip.compress(PAYLOAD),
            b"content-encoding: gzip",
            b"content-length: %d" % len(gzip.compress(PAYLOAD)),
        ),
        respond(
            zlib.compress(PAYLOAD),
            b"content-encoding: deflate",
            b"content-length: %d" % len(zlib.compress(PAYLOAD)),
        ),
    ],
    ids=["length", "chunked", "gzip", "deflate"],
)
def test_an_answer_is_read_whole_and_decoded(reply: bytes) -> None:
    async def run() -> None:
        pool = WirePool(connect_timeout=5, read_timeout=5)
        async with server(lambda n: reply) as (origin, served):
            for _ in range(3):
                assert await exchange(pool, origin) == (200, PAYLOAD, True)
            assert len(served) == 3
        pool.close()

    asyncio.run(run())


def test_a_body_without_a_length_ends_with_the_connection_and_is_not_reused() -> None:
    async def run() -> None:
        pool = WirePool(connect_timeout=5, read_timeout=5)
        async with server(lambda n: respond(PAYLOAD), close=True) as (origin, served):
            assert await exchange(pool, origin) == (200, PAYLOAD, False)
            assert await exchange(pool, origin) == (200, PAYLOAD, False)
            assert len(served) == 2
        pool.close()

    asyncio.run(run())


def test_a_connection_the_server_closed_is_not_taken_from_the_pool() -> None:
    async def run() -> None:
        pool = WirePool(connect_timeout=5, read_timeout=5)
        reply = respond(PAYLOAD, b"content-length: %d" % len(PAYLOAD))
        async with server(lambda n: reply, close=True) as (origin, _served):
            wire = await pool.connect(origin)
            wire.begin(REQUEST)
            await wire.response_head()
            assert await wire.read() == PAYLOAD
            pool.release(wire)  # kept alive, as far as the answer said
            await asyncio.sleep(0.2)  # the server has closed it since
            assert pool.idle(origin) is None
        pool.close()

    asyncio.run(run())


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (None, httpx2.RemoteProtocolError),  # closed without an answer
        (respond(b"x" * 10, b"content-length: 100"), httpx2.RemoteProtocolError),  # cut short
        (
            respond(b"abc", b"content-encoding: br", b"content-length: 3"),
            httpx2.RemoteProtocolError,
        ),
        (
            respond(b"not gzip", b"content-encoding: gzip", b"content-length: 8"),
            httpx2.RemoteProtocolError,
        ),
        (b"garbage\r\n\r\n", httpx2.RemoteProtocolError),
    ],
    ids=["no-answer", "cut-short", "unknown-encoding", "bad-gzip", "not-http"],
)
def test_a_failure_is_an_httpx2_transport_error(reply: bytes | None, error: type) -> None:
    async def run() -> None:
        pool = WirePool(connect_timeout=5, read_timeout=5)
        async with server(lambda n: reply, close=True) as (origin, _served):
            with pytest.raises(error):
                await exchange(pool, origin)
        pool.close()

    asyncio.run(run())


def test_an_upstream_that_does_not_answer_times_out() -> None:
    async def run() -> None:
        pool = WirePool(connect_timeout=5, read_timeout=0.1)
        async with server(lambda n: None) as (origin, _served):
            with pytest.raises(httpx2.ReadTimeout):
                await exchange(pool, origin)
        pool.close()

    asyncio.run(run())


def test_nothing_listening_is_a_connect_error() -> None:
    async def run() -> None:
        async with server(lambda n: None) as (origin, _served):
            pass  # closed: nothing listens on its port any more
        pool = WirePool(connect_timeout=5, read_timeout=5)
        with pytest.raises(httpx2.ConnectError):
            await pool.connect(origin)

    asyncio.run(run())


@asynccontextmanager
async def trickling(pieces: list[tuple[float, bytes]]) -> AsyncIterator[tuple[str, str, int]]:
    """A server answering each request with ``pieces``, each written after its delay."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            for delay, piece in pieces:
                await asyncio.sleep(delay)
                writer.write(piece)
                await writer.drain()
            await asyncio.sleep(1)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    listening = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield ("http", "127.0.0.1", listening.sockets[0].getsockname()[1])
    finally:
        listening.close()


async def whole(pool: WirePool, origin: tuple[str, str, int]) -> tuple[int, bytes]:
    wire = await pool.connect(origin)
    wire.begin(REQUEST)
    await wire.whole_response()
    assert wire.complete  # read has it all: nothing is waited for
    return wire.status, await wire.read()


HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(PAYLOAD)


def test_a_whole_response_waits_for_its_body_however_it_is_cut() -> None:
    async def run() -> None:
        pool = WirePool(connect_timeout=5, read_timeout=0.3)
        # The head, then the body in pieces: each gap under the read timeout, all of them
        # together over it.
        cut = [(0.0, HEAD)] + [(0.15, PAYLOAD[i : i + 500]) for i in range(0, len(PAYLOAD), 500)]
        async with trickling(cut) as origin:
            assert await whole(pool, origin) == (200, PAYLOAD)
        async with trickling([(0.0, HEAD + PAYLOAD)]) as origin:
            assert await whole(pool, origin) == (200, PAYLOAD)
        pool.close()

    asyncio.run(run())


def test_a_whole_response_whose_body_stalls_times_out() -> None:
    async def run() -> None:
        pool = WirePool(connect_timeout=5, read_timeout=0.2)
        async with trickling([(0.0, HEAD), (0.05, PAYLOAD[:10]), (0.5, PAYLOAD[10:])]) as origin:
            with pytest.raises(httpx2.ReadTimeout):
                await whole(pool, origin)
        pool.close()

    asyncio.run(run())
