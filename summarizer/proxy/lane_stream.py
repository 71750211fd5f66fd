"""The lane's streamed answer (``proxy.lane_answer``): an event stream relayed from the upstream
connection's callbacks (``WireConnection.deliver``) straight to the client's, chunked.

An agent's stream arrives in a handful of reads; relaying each through a woken task and two
async generators cost more than the bytes did. Here each read from the upstream becomes at most
one write to the client, in the same step of the event loop, through the full path's own relay
(``EventRelay``). The task that runs the answer waits once, for the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import httpx2

from .event_relay import EventRelay, interruption
from .wire import WireConnection

if TYPE_CHECKING:
    from .chat import ChatExchange
    from .lane_request import LaneRequest

_END = b"0\r\n\r\n"


def chunk(piece: bytes) -> bytes:
    """``piece`` framed as one chunk of a chunked body."""
    return b"%x\r\n%b\r\n" % (len(piece), piece)


class LaneStream:
    """Receives one upstream event stream (a ``wire.BodyReceiver``) and writes it to the
    client: ``head`` with the first events, the rest as they come. Once the end is written,
    ``finished`` is called (in the same step of the loop) and ``done`` resolves; the usages the
    events reported are in ``relay.usages``. A failure of its own ends ``done`` with it."""

    def __init__(
        self,
        lane: LaneRequest,
        exchange: ChatExchange,
        wire: WireConnection,
        head: bytes,
        finished: Callable[[], None],
    ) -> None:
        self.lane = lane
        self.finished = finished
        self.exchange = exchange
        self.wire = wire
        self.relay = EventRelay(exchange.chat, exchange.context.result)
        self.transport = lane.protocol.transport
        self.pending = [head]
        self.done: asyncio.Future[None] = lane.protocol.loop.create_future()
        self.resuming: asyncio.Task[None] | None = None

    def received(self, piece: bytes) -> None:
        """Events the upstream's bytes complete, framed for the next write."""
        try:
            out = self.relay.feed(piece)
        except Exception as exc:
            self._broke(exc)
            return
        if out:
            self.pending.append(chunk(out))

    def flush(self) -> None:
        """Write what is ready, in one write; past the client's high-water mark, stop reading
        the upstream until the client has taken it."""
        if not self.pending:
            return
        if not self.transport.is_closing():
            self.transport.write(b"".join(self.pending))
        self.pending.clear()
        flow = self.lane.protocol.flow
        if flow.write_paused and self.resuming is None and self.wire.transport is not None:
            self.wire.transport.pause_reading()
            self.resuming = asyncio.ensure_future(self._resume_when_writable())

    async def _resume_when_writable(self) -> None:
        await self.lane.protocol.flow.drain()
        self.resuming = None
        wire = self.wire.transport
        if not self.done.done() and wire is not None and not wire.is_closing():
            wire.resume_reading()

    def ended(self, error: httpx2.TransportError | None) -> None:
        """The stream's end: the rest, or an error event for a stream broken off, then the
        chunked body's end; the upstream connection goes back to the pool when whole."""
        try:
            if error is None:
                rest = self.relay.end()
            else:
                rest = interruption(self.lane.state, error, self.exchange.context.route)
            if rest:
                self.pending.append(chunk(rest))
            self.pending.append(_END)
            self.flush()
            self._stop_resuming()
            self.lane.let_go(keep=error is None)
            self.finished()
        except Exception as exc:
            self._broke(exc)
            return
        if not self.done.done():
            self.done.set_result(None)

    def _broke(self, exc: Exception) -> None:
        """A failure of the relay's own: no more of the stream; the answer's task meets it."""
        self.give_up()
        if not self.done.done():
            self.done.set_exception(exc)

    def give_up(self) -> None:
        """Stop relaying (the client went away, or the answer's task was cancelled)."""
        self.wire.stop_delivering(self)
        self._stop_resuming()

    def _stop_resuming(self) -> None:
        """No more waiting for the client to drain: the connection reads again (a connection
        back in the pool must)."""
        if self.resuming is not None:
            self.resuming.cancel()
            self.resuming = None
            wire = self.wire.transport
            if wire is not None and not wire.is_closing():
                wire.resume_reading()
