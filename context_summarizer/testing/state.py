"""What the test upstream holds between requests, and its log of the requests it received.

:class:`UpstreamState` is everything the request handler reads and updates: the settings requests
are answered with, the token counter and prompt cache, the replies and faults scripted for the
next requests, the request log (:class:`RecordedRequest`), the Responses API's stored responses
(:class:`StoredResponse`) and the id counters.
:class:`~context_summarizer.testing.server.TestUpstream` serves it on a socket.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .accounting import PrefixCache, PromptTokenCounter
from .faults import Fault
from .gemini_chat import gemini_chat_body
from .messages_cache import MESSAGES_CACHE_MIN_TOKENS, MESSAGES_CACHE_TTL, BreakpointCache
from .messages_chat import chat_body_for
from .responders import Reply, Responder, echo_responder, is_summary_request

__all__ = ["MAX_STORED_RESPONSES", "RecordedRequest", "StoredResponse", "UpstreamState"]

MAX_STORED_RESPONSES = 10_000
"""The Responses API's stored responses kept (the oldest are forgotten first)."""


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the upstream received, and what it answered.

    ``status`` is ``None`` when the connection was dropped without a response. Token fields
    are ``None`` for requests that were not answered by the model. ``api`` names the API the
    request used: ``"chat"`` (chat completions, and the other endpoints), ``"responses"``
    (``/v1/responses...``, whose ``body`` is the Responses API body), ``"gemini"`` (Google's
    ``generateContent``, whose ``body`` is the Gemini body) or ``"messages"`` (Anthropic's
    Messages API, whose requests record their Anthropic body: ``prompt_tokens`` is then the whole
    prompt (``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``),
    ``cached_tokens`` the tokens read from the cache and ``cache_creation_tokens`` those written to
    it (``None`` for other routes)).
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
    cache_creation_tokens: int | None = None
    api: str = "chat"

    @property
    def is_summary(self) -> bool:
        """Whether this was a summary request (``tool_choice`` ``"none"``, or the Messages
        API's ``{"type": "none"}``; see :func:`~context_summarizer.testing.is_summary_request`)."""
        if not isinstance(self.body, Mapping):
            return False
        if self.api == "messages":  # a text-block content is summary-detected as a string
            return is_summary_request(chat_body_for(self.body))
        if self.api == "gemini":
            return is_summary_request(gemini_chat_body(self.body, ""))
        return is_summary_request(self.body)

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The request's ``messages`` as sent (empty when there are none): chat messages, or
        for ``api == "messages"`` the Anthropic messages (``system`` is not among them)."""
        if isinstance(self.body, Mapping) and isinstance(self.body.get("messages"), list):
            return list(self.body["messages"])
        return []


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A Responses API response the upstream stored (``store`` not false), for
    ``previous_response_id`` and ``GET /v1/responses/{id}``.

    ``conversation`` is everything the model had seen and said by its end: the stored history it
    continued, its input items and its output items (its ``instructions`` are not carried over).
    """

    response: dict[str, Any]
    conversation: list[dict[str, Any]]


class UpstreamState:
    """The test upstream's settings, accounting, script and request log.

    Its request handlers read and update it; ``TestUpstream`` adds the socket that serves it.
    ``cache`` is the chat completions' prompt cache (OpenAI's rules) and ``messages_cache``
    the Messages API's (Anthropic's explicit caching: prefixes shorter than
    ``messages_cache_min_tokens`` are not cached, entries live ``messages_cache_ttl`` seconds
    by ``clock``; see :mod:`~context_summarizer.testing.messages_cache`).
    """

    def __init__(
        self,
        *,
        context_window: int | None = None,
        responder: Responder | None = None,
        model_name: str = "test-model",
        max_log: int | None = None,
        response_headers: Mapping[str, str] | None = None,
        messages_cache_min_tokens: int = MESSAGES_CACHE_MIN_TOKENS,
        messages_cache_ttl: float | None = MESSAGES_CACHE_TTL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context_window = context_window
        self.responder: Responder = responder if responder is not None else echo_responder
        self.model_name = model_name
        self.response_headers = dict(response_headers or {})
        """Sent with every response, e.g. the ``Set-Cookie`` OpenAI's edge adds."""
        self.counter = PromptTokenCounter()
        self.cache = PrefixCache()
        self.messages_cache = BreakpointCache(
            min_tokens=messages_cache_min_tokens, ttl=messages_cache_ttl, clock=clock
        )
        self._replies: deque[Reply] = deque()
        self._faults: deque[Fault] = deque()
        # Benchmarks send thousands of large bodies: they keep only the newest ``max_log``.
        self._log: deque[RecordedRequest] = deque(maxlen=max_log)
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self.call_id_tag = ""
        """Put in every generated tool call id after its prefix (``call_``, ``toolu_test``):
        ``serve --test-upstream`` sets a random one, so ids stay unique across restarts (an
        agent resuming a session sends the old ones back); empty, ids are deterministic."""
        self._stored: OrderedDict[str, StoredResponse] = OrderedDict()

    # scripting

    def enqueue(self, *replies: Reply | str) -> None:
        """Replies for the next chat completions, responses and messages, FIFO, used before the
        responder."""
        with self._lock:
            self._replies.extend(Reply(content=r) if isinstance(r, str) else r for r in replies)

    def inject(self, *faults: Fault) -> None:
        """Faults, FIFO; each is consumed by the next chat completion, response or message it
        ``matches``."""
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
        """Empty the prompt caches (both APIs'): the next request of any conversation is a
        cache miss."""
        self.cache.clear()
        self.messages_cache.clear()

    # used by the handler

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._log.append(record)

    def _take_fault(self, body: Mapping[str, Any] | None) -> Fault | None:
        """The next fault for a model request with ``body`` (a message: its chat translation;
        None: for an embeddings call)."""
        with self._lock:
            for index, fault in enumerate(self._faults):
                if fault.match == "embeddings" if body is None else fault.matches(body):
                    del self._faults[index]
                    return fault
        return None

    def _take_reply(self) -> Reply | None:
        with self._lock:
            return self._replies.popleft() if self._replies else None

    def _store_response(self, stored: StoredResponse) -> None:
        with self._lock:
            self._stored[str(stored.response["id"])] = stored
            while len(self._stored) > MAX_STORED_RESPONSES:
                self._stored.popitem(last=False)

    def _stored_response(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            return self._stored.get(response_id)

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}"

    def _next_call_id(self) -> str:
        return f"call_{self.call_id_tag}{next(self._call_ids)}"

    def _next_tool_use_id(self) -> str:
        return self._next_id(f"toolu_test{self.call_id_tag}")
