"""The lane's pool of upstream connections (``proxy.wire``), per upstream origin.

Connections are kept alive and reused for ``KEEPALIVE_EXPIRY`` seconds (the full path's pool
uses the same figure, shorter than common servers' idle timeouts), never reused after any
error, and closed with the pool.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time

import httpx2

from .wire import Origin, WireConnection

KEEPALIVE_EXPIRY = 4.0
MAX_IDLE = 200


def _readable(fileno: int) -> bool:
    """Whether an idle connection (its socket's ``fileno``) has something to read: the
    upstream closed it (or sent what it should not have), and the event loop has not seen it
    yet."""
    if fileno < 0:
        return False
    try:
        return bool(select.select([fileno], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class WirePool:
    """Idle upstream connections per origin, for the lane."""

    def __init__(self, *, connect_timeout: float, read_timeout: float) -> None:
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._idle: dict[Origin, list[WireConnection]] = {}
        self._ssl: ssl.SSLContext | None = None
        self._open: set[WireConnection] = set()
        self.serving = False
        """Whether the proxy serves (``open`` to ``close``): the lane claims nothing else."""

    def open(self) -> None:
        """Start serving (on the serving event loop)."""
        self.serving = True

    def idle(self, origin: Origin) -> WireConnection | None:
        """A live idle connection to ``origin``, taken from the pool; None when there is none."""
        connections = self._idle.get(origin)
        now = time.monotonic()
        while connections:
            connection = connections.pop()
            transport = connection.transport
            if (
                connection.broken
                or transport is None
                or transport.is_closing()
                or now - connection.idle_since > KEEPALIVE_EXPIRY
                or _readable(connection.fileno)
            ):
                self.discard(connection)
                continue
            return connection
        return None

    async def connect(self, origin: Origin) -> WireConnection:
        """A new connection to ``origin``."""
        scheme, host, port = origin
        loop = asyncio.get_running_loop()
        context = None
        if scheme == "https":
            if self._ssl is None:
                self._ssl = httpx2.create_ssl_context()
            context = self._ssl
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, connection = await loop.create_connection(
                    lambda: WireConnection(origin, self.read_timeout),
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            raise httpx2.ConnectError(f"could not connect to {host}:{port}: {exc}") from None
        self._open.add(connection)
        return connection

    def release(self, connection: WireConnection) -> None:
        """Give a connection back after its exchange: pooled when it can serve another."""
        if connection.broken or not connection.complete or not connection.keep_alive:
            self.discard(connection)
            return
        connection.idle_since = time.monotonic()
        idle = self._idle.setdefault(connection.origin, [])
        idle.append(connection)
        if len(idle) > MAX_IDLE:
            self.discard(idle.pop(0))

    def discard(self, connection: WireConnection) -> None:
        """Close a connection and forget it (an exchange given up, or one not to reuse)."""
        connection.abandon()
        self._open.discard(connection)

    def close(self) -> None:
        """Close every connection, and stop serving."""
        self.serving = False
        for connection in list(self._open):
            connection.abandon()
        self._open.clear()
        self._idle.clear()
