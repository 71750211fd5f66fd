"""The relaying of a streamed chat answer, without its I/O: the upstream's bytes in, the bytes
for the client out. Shared by the full path (``ChatExchange.relay``, an async generator) and the
lane (``proxy.lane_stream``, fed from the upstream connection's callbacks)."""

from __future__ import annotations

from typing import Any

import httpx2

from ..core.results import PrepareResult
from . import sse
from .answers import interrupted
from .chat_request import ManagedRequest
from .errors import error_event, error_payload
from .model_routes import ModelRoute
from .state import ProxyState


class EventRelay:
    """One stream's events as they complete, minus a usage chunk the client did not ask for,
    rewritten for the compaction ``result`` where the API needs it. The usages the events
    report collect in ``usages`` for the caller to observe."""

    def __init__(self, request: ManagedRequest, result: PrepareResult | None) -> None:
        self._request = request
        self._splitter = sse.EventSplitter()
        self._rewrite = request.event_rewriter(result)
        self.usages: list[Any] = []

    def feed(self, chunk: bytes) -> bytes:
        """What the client gets for ``chunk``: the events it completes, joined (maybe none)."""
        out = []
        request = self._request
        for event in self._splitter.feed(chunk):
            usage = request.event_usage(event)
            if usage is not None:
                self.usages.append(usage)
                if not request.keep_event(event):
                    continue
            out.append(event if self._rewrite is None else self._rewrite(event))
        return b"".join(out)

    def end(self) -> bytes:
        """What is left once the upstream's stream ends: an unterminated event, if any."""
        return self._splitter.rest()


def interruption(state: ProxyState, exc: httpx2.TransportError, route: ModelRoute) -> bytes:
    """The event that ends a stream ``route``'s upstream broke off (counted and logged): the
    200 is sent already, so the error goes as an event the SDKs raise on. The unfinished event
    the upstream was sending, if any, is dropped."""
    interrupted(state, exc, route)
    return error_event(
        error_payload(
            f"The upstream {route.host} broke off the stream: {type(exc).__name__}.",
            type="upstream_error",
            code="stream_interrupted",
        )
    )
