"""The HTTP plumbing under the test upstream: its server, and how a request is read and answered.

``_HTTPServer`` is a threading HTTP server that tracks its open connections, so that stopping it
closes them. ``_Exchange`` is the request handler's plumbing, which the endpoints answer through:
it reads a (possibly chunked) body, writes JSON, raw bytes, half a body or an SSE stream (chat
completions' ``data:`` lines ending in ``[DONE]``, or the Responses API's named events), resets
the connection, and records each request in the upstream's log.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .faults import error_body
from .state import RecordedRequest, UpstreamState


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog (5) resets connections when many clients connect at once.
    request_queue_size = 1024

    def __init__(
        self,
        address: tuple[str, int],
        upstream: UpstreamState,
        handler: type[_Exchange],
    ) -> None:
        self.upstream = upstream
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        self.connections_opened = 0
        super().__init__(address, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client that went away is not an error worth a traceback
        super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
            self.connections_opened += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            connections = list(self.connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)


class _HTTPServerV6(_HTTPServer):
    address_family = socket.AF_INET6


class _Dropped(Exception):
    """The connection is to be closed without a response."""


class _Exchange(BaseHTTPRequestHandler):
    """The plumbing of one request and its answer, which the endpoints answer through."""

    protocol_version = "HTTP/1.1"
    server_version = "summarizer-test-upstream/1"
    server: _HTTPServer
    _received: float  # when the request arrived; set by the router
    _api: str = "chat"  # the API of the request, recorded with it; set by the router

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without this, Nagle's algorithm and the
        # client's delayed ACK add ~40 ms to every response on a kept-alive connection.
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def handle(self) -> None:
        try:
            super().handle()
        except (ConnectionError, TimeoutError):
            self.close_connection = True  # the client went away between requests

    @property
    def upstream(self) -> UpstreamState:
        return self.server.upstream

    # plumbing

    def _read_body(self) -> bytes:
        """The request's body; a client that closes before sending all of it made no request
        (``ConnectionResetError``: the connection is closed, nothing is recorded), as with any
        HTTP server."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65_537)
                if not size_line:
                    raise ConnectionResetError("the client closed mid-body")
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65_537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65_537)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length > 0 else b""
        if len(body) < length:
            raise ConnectionResetError("the client closed mid-body")
        return body

    def _headers_dict(self) -> dict[str, str]:
        return {key.lower(): value for key, value in self.headers.items()}

    def _send_json(
        self, status: int, payload: Any, headers: Mapping[str, str] | None = None
    ) -> None:
        self._send_bytes(status, _json_bytes(payload), headers=headers)

    def _send_bytes(
        self,
        status: int,
        data: bytes,
        content_type: str = "application/json",
        *,
        headers: Mapping[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        """Answer ``data`` as is (``length``: a ``Content-Length`` to claim instead).

        Every answer carries OpenAI's ``x-request-id``, unless ``headers`` has Anthropic's
        ``request-id`` instead.
        """
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        if "request-id" not in (headers or {}):
            self.send_header("x-request-id", self.upstream._next_id("req_"))
        for key, value in {**self.upstream.response_headers, **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_half(self, payload: Any, headers: Mapping[str, str] | None = None) -> None:
        """Send the first half of ``payload``'s JSON (claiming all of it), then reset."""
        whole = _json_bytes(payload)
        self._send_bytes(200, whole[: len(whole) // 2], headers=headers, length=len(whole))
        self._reset()

    def _reset(self) -> None:
        """Abort the connection with a TCP reset (no orderly end of the answer)."""
        with contextlib.suppress(OSError):
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raise _Dropped

    def _record(
        self,
        body: Any,
        status: int | None,
        *,
        prompt_tokens: int | None = None,
        cached_tokens: int | None = None,
        completion_tokens: int | None = None,
        fault: str | None = None,
        stream: bool = False,
        cache_creation_tokens: int | None = None,
        api: str | None = None,
    ) -> None:
        self.upstream._record(
            RecordedRequest(
                method=self.command,
                path=urlsplit(self.path).path,
                headers=self._headers_dict(),
                body=body,
                prompt_tokens=prompt_tokens,
                cached_tokens=cached_tokens,
                status=status,
                time=self._received,
                completion_tokens=completion_tokens,
                fault=fault,
                stream=stream,
                cache_creation_tokens=cache_creation_tokens,
                api=api or self._api,
            )
        )

    def _fail(
        self,
        status: int,
        body: Any,
        payload: dict[str, Any],
        headers: Mapping[str, str] | None = None,
        **record: Any,
    ) -> None:
        self._record(body, status, **record)
        self._send_json(status, payload, headers)

    def _parse_json(self, raw: bytes) -> tuple[bool, Any]:
        try:
            return True, json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self._fail(
                400,
                None,
                error_body(
                    "We could not parse the JSON body of your request. (HINT: This likely means "
                    "you aren't using your HTTP library correctly. The OpenAI API expects a JSON "
                    "payload, but what was sent was not valid JSON.)"
                ),
            )
            return False, None

    def _send_stream(
        self,
        chunks: Iterator[dict[str, Any]],
        *,
        chunk_delay: float = 0.0,
        reset_after: int | None = None,
        named: bool = False,
        headers: Mapping[str, str] | None = None,
        google: bool = False,
    ) -> None:
        """Send ``chunks`` as SSE events (``reset_after``: that many, then reset).

        ``named`` (the Responses API's and Anthropic's streams): each event is named by its
        chunk's ``type`` (``event: <type>``) and the stream ends without OpenAI's ``data:
        [DONE]``. ``google`` (Gemini's ``alt=sse`` streams): ``data:`` events ending in
        ``\\r\\n\\r\\n``, and no ``[DONE]`` either.
        """
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if "request-id" not in (headers or {}):
            self.send_header("x-request-id", self.upstream._next_id("req_"))
        for key, value in {**self.upstream.response_headers, **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        for number, chunk in enumerate(chunks):
            if number == reset_after:
                self._reset()
            if number and chunk_delay:
                time.sleep(chunk_delay)
            data = b"data: " + _json_bytes(chunk) + (b"\r\n\r\n" if google else b"\n\n")
            if named:
                data = b"event: " + str(chunk["type"]).encode("utf-8") + b"\n" + data
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        if named or google:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            return
        # [DONE] and the end of the chunked body go out together, so a client that stops
        # reading at [DONE] has still received a complete response and can reuse the connection.
        done = b"data: [DONE]\n\n"
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
        self.wfile.flush()


def _json_bytes(payload: Any) -> bytes:
    """``payload`` as UTF-8 JSON; a lone surrogate (from a client's ``"\\ud800"``) is escaped."""
    try:
        return json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload).encode("ascii")
