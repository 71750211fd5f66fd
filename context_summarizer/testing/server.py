"""An OpenAI- and Anthropic-compatible upstream on a real local socket, for tests, the demo
and benchmarks.

::

    with TestUpstream(context_window=8_000, responder=RoutingResponder(agent)) as up:
        client = openai.OpenAI(base_url=up.base_url, api_key="test", max_retries=0)
        claude = anthropic.Anthropic(base_url=up.root_url, api_key="test", max_retries=0)
        up.enqueue(Reply(content="hi"))           # scripted replies come first, FIFO
        up.inject(Fault(kind="rate_limit", retry_after=1))   # the next request gets a 429
        ...
        up.requests[-1].cached_tokens

Endpoints: ``POST /v1/chat/completions`` (JSON or SSE streaming), the Responses API's ``POST
/v1/responses`` (JSON or SSE streaming, ``previous_response_id`` over the responses it stored),
``POST /v1/responses/compact`` and ``GET /v1/responses/{id}``, Anthropic's ``POST /v1/messages``
(JSON or SSE streaming) and ``POST /v1/messages/count_tokens``, Google's ``POST
/v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (``gemini_api``; a
client such as ``google-genai`` takes ``root_url`` as its base URL), ``GET /v1/models``, ``GET
/v1/models/{id}``, ``POST /v1/embeddings``; anything else is a 404 with OpenAI's error body.
HTTP/1.1 with keep-alive; streams use chunked transfer encoding. Every model API answers from the
same script and responder: a Responses or Messages request reaches the responder translated to a
chat completion body.

Token accounting is the server's own, independent of summarizer's: see
:class:`~context_summarizer.testing.accounting.PromptTokenCounter` (and ``responses_chat`` for the
Responses API's items, :func:`~context_summarizer.testing.messages_cache.messages_prompt` for
messages). Chat completions' and responses' prompt caching follows OpenAI's rules
(:class:`~context_summarizer.testing.accounting.PrefixCache`), messages' Anthropic's explicit
breakpoints (:class:`~context_summarizer.testing.messages_cache.BreakpointCache`).

This module starts and stops the server; what it holds between requests is
:class:`~context_summarizer.testing.state.UpstreamState`, requests are routed in ``routes`` to the
endpoints in ``chat``, ``responses_api``, ``messages_api`` and ``embeddings``, and ``transport``
reads and writes
HTTP.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from .messages_cache import MESSAGES_CACHE_MIN_TOKENS, MESSAGES_CACHE_TTL
from .responders import Responder
from .routes import _Handler
from .state import UpstreamState
from .transport import _HTTPServer, _HTTPServerV6

__all__ = ["TestUpstream"]


class TestUpstream(UpstreamState):
    """An OpenAI (chat completions, Responses) and Anthropic (messages) server on a free local
    port.

    ``start()`` (or ``with``) binds and serves on daemon threads; ``stop()`` closes the port and
    every open connection. Replies come from ``enqueue``'d replies first, then ``responder``.
    ``requests`` logs every request, or only the newest ``max_log`` when that is set.
    ``messages_cache_min_tokens``, ``messages_cache_ttl`` (seconds; ``None``: no expiry) and
    ``clock`` set the Messages API's prompt cache (see
    :mod:`~context_summarizer.testing.messages_cache`).
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
        messages_cache_min_tokens: int = MESSAGES_CACHE_MIN_TOKENS,
        messages_cache_ttl: float | None = MESSAGES_CACHE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            context_window=context_window,
            responder=responder,
            model_name=model_name,
            max_log=max_log,
            response_headers=response_headers,
            messages_cache_min_tokens=messages_cache_min_tokens,
            messages_cache_ttl=messages_cache_ttl,
            clock=clock,
        )
        self.host = host
        self._requested_port = port
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # lifecycle

    def start(self) -> TestUpstream:
        """Bind the port and start serving; returns ``self``."""
        if self._server is not None:
            return self
        server_class = _HTTPServerV6 if ":" in self.host else _HTTPServer
        self._server = server_class((self.host, self._requested_port), self, _Handler)
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
    def connections_opened(self) -> int:
        """How many TCP connections clients have opened to it since ``start()``."""
        if self._server is None:
            raise RuntimeError("TestUpstream is not running; call start() first")
        return self._server.connections_opened

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT/v1``, what ``openai.OpenAI(base_url=...)`` takes."""
        return f"{self.root_url}/v1"

    @property
    def root_url(self) -> str:
        """``http://HOST:PORT`` (no ``/v1``), what ``anthropic.Anthropic(base_url=...)`` takes:
        the anthropic SDK appends ``/v1/messages`` itself."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"
