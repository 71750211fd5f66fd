"""The floor: a proxy on the same stack as ``summarizer serve`` that only receives and forwards.

Uvicorn, a Starlette route and an ``httpx2`` client, like the proxy, but no parsing, no
hashing, no store: it reads the request body, sends it to the upstream as is, and relays the
answer (streamed when the upstream streams). What it adds to a request is what moving the bytes
through this stack costs on this machine, the least any proxy built on it can add.

    python -m benchmarks.passthrough --upstream URL --port N
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

_HOP = {"content-length", "transfer-encoding", "connection", "content-encoding", "keep-alive"}


def create_app(upstream: str) -> Starlette:
    """The pass-through app in front of ``upstream`` (a ``/v1`` base URL)."""
    client: dict[str, httpx2.AsyncClient] = {}

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        limits = httpx2.Limits(max_connections=1000, max_keepalive_connections=200)
        async with httpx2.AsyncClient(timeout=600, limits=limits) as http:
            client["http"] = http
            yield

    async def forward(request: Request) -> Response:
        http = client["http"]
        body = await request.body()
        headers = [
            (k, v)
            for k, v in request.headers.items()
            if k not in _HOP and k not in ("host", "accept-encoding")
        ]
        upstream_request = http.build_request(
            "POST",
            f"{upstream}{request.url.path.removeprefix('/v1')}",
            content=body,
            headers=[*headers, ("accept-encoding", "identity")],
        )
        response = await http.send(upstream_request, stream=True)
        relayed = {k: v for k, v in response.headers.items() if k not in _HOP}
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            return StreamingResponse(
                response.aiter_raw(),
                status_code=response.status_code,
                headers=relayed,
                background=BackgroundTask(response.aclose),
            )
        content = await response.aread()
        await response.aclose()
        return Response(content, status_code=response.status_code, headers=relayed)

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type="application/json")

    return Starlette(
        routes=[Route("/healthz", healthz), Route("/v1/{rest:path}", forward, methods=["POST"])],
        lifespan=lifespan,
    )


def main() -> None:
    """Command line: serve the pass-through on 127.0.0.1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the upstream's /v1 base URL")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        create_app(args.upstream.rstrip("/")),
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        server_header=False,
        timeout_keep_alive=65,
    )


if __name__ == "__main__":
    main()
