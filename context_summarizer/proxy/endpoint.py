"""The one endpoint every front door mounts: read the body (bounded in size and time), parse it
as the front door reads its API (the fast path reads a chat body from its new bytes), then the
``Exchange``: locate, compact if due, send, relay; the request noted in the activity log once
its answer is sent.

Parsing a large body runs in a worker thread, as does all locating (hashing, counting, the
store), so neither one huge request nor a slow store stalls the event loop that serves every
other session.
"""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from .activity import note_after
from .chat_request import ChatRequest
from .errors import ProxyError
from .exchange import OFFLOAD_BYTES, Exchange
from .exchange_services import ExchangeServices
from .fast_path import FastPath
from .front_door import Arrival, DoorAnswer, FrontDoor, Parse
from .intake import whole_body
from .managed_request import ManagedRequest
from .settings import Settings

HANDED_OVER = "summarizer.handed_over"
"""Where, in the ASGI ``state`` of a request the lane (``proxy.lane``) hands over to this path,
it leaves what its fast path made of the body: the request, or None (parse it whole)."""

OVERFLOWED = "summarizer.overflowed"
"""Set there (True) when the lane's send of it was refused as too long."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """The endpoint of one front door's routes (``serve``), with the services it uses."""

    door: FrontDoor
    services: ExchangeServices
    settings: Settings
    compaction_key: bytes
    fast_path: FastPath | None
    """Recent chat bodies (None: off, or not the chat front door)."""

    async def serve(self, request: Request) -> Response:
        """A context-managed request: read, parse, locate, compact if due, send, relay."""
        settings = self.settings
        started = time.time()
        raw = await whole_body(request, settings.max_body_bytes, settings.body_read_timeout)
        fast = self.fast_path
        arrival = Arrival(request.path_params, request.url.query, settings, self.compaction_key)
        parsed: ManagedRequest | DoorAnswer | None = None
        handed = request.scope.get("state") or {}
        if HANDED_OVER in handed:  # the lane tried this body already
            parsed = handed[HANDED_OVER]
        elif fast is not None:
            parsed = fast.parse(raw, request.headers)
        if parsed is None:
            work = functools.partial(
                _parse_whole, self.door.parse, fast, raw, request.headers, arrival
            )
            parsed = await asyncio.to_thread(work) if len(raw) > OFFLOAD_BYTES else work()
        if isinstance(parsed, DoorAnswer):  # the front door answers it itself
            try:
                return await parsed.answer(self.services)
            except ProxyError as failed:
                return failed.response()
        exchange = Exchange(self.services, parsed, overflowed=handed.get(OVERFLOWED, False))
        exchange.context.splice_held()  # never on the lane: held turns stand on a checkpoint
        try:
            response = await _exchange(exchange)
        except ProxyError as failed:  # written here, so the activity log notes it too
            response = failed.response()
        return note_after(response, self.services, exchange.context, started)


def _parse_whole(
    parse: Parse, fast: FastPath | None, raw: bytes, headers: Any, arrival: Arrival
) -> ManagedRequest | DoorAnswer:
    """``parse(raw, headers, arrival)``; a chat request is then remembered for the fast path."""
    parsed = parse(raw, headers, arrival)
    if fast is not None and isinstance(parsed, ChatRequest):
        fast.learn(parsed)
    return parsed


async def _exchange(exchange: Exchange) -> Response:
    """Locate, compact if due, send, relay: the answer to a parsed request."""
    parsed = exchange.chat
    context = exchange.context
    await context.locate()
    if context.due:
        if not parsed.stream:
            await context.compact()
        else:
            task = asyncio.ensure_future(context.compact())
            done, _ = await asyncio.wait({task}, timeout=exchange.services.keepalive_interval)
            if not done:
                # Not known yet: the SSE comment after the keepalives says what happened.
                headers = {
                    "x-summarizer-compacted": "pending",
                    "x-summarizer-prompt-tokens": "",
                    "x-summarizer-checkpoint": "",
                    "cache-control": "no-cache",
                }
                return StreamingResponse(
                    exchange.relay_after_compaction(task),
                    media_type="text/event-stream",
                    headers=headers,
                )
            task.result()
    return await (exchange.respond_stream() if parsed.stream else exchange.respond())
