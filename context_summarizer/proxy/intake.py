"""Reading a request body: bounded in size, bounded in time, and a client that leaves.

A body over ``max_body_bytes`` is refused (413) as soon as it passes the limit; a body whose next
piece does not arrive within ``body_read_timeout`` seconds (a client that sent less than its
``Content-Length`` and waits) gets a 408 and the connection is closed; a client that disconnects
mid-upload gets one info line and is counted as a 499 (nginx's "client closed request"), never as
an error of ours.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request

from .errors import ProxyError

logger = logging.getLogger("context_summarizer.proxy")

CLIENT_CLOSED_REQUEST = 499
"""The status counted for a client that disconnected before its request was read (no answer
reaches it)."""


class BodyTooLarge(Exception):
    """The request body is over ``max_body_bytes``."""


class BodyTimeout(Exception):
    """The next piece of the request body did not arrive in time."""


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


async def body_pieces(request: Request, timeout: float) -> AsyncIterator[bytes]:
    """The request body as it arrives; ``BodyTimeout`` when a piece takes longer than
    ``timeout`` seconds, ``ClientGone`` when the client disconnects."""
    pieces = request.stream()
    while True:
        try:
            async with asyncio.timeout(timeout):
                piece = await anext(pieces)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise BodyTimeout from None
        except ClientDisconnect:
            raise ClientGone from None
        yield piece


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The whole request body, refusing (``BodyTooLarge``) as soon as it passes ``limit`` bytes.

    Raises ``BodyTimeout`` and ``ClientGone`` as ``body_pieces`` does.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in body_pieces(request, timeout):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


async def whole_body(request: Request, limit: int, timeout: float) -> bytes:
    """``read_body``, with a body that could not be read refused as ``unread_body`` says
    (``ProxyError``: 413, 408, or 499 for a client gone)."""
    try:
        return await read_body(request, limit, timeout)
    except (BodyTooLarge, BodyTimeout, ClientGone) as exc:
        raise unread_body(request, exc, limit=limit, timeout=timeout) from None


def unread_body(
    request: Request, exc: BodyTooLarge | BodyTimeout | ClientGone, *, limit: int, timeout: float
) -> ProxyError:
    """The error for a body that could not be read (413, 408, or 499 for a client gone)."""
    if isinstance(exc, BodyTooLarge):
        return ProxyError(
            413, f"The request body is larger than {limit} bytes.", code="request_too_large"
        )
    if isinstance(exc, BodyTimeout):
        logger.info(
            "%s %s: no more of the request body within %g s; answered 408",
            request.method,
            request.url.path,
            timeout,
        )
        # The rest of the body may still arrive: the connection cannot carry another request.
        return ProxyError(
            408,
            f"The request body did not arrive within {timeout:g} seconds (it was shorter than "
            "its Content-Length, or the client stalled).",
            code="request_timeout",
            headers={"connection": "close"},
        )
    logger.info(
        "%s %s: the client disconnected before its request body was complete",
        request.method,
        request.url.path,
    )
    # Written to no one; the status is for the logs and the metrics.
    return ProxyError(
        CLIENT_CLOSED_REQUEST,
        "The client closed the connection before its request body was complete.",
        code="client_closed_request",
    )
