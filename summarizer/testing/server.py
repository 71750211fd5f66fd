"""An OpenAI-compatible upstream on a real local socket, for tests, the demo and benchmarks.

::

    with TestUpstream(context_window=8_000, responder=RoutingResponder(agent)) as up:
        client = openai.OpenAI(base_url=up.base_url, api_key="test", max_retries=0)
        up.enqueue(Reply(content="hi"))           # scripted replies come first, FIFO
        up.inject(Fault(kind="rate_limit", retry_after=1))   # the next request gets a 429
        ...
        up.requests[-1].cached_tokens

Endpoints: ``POST /v1/chat/completions`` (JSON or SSE streaming), ``GET /v1/models``,
``GET /v1/models/{id}``, ``POST /v1/embeddings``; anything else is a 404 with OpenAI's error
body. HTTP/1.1 with keep-alive; streams use chunked transfer encoding.

Token accounting is the server's own, independent of summarizer's: see
:class:`PromptTokenCounter`. Prompt caching follows OpenAI's rules: see :class:`PrefixCache`.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import math
import socket
import struct
import sys
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from ..core.errors import InvalidConversation
from ..core.messages import canonical_json, chain_step, message_digest, validate_messages
from ..loaders.tokenizers import load_encoding
from .faults import (
    Fault,
    default_fault_body,
    error_body,
    rate_limit_body,
    retry_headers,
)
from .responders import Reply, Responder, echo_responder, is_summary_request

__all__ = [
    "CACHE_INCREMENT",
    "CACHE_MIN_TOKENS",
    "Fault",
    "PrefixCache",
    "PromptTokenCounter",
    "RecordedRequest",
    "TestUpstream",
    "cached_tokens_for",
    "error_body",
]

CACHE_MIN_TOKENS = 1024
"""Prompts whose matching prefix is shorter than this get no cache hit."""
CACHE_INCREMENT = 128
"""Cache hits grow in steps of this many tokens beyond ``CACHE_MIN_TOKENS``."""

TOKENS_PER_MESSAGE = 4
REPLY_PRIMING_TOKENS = 3
NON_TEXT_PART_TOKENS = 85
EMBEDDING_DIMENSIONS = 64


# --- token accounting ---------------------------------------------------------------------------


class PromptTokenCounter:
    """Counts prompt tokens with o200k_base, using this server's own rendering.

    - each message: 4 + tokens(role) + content + tokens(name) + tokens(tool_call_id)
      + tokens(refusal) + for each tool call tokens(function name) + tokens(arguments)
      (the legacy ``function_call`` likewise);
    - content: a string's tokens; for a list of parts, each part's ``text`` (or ``refusal``)
      tokens, and a fixed 85 for any part without text (images, audio, files);
    - ``tools`` (when a non-empty list): tokens of its canonical JSON (sorted keys, no spaces);
    - plus 3 tokens priming the reply.

    Message counts are memoised by message digest (LRU, ``max_entries``), so a long session
    re-sent on every turn is only tokenized once per new message.
    """

    def __init__(self, *, max_entries: int = 100_000) -> None:
        self.encoding = load_encoding("o200k_base")
        self.max_entries = max_entries
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def text(self, text: str) -> int:
        """Tokens of a string (special-token text is counted as ordinary text)."""
        return len(self.encoding.encode_ordinary(text)) if text else 0

    def _value(self, value: Any) -> int:
        if value is None:
            return 0
        return self.text(value if isinstance(value, str) else canonical_json(value))

    def _content(self, content: Any) -> int:
        if isinstance(content, str):
            return self.text(content)
        if not isinstance(content, list):
            return self._value(content)
        total = 0
        for part in content:
            if isinstance(part, Mapping):
                text = part.get("text", part.get("refusal"))
                if isinstance(text, str):
                    total += self.text(text)
                    continue
            total += NON_TEXT_PART_TOKENS
        return total

    def render_message(self, message: Mapping[str, Any]) -> int:
        """Tokens of one message, uncached."""
        total = TOKENS_PER_MESSAGE + self._value(message.get("role"))
        total += self._content(message.get("content"))
        for key in ("name", "tool_call_id", "refusal"):
            total += self._value(message.get(key))
        calls = message.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            function = call.get("function") if isinstance(call, Mapping) else None
            if isinstance(function, Mapping):
                total += self._value(function.get("name")) + self._value(function.get("arguments"))
        function_call = message.get("function_call")
        if isinstance(function_call, Mapping):
            total += self._value(function_call.get("name"))
            total += self._value(function_call.get("arguments"))
        return total

    def message(self, message: Mapping[str, Any], digest: str | None = None) -> int:
        """Tokens of one message, memoised by its digest."""
        key = digest if digest is not None else message_digest(message)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                return cached
        count = self.render_message(message)
        with self._lock:
            self._cache[key] = count
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
        return count

    def tools(self, tools: Any) -> int:
        """Tokens of the ``tools`` list (0 when absent or empty)."""
        return self.text(canonical_json(tools)) if isinstance(tools, list) and tools else 0

    def prompt(self, body: Mapping[str, Any]) -> int:
        """Prompt tokens of a chat completion request body."""
        messages = body.get("messages")
        total = self.tools(body.get("tools")) + REPLY_PRIMING_TOKENS
        for message in messages if isinstance(messages, list) else ():
            if isinstance(message, Mapping):
                total += self.message(message)
        return total


# --- prompt caching -----------------------------------------------------------------------------


def cached_tokens_for(prefix_tokens: int, prompt_tokens: int) -> int:
    """OpenAI's rounding: nothing under 1,024 tokens, then 1,024 + whole steps of 128."""
    if prefix_tokens < CACHE_MIN_TOKENS:
        return 0
    rounded = CACHE_MIN_TOKENS + CACHE_INCREMENT * ((prefix_tokens - CACHE_MIN_TOKENS) // 128)
    return min(rounded, prompt_tokens)


class PrefixCache:
    """Remembers every prefix seen, as chain hash -> cumulative tokens of that prefix.

    The chain is seeded with a digest of (model, tools), so requests for another model or with
    another tools list never share a prefix. Entries are evicted least recently used first.
    """

    def __init__(self, *, max_entries: int = 250_000) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def seed(model: Any, tools: Any) -> str:
        """The namespace of a request: a digest of its model and tools."""
        tools_json = canonical_json(tools if isinstance(tools, list) and tools else [])
        return hashlib.sha256(
            f"{model}\n{tools_json}".encode("utf-8", "surrogatepass")
        ).hexdigest()[:32]

    def longest_prefix(self, chain: Sequence[str]) -> int:
        """Cumulative tokens of the longest already-seen prefix of ``chain`` (0 if none)."""
        with self._lock:
            for link in reversed(chain):
                tokens = self._entries.get(link)
                if tokens is not None:
                    self._entries.move_to_end(link)
                    return tokens
        return 0

    def register(self, chain: Sequence[str], cumulative: Sequence[int]) -> None:
        """Remember every prefix of a request that was answered."""
        with self._lock:
            for link, tokens in zip(chain, cumulative, strict=True):
                self._entries[link] = tokens
                self._entries.move_to_end(link)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (a cold cache)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


# --- faults and the request log -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the upstream received, and what it answered.

    ``status`` is ``None`` when the connection was dropped without a response. Token fields
    are ``None`` for requests that were not answered as chat completions.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    prompt_tokens: int | None
    cached_tokens: int | None
    status: int | None
    time: float
    completion_tokens: int | None = None
    fault: str | None = None
    stream: bool = False

    @property
    def is_summary(self) -> bool:
        """Whether this was a summary request (``tool_choice == "none"``)."""
        return isinstance(self.body, Mapping) and is_summary_request(self.body)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's messages (empty when there are none)."""
        if isinstance(self.body, Mapping) and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return []


# --- the server ---------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog (5) resets connections when many clients connect at once.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], upstream: TestUpstream) -> None:
        self.upstream = upstream
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return  # a client that went away is not an error worth a traceback
        super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
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


class TestUpstream:
    """An OpenAI-compatible chat completions server on a free local port.

    ``start()`` (or ``with``) binds and serves on daemon threads; ``stop()`` closes the port and
    every open connection. Replies come from ``enqueue``'d replies first, then ``responder``.
    ``requests`` logs every request, or only the newest ``max_log`` when that is set.
    """

    __test__ = False  # not a pytest test class, despite its name

    def __init__(
        self,
        *,
        context_window: int | None = None,
        responder: Responder | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        model_name: str = "test-model",
        max_log: int | None = None,
        response_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.context_window = context_window
        self.responder: Responder = responder if responder is not None else echo_responder
        self.host = host
        self.model_name = model_name
        self.response_headers = dict(response_headers or {})
        """Sent with every response, e.g. the ``Set-Cookie`` OpenAI's edge adds."""
        self.counter = PromptTokenCounter()
        self.cache = PrefixCache()
        self._requested_port = port
        self._replies: deque[Reply] = deque()
        self._faults: deque[Fault] = deque()
        # Benchmarks send thousands of large bodies: they keep only the newest ``max_log``.
        self._log: deque[RecordedRequest] = deque(maxlen=max_log)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> TestUpstream:
        """Bind the port and start serving; returns ``self``."""
        if self._server is not None:
            return self
        server_class = _HTTPServerV6 if ":" in self.host else _HTTPServer
        self._server = server_class((self.host, self._requested_port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"TestUpstream:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, release the port and close open connections. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> TestUpstream:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """Whether the server is serving."""
        return self._server is not None

    @property
    def port(self) -> int:
        """The bound port (only while running)."""
        if self._server is None:
            raise RuntimeError("TestUpstream is not running; call start() first")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``, what ``openai.OpenAI(base_url=...)`` takes."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"

    # scripting

    def enqueue(self, *replies: Reply | str) -> None:
        """Replies for the next chat completions, FIFO, used before the responder."""
        with self._lock:
            self._replies.extend(Reply(content=r) if isinstance(r, str) else r for r in replies)

    def inject(self, *faults: Fault) -> None:
        """Faults, FIFO; each is consumed by the next chat completion it ``matches``."""
        with self._lock:
            self._faults.extend(faults)

    @property
    def pending_replies(self) -> int:
        """Enqueued replies not yet used."""
        with self._lock:
            return len(self._replies)

    @property
    def pending_faults(self) -> int:
        """Injected faults not yet consumed."""
        with self._lock:
            return len(self._faults)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, oldest first (a snapshot)."""
        with self._lock:
            return list(self._log)

    def clear_log(self) -> None:
        """Forget the recorded requests."""
        with self._lock:
            self._log.clear()

    def reset_cache(self) -> None:
        """Empty the prompt cache: the next request of any conversation is a cache miss."""
        self.cache.clear()

    # used by the handler

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._log.append(record)

    def _take_fault(self, body: Mapping[str, Any] | None) -> Fault | None:
        """The next fault for a chat completion with ``body`` (None: for an embeddings call)."""
        with self._lock:
            for index, fault in enumerate(self._faults):
                if fault.match == "embeddings" if body is None else fault.matches(body):
                    del self._faults[index]
                    return fault
        return None

    def _take_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}"

    def _next_call_id(self) -> str:
        return f"call_{next(self._call_ids)}"


# --- the request handler ------------------------------------------------------------------------


class _Dropped(Exception):
    """The connection is to be closed without a response."""


@dataclass(slots=True)
class _Answer:
    content: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    completion_tokens: int


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "summarizer-test-upstream/1"
    server: _HTTPServer

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
    def upstream(self) -> TestUpstream:
        return self.server.upstream

    # plumbing

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks: list[bytes] = []
            while True:
                size_line = self.rfile.readline(65_537)
                size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65_537) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline(65_537)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

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
        """Answer ``data`` as is (``length``: a ``Content-Length`` to claim instead)."""
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        self.send_header("x-request-id", self.upstream._next_id("req_"))
        for key, value in {**self.upstream.response_headers, **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _send_half(self, payload: Any) -> None:
        """Send the first half of ``payload``'s JSON (claiming all of it), then reset."""
        whole = _json_bytes(payload)
        self._send_bytes(200, whole[: len(whole) // 2], length=len(whole))
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
            )
        )

    def _fail(self, status: int, body: Any, payload: dict[str, Any], **record: Any) -> None:
        self._record(body, status, **record)
        self._send_json(status, payload)

    def _dispatch(self) -> None:
        self._received = time.time()
        try:
            raw = self._read_body() if self.command in ("POST", "PUT", "PATCH") else b""
        except (OSError, ValueError):
            self.close_connection = True
            return
        path = urlsplit(self.path).path.rstrip("/")
        try:
            if self.command == "POST" and path == "/v1/chat/completions":
                self._chat_completions(raw)
            elif self.command == "POST" and path == "/v1/embeddings":
                self._embeddings(raw)
            elif self.command == "GET" and path == "/v1/models":
                self._models()
            elif self.command == "GET" and path.startswith("/v1/models/"):
                self._model(path.removeprefix("/v1/models/"))
            else:
                message = f"Invalid URL ({self.command} {urlsplit(self.path).path})"
                self._fail(404, _parse_or_none(raw), error_body(message))
        except _Dropped:
            self.close_connection = True
        except ConnectionError:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

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

    def _fault_answered(self, fault: Fault, body: Any, *, stream: bool = False) -> bool:
        """Apply ``fault``'s delay, and answer for it unless it alters a normal answer."""
        time.sleep(max(0.0, fault.seconds))
        if fault.kind == "drop":
            self._record(body, None, fault="drop", stream=stream)
            raise _Dropped
        if fault.kind == "body":
            self._record(body, fault.answer_status(), fault="body", stream=stream)
            self._send_bytes(fault.answer_status(), fault.content, fault.content_type)
            return True
        if fault.kind in ("status", "rate_limit"):
            status = fault.answer_status()
            payload = fault.body
            if payload is None:
                payload = (
                    rate_limit_body(str(body.get("model")), fault.retry_after)
                    if fault.kind == "rate_limit"
                    else default_fault_body(status)
                )
            self._record(body, status, fault=fault.kind, stream=stream)
            self._send_json(status, payload, retry_headers(fault.retry_after))
            return True
        return False

    # endpoints

    def _models(self) -> None:
        payload = {"object": "list", "data": [self._model_object(self.upstream.model_name)]}
        self._record(None, 200)
        self._send_json(200, payload)

    def _model(self, model_id: str) -> None:
        if model_id != self.upstream.model_name:
            message = f"The model `{model_id}` does not exist or you do not have access to it."
            self._fail(404, None, error_body(message, code="model_not_found"))
            return
        self._record(None, 200)
        self._send_json(200, self._model_object(model_id))

    @staticmethod
    def _model_object(model_id: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": 1_700_000_000, "owned_by": "system"}

    def _embeddings(self, raw: bytes) -> None:
        ok, body = self._parse_json(raw)
        if not ok:
            return
        fault = self.upstream._take_fault(None)
        if fault is not None and self._fault_answered(fault, body):
            return
        if not isinstance(body, dict) or "input" not in body:
            self._fail(400, body, error_body("'input' is a required property", param="input"))
            return
        inputs = body["input"]
        if isinstance(inputs, str) or (
            isinstance(inputs, list) and inputs and isinstance(inputs[0], int)
        ):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs:
            self._fail(400, body, error_body("'input' must not be empty", param="input"))
            return
        dimensions = body.get("dimensions")
        size = dimensions if isinstance(dimensions, int) and dimensions > 0 else None
        size = size or EMBEDDING_DIMENSIONS
        counter = self.upstream.counter
        data: list[dict[str, Any]] = []
        tokens = 0
        for index, item in enumerate(inputs):
            if isinstance(item, list):
                text = " ".join(str(t) for t in item)
                tokens += len(item)
            else:
                text = str(item)
                tokens += counter.text(text)
            vector = _fake_embedding(text, size)
            encoded: Any = vector
            if body.get("encoding_format") == "base64":
                encoded = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode("ascii")
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        payload = {
            "object": "list",
            "data": data,
            "model": body.get("model", self.upstream.model_name),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        self._record(body, 200, prompt_tokens=tokens, fault=fault.kind if fault else None)
        if fault is not None and fault.kind == "reset":
            self._send_half(payload)
        self._send_json(200, payload)

    def _chat_completions(self, raw: bytes) -> None:
        upstream = self.upstream
        ok, body = self._parse_json(raw)
        if not ok:
            return
        if not isinstance(body, dict):
            self._fail(400, body, error_body("The request body must be a JSON object."))
            return
        if not isinstance(body.get("model"), str) or not body["model"]:
            self._fail(400, body, error_body("you must provide a model parameter"))
            return
        if "messages" not in body:
            message = "Missing required parameter: 'messages'."
            self._fail(
                400, body, error_body(message, param="messages", code="missing_required_parameter")
            )
            return
        try:
            validate_messages(body["messages"])
        except InvalidConversation as error:
            self._fail(400, body, error_body(str(error), param=error.param))
            return
        stream = body.get("stream") is True
        if body.get("stream_options") is not None and not stream:
            message = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
            self._fail(400, body, error_body(message, param="stream_options"))
            return

        fault = upstream._take_fault(body)
        if fault is not None and self._fault_answered(fault, body, stream=stream):
            return
        fault_kind = fault.kind if fault is not None else None

        messages: list[dict[str, Any]] = body["messages"]
        counter = upstream.counter
        seed = PrefixCache.seed(body["model"], body.get("tools"))
        chain: list[str] = []
        cumulative: list[int] = []
        running = counter.tools(body.get("tools"))
        link = seed
        for item in messages:
            digest = message_digest(item)
            link = chain_step(link, digest)
            running += counter.message(item, digest)
            chain.append(link)
            cumulative.append(running)
        prompt_tokens = running + REPLY_PRIMING_TOKENS
        cached_tokens = cached_tokens_for(upstream.cache.longest_prefix(chain), prompt_tokens)

        limit = _max_output(body)
        window = upstream.context_window
        if window is not None and (prompt_tokens > window or prompt_tokens + (limit or 0) > window):
            if prompt_tokens > window:
                message = (
                    f"This model's maximum context length is {window} tokens. However, your "
                    f"messages resulted in {prompt_tokens} tokens. Please reduce the length of "
                    "the messages."
                )
            else:
                message = (
                    f"This model's maximum context length is {window} tokens. However, you "
                    f"requested {prompt_tokens + (limit or 0)} tokens ({prompt_tokens} in the "
                    f"messages, {limit} in the completion). Please reduce the length of the "
                    "messages or completion."
                )
            payload = error_body(message, param="messages", code="context_length_exceeded")
            self._fail(400, body, payload, prompt_tokens=prompt_tokens, fault=fault_kind)
            return

        try:
            reply = upstream._take_reply()
            if reply is None:
                reply = upstream.responder(body)
            answer = self._answer(reply, limit)
        except Exception as error:  # a broken responder is a server error, not a hang
            payload = error_body(
                f"The test upstream's responder failed: {type(error).__name__}: {error}",
                type="server_error",
            )
            self._fail(500, body, payload, prompt_tokens=prompt_tokens, fault=fault_kind)
            return

        upstream.cache.register(chain, cumulative)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": answer.completion_tokens,
            "total_tokens": prompt_tokens + answer.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        }
        if fault is not None and fault.kind == "bad_usage":
            usage["prompt_tokens"] = fault.prompt_tokens
        self._record(
            body,
            200,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached_tokens,
            completion_tokens=answer.completion_tokens,
            fault=fault_kind,
            stream=stream,
        )
        completion_id = upstream._next_id("chatcmpl-test")
        created = int(time.time())
        if stream:
            options = body.get("stream_options")
            include_usage = isinstance(options, dict) and options.get("include_usage") is True
            chunks = _stream_chunks(
                completion_id, created, body["model"], answer, usage if include_usage else None
            )
            if fault is not None and fault.kind == "reset":
                self._send_stream(chunks, reset_after=fault.events)
            self._send_stream(chunks, chunk_delay=reply.chunk_delay)
            return
        message_out: dict[str, Any] = {
            "role": "assistant",
            "content": answer.content,
            "refusal": None,
            "annotations": [],
        }
        if answer.tool_calls:
            message_out["tool_calls"] = answer.tool_calls
        payload = {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": message_out,
                    "logprobs": None,
                    "finish_reason": answer.finish_reason,
                }
            ],
            "usage": usage,
            "service_tier": "default",
            "system_fingerprint": "fp_test",
        }
        if fault is not None and fault.kind == "reset":
            self._send_half(payload)
        self._send_json(200, payload)

    def _answer(self, reply: Reply, limit: int | None) -> _Answer:
        counter = self.upstream.counter
        content = reply.content
        calls = list(reply.tool_calls)
        finish_reason = reply.derived_finish_reason()
        content_tokens = counter.encoding.encode_ordinary(content) if content else []
        if limit is not None and len(content_tokens) > limit:
            content_tokens = content_tokens[:limit]
            content = counter.encoding.decode(content_tokens)
            calls = []
            finish_reason = "length"
        tool_calls: list[dict[str, Any]] = []
        completion_tokens = len(content_tokens)
        for spec in calls:
            arguments = spec.arguments_json()
            completion_tokens += counter.text(spec.name) + counter.text(arguments)
            tool_calls.append(
                {
                    "id": spec.id or self.upstream._next_call_id(),
                    "type": "function",
                    "function": {"name": spec.name, "arguments": arguments},
                }
            )
        return _Answer(content, tool_calls, finish_reason, completion_tokens)

    def _send_stream(
        self,
        chunks: Iterator[dict[str, Any]],
        *,
        chunk_delay: float = 0.0,
        reset_after: int | None = None,
    ) -> None:
        """Send ``chunks`` as SSE events (``reset_after``: that many, then reset)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", self.upstream._next_id("req_"))
        for key, value in self.upstream.response_headers.items():
            self.send_header(key, value)
        self.end_headers()
        for number, chunk in enumerate(chunks):
            if number == reset_after:
                self._reset()
            if number and chunk_delay:
                time.sleep(chunk_delay)
            data = b"data: " + _json_bytes(chunk) + b"\n\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
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


def _parse_or_none(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def _max_output(body: Mapping[str, Any]) -> int | None:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(0, value)
    return None


def _pieces(text: str, count: int) -> list[str]:
    """``text`` split into at most ``count`` consecutive non-empty pieces."""
    if not text:
        return []
    size = max(1, math.ceil(len(text) / count))
    return [text[i : i + size] for i in range(0, len(text), size)]


def _stream_chunks(
    completion_id: str,
    created: int,
    model: str,
    answer: _Answer,
    usage: dict[str, Any] | None,
) -> Iterator[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "service_tier": "default",
            "system_fingerprint": "fp_test",
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
            ],
        }
        if usage is not None:
            out["usage"] = None
        return out

    first_content = "" if answer.content else None
    yield chunk({"role": "assistant", "content": first_content, "refusal": None})
    for piece in _pieces(answer.content or "", 4):
        yield chunk({"content": piece})
    for index, call in enumerate(answer.tool_calls):
        function = call["function"]
        yield chunk(
            {
                "tool_calls": [
                    {
                        "index": index,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": function["name"], "arguments": ""},
                    }
                ]
            }
        )
        for piece in _pieces(function["arguments"], 3):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    yield chunk({}, answer.finish_reason)
    if usage is not None:
        final = chunk({})
        final["choices"] = []
        final["usage"] = usage
        yield final


def _fake_embedding(text: str, size: int) -> list[float]:
    """A deterministic unit vector derived from ``text``."""
    values: list[float] = []
    block = 0
    while len(values) < size:
        digest = hashlib.sha256(f"{block}:{text}".encode()).digest()
        for offset in range(0, len(digest), 4):
            (number,) = struct.unpack_from("<I", digest, offset)
            values.append(number / 2**31 - 1.0)
        block += 1
    values = values[:size]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]
