"""The lane's answer (``proxy.lane``): a proven request's upstream answer relayed to the client
with the full path's own code, written on the client's connection without the ASGI stack."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import httpx2
from starlette.responses import Response
from uvicorn.protocols.http.httptools_impl import STATUS_LINE
from uvicorn.protocols.utils import get_client_addr

from ..activity import note_request
from ..answers import broken_off, is_context_length
from ..chat import ChatExchange
from ..chat_context import Locating
from ..chat_request import ChatRequest
from ..errors import error_response
from ..headers import decoded_response_headers
from ..wire import WireConnection

if TYPE_CHECKING:
    from .request import LaneRequest

logger = logging.getLogger("summarizer.proxy")

PATH = "/v1/chat/completions"


class LaneAnswer:
    """The answer phase of one lane request (``early``: its last byte went before locating)."""

    def __init__(self, lane: LaneRequest, parsed: ChatRequest, early: bool) -> None:
        self.lane = lane
        self.parsed = parsed
        self.early = early

    async def run(self) -> None:
        """``_answer``, with an unexpected error answered as the app answers one: a 500 in
        the API's shape (when nothing is written yet) and a logged traceback."""
        try:
            await self._answer(self.parsed, self.early)
        except Exception as exc:
            logger.error("unhandled error on the lane: %s", type(exc).__name__, exc_info=exc)
            self.lane.drop_upstream()
            if not self.lane.cycle.response_complete and not self.lane.written:
                self.lane.written = True
                failure = error_response(
                    500,
                    "The summarizer proxy failed to handle this request.",
                    type="server_error",
                    code="internal_error",
                )
                self.lane.protocol.transport.write(
                    self._status_and_headers(500, failure.raw_headers, chunked=False)
                    + bytes(failure.body)
                )
                self.lane.state.metrics.requests.labels("chat", "500").inc()
            self.lane.protocol.transport.close()

    async def _answer(self, parsed: ChatRequest, early: bool) -> None:
        exchange = ChatExchange(self.lane.state, parsed)
        context = exchange.context
        locating: Locating | None = None
        if early:
            locating = context.begin_locating()
        else:
            invalid = await context.locate()
            if (
                invalid is not None
                or context.due
                or context.result is None
                or context.route != self.lane.route
                or not self._streamed_is(context.outgoing(), parsed.raw)
            ):
                self.lane.hand_over(parsed, whole=True)
                return
            if self.lane.connecting is not None:
                await asyncio.shield(self.lane.connecting)
            if self.lane.wire is None:  # the connection failed
                self.lane.hand_over(parsed, whole=True)
                return
            self.lane.send_rest()
        wire = self.lane.wire
        assert wire is not None
        exchange.overhead.pause()
        try:
            # A whole answer is read whole anyway: wait for all of it at once.
            await (wire.response_head() if parsed.stream else wire.whole_response())
        except httpx2.TransportError as exc:
            self.lane.let_go(keep=False)
            await self._located(locating, exchange)
            self._finish(exchange, self.lane.state.upstream_failure(exc, context.route))
            return
        finally:
            exchange.overhead.resume()
        await self._located(locating, exchange)
        status = wire.status
        upstream = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in wire.headers]
        streamed = dict(upstream).get("content-type", "").startswith("text/event-stream")
        if 200 <= status < 300 and parsed.stream and streamed:
            await self._relay(exchange, status, upstream, wire)
            return
        try:
            exchange.overhead.pause()
            content = await wire.read()
        except httpx2.TransportError as exc:
            self._finish(exchange, broken_off(self.lane.state, exc, context.route))
            return
        finally:
            exchange.overhead.resume()
            self.lane.let_go(keep=True)
        if 200 <= status < 300:
            response, usage = exchange.answered(status, upstream, content)
            if exchange.context.observing_waits:  # then before the answer, as the full path
                await exchange.context.observe(usage)
                self._finish(exchange, response)
                return
            self._write(exchange, response)
            # In the same step of the loop as the answer is written, so before this
            # connection's next request is read: only the store's write waits (queued).
            exchange.context.observe_queued(usage)
            self._done(exchange, response.status_code)
            return
        self.lane.state.metrics.upstream_errors.labels(str(status)).inc()
        if is_context_length(status, content):
            # The full path's one retry: it compacts harder and sends once more.
            self.lane.handed = False  # its connection is let go already
            self.lane.hand_over(parsed, whole=True, overflowed=True)
            return
        headers = decoded_response_headers(upstream)
        if not parsed.stream:
            headers.update(context.headers())
        self._finish(exchange, Response(content, status_code=status, headers=headers))

    async def _located(self, locating: Locating | None, exchange: ChatExchange) -> None:
        """Take up the locating of a request sent before it (done while the upstream
        worked)."""
        if locating is None:
            return
        context = exchange.context
        invalid = await context.locate(locating)
        if invalid is not None or context.due:
            # The bound said it fits and the count says otherwise: the next request compacts.
            self.lane.state.metrics.lane.labels("sent_over_bound").inc()
            located = context.located
            logger.warning(
                "the lane sent a request its bound said fits, which the count puts at %s tokens "
                "(trigger %s)",
                located.calibrated_tokens if located else "?",
                located.budget.trigger_tokens if located else "?",
            )

    def _streamed_is(self, outgoing: bytes, raw: bytes) -> bool:
        """Whether ``outgoing`` is the bytes the lane streams for ``raw``."""
        lead, skip = self.lane.lead
        if outgoing is raw:
            return not lead and not skip
        return outgoing == lead + raw[skip:]

    async def _relay(
        self,
        exchange: ChatExchange,
        status: int,
        upstream: list[tuple[str, str]],
        wire: WireConnection,
    ) -> None:
        """Relay an event stream, chunked, as the full path's ``relay`` rewrites it."""
        headers = decoded_response_headers(upstream)
        headers.update(exchange.context.headers())
        exchange.overhead.finish()
        head = Response(b"", status_code=status, headers=headers)
        raw_headers = [(k, v) for k, v in head.raw_headers if k != b"content-length"]
        transport = self.lane.protocol.transport
        self.lane.written = True
        # What is ready is written together, once the relay has to wait for the upstream (or
        # at the end): the events of one upstream read go in one write, with the head before
        # the first, as each write is a system call and wakes the client.
        pending = [self._status_and_headers(status, raw_headers, chunked=True)]
        loop = self.lane.protocol.loop
        scheduled = True  # the head goes at the latest once the relay first waits

        def flush() -> None:
            nonlocal scheduled
            scheduled = False
            if pending and not transport.is_closing():
                transport.write(b"".join(pending))
            pending.clear()

        loop.call_soon(flush)

        async def close() -> None:
            self.lane.let_go(keep=True)

        # Unless observing waits, the usage is observed once the stream's end is written, in
        # the same step of the loop.
        usages: list[Any] | None = None if exchange.context.observing_waits else []
        try:
            async for piece in exchange.relay(wire.body(), close, usages):
                if transport.is_closing():
                    return  # the client went away: client_gone cancels this task
                if piece:
                    pending.append(b"%x\r\n%b\r\n" % (len(piece), piece))
                    if not scheduled:
                        scheduled = True
                        loop.call_soon(flush)
                    await self.lane.protocol.flow.drain()
            pending.append(b"0\r\n\r\n")
            flush()
        finally:
            for usage in usages or ():
                exchange.context.observe_queued(usage)
        self._done(exchange, status)

    def _finish(self, exchange: ChatExchange, response: Response) -> None:
        """Write a whole answer, and be done."""
        self._write(exchange, response)
        self._done(exchange, response.status_code)

    def _write(self, exchange: ChatExchange, response: Response) -> None:
        """Write a whole answer."""
        exchange.overhead.finish()
        head = self._status_and_headers(response.status_code, response.raw_headers, chunked=False)
        self.lane.written = True
        self.lane.protocol.transport.write(head + bytes(response.body))

    def _status_and_headers(
        self, status: int, headers: list[tuple[bytes, bytes]], *, chunked: bool
    ) -> bytes:
        lines = [STATUS_LINE[status]]
        for name, value in [*self.lane.protocol.server_state.default_headers, *headers]:
            lines += [name, b": ", value, b"\r\n"]
        if chunked:
            lines.append(b"transfer-encoding: chunked\r\n")
        if not self.lane.cycle.keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        return b"".join(lines)

    def _done(self, exchange: ChatExchange, status: int) -> None:
        """The answer is sent: the connection serves the next request; the request is noted."""
        self.lane.cycle.response_complete = True
        protocol = self.lane.protocol
        if protocol.access_log:
            scope = self.lane.cycle.scope
            protocol.access_logger.info(
                '%s - "POST %s HTTP/1.1" %d', get_client_addr(scope), PATH, status
            )
        self.lane.state.metrics.lane.labels("taken").inc()
        self.lane.state.metrics.requests.labels("chat", str(status)).inc()
        if self.lane.cycle.keep_alive:
            protocol.on_response_complete()
        else:
            protocol.transport.close()
        note_request(self.lane.state, exchange.context, status=status, started=self.lane.started)
