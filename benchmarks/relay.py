"""The bytes floor: a TCP relay that forwards each connection's bytes both ways as they arrive.

No HTTP at all: every client connection gets its own connection to the upstream, and whatever
arrives on one side is written to the other at once (uvloop, as ``summarizer serve`` runs).
What it adds to a request is what one more hop on loopback costs through a Python process on
this machine: the least any proxy in Python can add, and what the issue calls the physical
floor.

    python -m benchmarks.relay --upstream URL --port N
"""

from __future__ import annotations

import argparse
import asyncio

import httpx2
import uvloop


class _Side(asyncio.Protocol):
    """One end of a relayed connection: what it receives is written to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending.append(data)
        else:
            peer.transport.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


def serve(upstream: str, port: int) -> None:
    """Relay 127.0.0.1:``port`` to ``upstream``'s host and port until interrupted."""
    url = httpx2.URL(upstream)
    host, upstream_port = url.host, url.port or 80

    async def main() -> None:
        loop = asyncio.get_running_loop()
        connecting: set[asyncio.Task[None]] = set()

        def accept() -> _Side:
            client = _Side()

            async def connect() -> None:
                try:
                    _, server = await loop.create_connection(_Side, host, upstream_port)
                except OSError:
                    if client.transport is not None:
                        client.transport.close()
                    return
                server.peer, client.peer = client, server
                assert server.transport is not None
                for data in client.pending:
                    server.transport.write(data)
                client.pending.clear()

            task = loop.create_task(connect())
            connecting.add(task)
            task.add_done_callback(connecting.discard)
            return client

        listening = await loop.create_server(accept, "127.0.0.1", port)
        await listening.serve_forever()

    uvloop.run(main())


def main() -> None:
    """Command line: serve the relay on 127.0.0.1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the upstream's base URL")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    serve(args.upstream, args.port)


if __name__ == "__main__":
    main()
