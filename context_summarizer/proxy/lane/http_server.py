"""The proxy's HTTP/1.1 server: the ASGI app, the lane in front of it, served on httptools'
public parser (``http_connection``), on uvloop where it is installed.

Why the proxy has its own server: the lane answers in the time an extra hop costs, and an ASGI
server built for any app spends about as much again around each request (its request cycle, an
answer's head and body written apart, so the client wakes between them). This one runs the app
as plainly as ASGI allows: one task per request, ``receive`` fed by the parser, ``send`` writing
an answer's head with its first body bytes. HTTP parsing stays the parser's.

``HttpServer.serve`` runs the app's lifespan around serving; ``stop`` ends it gracefully (in-flight
requests finish within the grace period) and a second ``stop`` ends it at once.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Coroutine
from typing import Any

from starlette.types import ASGIApp, Message

from .http_connection import Connection
from .http_cycle import Refusal, plain_refusal


class HttpServer:
    """Serves ``app`` on the listening sockets given to ``serve`` until ``stop``.

    ``idle_timeout``: seconds an idle connection stays open; ``header_timeout``: seconds a
    request's head may take from its first byte; ``access_log``: a line per answer on the
    ``summarizer.access`` logger; ``refusal``: the answers the server writes itself.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        idle_timeout: float,
        header_timeout: float,
        access_log: bool = False,
        refusal: Refusal = plain_refusal,
    ) -> None:
        self.app = app
        self.refusal = refusal
        self.idle_timeout = idle_timeout
        self.header_timeout = header_timeout
        self.access_log = access_log
        self.connections: set[Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.state: dict[str, Any] = {}
        """The lifespan state every request's scope starts from."""
        self.stopping = False
        self.started = asyncio.Event()
        self._stop = asyncio.Event()
        self._now = asyncio.Event()

    def opened(self, connection: object) -> None:
        """A connection is made: it is closed when the server stops."""
        assert isinstance(connection, Connection)
        self.connections.add(connection)

    def closed(self, connection: object) -> None:
        """A connection is lost."""
        assert isinstance(connection, Connection)
        self.connections.discard(connection)

    def start(self, cycle: Coroutine[Any, Any, None]) -> None:
        """Run a request's ``cycle`` as a task the server waits for when it stops."""
        task = asyncio.get_running_loop().create_task(cycle)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def serve(self, sockets: list[socket.socket], *, grace: float) -> None:
        """Run the lifespan's start, serve until ``stop``, let what is in flight finish (within
        ``grace`` seconds, or until a second ``stop``), then run the lifespan's end.

        Raises ``RuntimeError`` when the app fails to start."""
        lifespan = _Lifespan(self.app, self.state)
        await lifespan.startup()
        loop = asyncio.get_running_loop()
        servers = [
            await loop.create_server(lambda: Connection(self), sock=sock, backlog=2048)
            for sock in sockets
        ]
        self.started.set()
        try:
            await self._stop.wait()
        finally:
            self.stopping = True
            for server in servers:
                server.close()
            for connection in list(self.connections):
                if not connection.pending:
                    connection.close()
            if self.tasks:
                finished = loop.create_task(asyncio.wait(set(self.tasks)))
                now = loop.create_task(self._now.wait())
                await asyncio.wait(
                    {finished, now}, timeout=grace, return_when=asyncio.FIRST_COMPLETED
                )
                finished.cancel()
                now.cancel()
            for task in list(self.tasks):
                task.cancel()
            for connection in list(self.connections):
                connection.close()
            if self.tasks:
                await asyncio.wait(set(self.tasks), timeout=5)
            await lifespan.shutdown()

    def stop(self) -> None:
        """Stop serving gracefully; called again, stop at once (from the serving loop)."""
        if self._stop.is_set():
            self._now.set()
        self._stop.set()


class _Lifespan:
    """The app's ASGI lifespan: started before serving, ended after."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self.inbox: asyncio.Queue[Message] = asyncio.Queue()
        self.outbox: asyncio.Queue[Message] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0"}, "state": self.state}
        self.task = asyncio.ensure_future(self.app(scope, self.inbox.get, self.outbox.put))
        await self.inbox.put({"type": "lifespan.startup"})
        try:
            answer = await self._answer()
        except Exception as exc:
            raise RuntimeError(f"the app failed to start: {exc!r}") from exc
        if answer["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"the app failed to start: {answer.get('message', '')}")

    async def shutdown(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        await self._answer()

    async def _answer(self) -> Message:
        assert self.task is not None
        getting = asyncio.get_running_loop().create_task(self.outbox.get())
        done, _ = await asyncio.wait({getting, self.task}, return_when=asyncio.FIRST_COMPLETED)
        if getting in done:
            return getting.result()
        getting.cancel()
        self.task.result()  # the app's own error, if it raised one
        return {"type": "lifespan.failed", "message": "the app's lifespan ended"}


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (port 0: a free one), listening.

    Raises ``OSError`` when it cannot bind (the port is taken)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()
