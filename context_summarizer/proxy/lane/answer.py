"""The lane's answer (``proxy.lane``): a proven request's upstream answer relayed to the client
with the full path's own code, through ASGI's ``send`` but past the app."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx2
from starlette.responses import Response
from starlette.types import Send

from ..activity import note_request
from ..answers import broken_off, is_context_length
from ..chat_context import Locating
from ..errors import ProxyError, internal_error
from ..exchange import Exchange
from ..headers import decoded_response_headers
from ..wire import WireConnection
from .request import HandOver, LaneRequest, Proven

logger = logging.getLogger("context_summarizer.proxy")


class LaneAnswer:
    """The answer phase of one lane request: ``run`` answers it, or says to hand it over."""

    def __init__(self, lane: LaneRequest, proven: Proven, send: Send, started: float) -> None:
        self.lane = lane
        self.proven = proven
        self.send = send
        self.started = started
        """When the request began (``time.time()``), for the activity log."""
        self.responding = False
        """Whether the answer's head went to the client."""
        self.finished = False
        """Whether the answer's last message went to the client (a disconnect after it is the
        connection's, not this request's)."""

    async def run(self) -> HandOver | None:
        """Answer the request; the hand-over when the full path must take it (the body is
        whole: a compaction due, a rewritten body, a failed connection, an overflow answer).
        An unexpected error before the answer began is answered as the app answers one: a 500
        in the API's shape and a logged traceback (after, it is the server's to report)."""
        try:
            return await self._answer()
        except Exception as exc:
            self.lane.drop_upstream()
            if self.responding:
                raise
            logger.error("unhandled error on the lane: %s", type(exc).__name__, exc_info=exc)
            await self._respond(internal_error().response())
            self.lane.services.metrics.requests.labels("chat", "500").inc()
            return None

    async def _answer(self) -> HandOver | None:
        lane, parsed = self.lane, self.proven.parsed
        exchange = Exchange(lane.services.exchange, parsed)
        context = exchange.context
        locating: Locating | None = None
        if self.proven.early:
            locating = context.begin_locating()
        else:
            try:
                await context.locate()
                refused = False
            except ProxyError:  # the app answers it
                refused = True
            if (
                refused
                or context.due
                or context.result is None
                or context.route != lane.route
                or not self._streamed_is(context.outgoing(), parsed.raw)
            ):
                return HandOver(parsed)
            if lane.connecting is not None:
                await asyncio.shield(lane.connecting)
            if lane.wire is None:  # the connection failed
                return HandOver(parsed)
            lane.send_rest()
        wire = lane.wire
        assert wire is not None
        taking_up = self._taking_up(locating, exchange)
        exchange.overhead.pause()
        try:
            # A whole answer is read whole anyway: wait for all of it at once.
            await (wire.response_head() if parsed.stream else wire.whole_response())
        except httpx2.TransportError as exc:
            lane.let_go(keep=False)
            await taking_up
            await self._finish(
                exchange, lane.services.upstream.failure(exc, context.route).response()
            )
            return None
        except BaseException:
            taking_up.cancel()
            raise
        finally:
            exchange.overhead.resume()
        await taking_up
        status = wire.status
        upstream = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in wire.headers]
        streamed = dict(upstream).get("content-type", "").startswith("text/event-stream")
        if 200 <= status < 300 and parsed.stream and streamed:
            await self._relay(exchange, status, upstream, wire)
            return None
        try:
            exchange.overhead.pause()
            content = await wire.read()
        except httpx2.TransportError as exc:
            await self._finish(
                exchange, broken_off(lane.services.upstream, exc, context.route).response()
            )
            return None
        finally:
            exchange.overhead.resume()
            lane.let_go(keep=True)
        if 200 <= status < 300:
            try:
                response, usage = exchange.answered(status, upstream, content)
            except ProxyError as failed:  # not a chat completion: a 502
                await self._finish(exchange, failed.response())
                return None
            if context.observing_waits:  # then before the answer, as the full path
                await context.observe(usage)
                await self._finish(exchange, response)
                return None
            exchange.overhead.finish()
            await self._respond(response)
            # Right after the answer is written, before this connection's next request is
            # read: only the store's write waits (queued).
            context.observe_queued(usage)
            self._done(exchange, response.status_code)
            return None
        lane.services.upstream.errors.labels(str(status)).inc()
        if is_context_length(status, content):
            # The full path's one retry: it compacts harder and sends once more.
            return HandOver(parsed, overflowed=True)
        headers = decoded_response_headers(upstream)
        if not parsed.stream:
            headers.update(context.headers())
        await self._finish(exchange, Response(content, status_code=status, headers=headers))
        return None

    def _taking_up(self, locating: Locating | None, exchange: Exchange) -> asyncio.Future[None]:
        """``_located``, run while the upstream works: the thread most often ends long before
        the answer comes, and what follows it (the result, settling) is then off the answer's
        path (one wake of the event loop, for about 0.1 ms less per answer)."""
        if locating is None:
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        return asyncio.get_running_loop().create_task(self._located(locating, exchange))

    async def _located(self, locating: Locating, exchange: Exchange) -> None:
        """Take up the locating of a request sent before it (done while the upstream
        worked)."""
        context = exchange.context
        try:
            await context.locate(locating)
            refused = False
        except ProxyError:
            refused = True
        if not refused and context.due and context.control.mode == "now":
            return  # the session's ask for a compaction: its next request, not the lane, takes it
        if refused or context.due:
            # The bound said it fits and the count says otherwise: the next request compacts.
            self.lane.services.metrics.lane.labels("sent_over_bound").inc()
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
        exchange: Exchange,
        status: int,
        upstream: list[tuple[str, str]],
        wire: WireConnection,
    ) -> None:
        """Relay an event stream as the full path's ``relay`` rewrites it, each upstream read's
        events in one message (the server frames them)."""
        headers = decoded_response_headers(upstream)
        headers.update(exchange.context.headers())
        exchange.overhead.finish()
        head = Response(b"", status_code=status, headers=headers)
        raw_headers = [(k, v) for k, v in head.raw_headers if k != b"content-length"]
        send = self.send
        self.responding = True
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})

        async def close() -> None:
            self.lane.let_go(keep=True)

        # Unless observing waits, the usage is observed once the stream's end is written.
        usages: list[Any] | None = None if exchange.context.observing_waits else []
        try:
            async for piece in exchange.relay(wire.body(), close, usages):
                if piece:
                    await send({"type": "http.response.body", "body": piece, "more_body": True})
            self.finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            for usage in usages or ():
                exchange.context.observe_queued(usage)
        self._done(exchange, status)

    async def _finish(self, exchange: Exchange, response: Response) -> None:
        """Write a whole answer, and be done."""
        exchange.overhead.finish()
        await self._respond(response)
        self._done(exchange, response.status_code)

    async def _respond(self, response: Response) -> None:
        """Write a whole answer."""
        self.responding = True
        start = {"type": "http.response.start", "status": response.status_code}
        await self.send({**start, "headers": response.raw_headers})
        self.finished = True
        await self.send({"type": "http.response.body", "body": bytes(response.body)})

    def _done(self, exchange: Exchange, status: int) -> None:
        """The answer is sent: counted, and noted in the activity log."""
        services = self.lane.services
        services.metrics.lane.labels("taken").inc()
        services.metrics.requests.labels("chat", str(status)).inc()
        note_request(services.exchange, exchange.context, status=status, started=self.started)
