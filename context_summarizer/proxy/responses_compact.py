"""``POST /v1/responses/compact``: the Responses API's standalone compaction, for any model.

The body is a Responses request (``model``, ``input``, ``instructions``, ``tools``...). The proxy
compacts its input as far as it can (everything but the verbatim tail the configuration keeps,
with the self-summary on the live input, the ledger and the online check) and answers OpenAI's
``response.compaction`` object. Its ``output`` is one of summarizer's readable compaction items
(``core.codecs.responses_compaction``), which the client sends back as its next ``input`` and the
proxy expands; with nothing to compact, the input as it was. ``usage`` is the proxy's estimate of
the input it compacted (the summary call's own usage is in ``/metrics``).

A request whose history the provider keeps (``previous_response_id``) is forwarded to the
upstream's own ``/responses/compact`` unchanged.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import Any

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .activity import note_summaries
from .chat_context import ChatContext
from .exchange_services import ExchangeServices
from .headers import decoded_response_headers
from .intake import whole_body
from .overhead import Overhead
from .responses_request import CODEC, ResponsesRequest, parse_responses_request
from .settings import Settings
from .upstream import Upstream


@dataclass
class CompactedInput:
    """A Responses input compacted now, as far as the configuration allows."""

    items: list[Any]
    """The input as the upstream would read it from now on (as it was: nothing to compact)."""
    item: dict[str, Any] | None
    """summarizer's compaction item standing for ``items``; None when nothing was compacted."""
    tokens: int
    """The proxy's estimate of the input's tokens."""
    checkpoint: str | None
    headers: dict[str, str]
    """The exchange's ``x-summarizer-*`` headers."""


async def compact_now(services: ExchangeServices, parsed: ResponsesRequest) -> CompactedInput:
    """Compact ``parsed``'s input now, as a crossing of the trigger at its present size would;
    ``ProxyError`` when it cannot (an invalid conversation, a failed summary call...).
    ``parsed`` must be managed (``decoded`` set)."""
    context = ChatContext(services, parsed, Overhead(services.metrics, stream=False))
    await context.locate()
    if context.warning is None and context.located is not None:
        # Compact as if the trigger were crossed at the input's present size: down to the
        # target in the same proportion, with a summary allowance like any compaction's. (A
        # trigger of 1 aimed at nothing, squeezing every summary to its floor, where a model's
        # summary was cut off at its cap and asked for again.)
        parsed.compact_threshold = max(1, context.located.calibrated_tokens - 1)
        await context.locate()
    if context.warning is None:
        await context.compact(force="manual")
    note_summaries(services, context)
    result = context.result
    items: Any = parsed.body["input"]
    if result is not None and result.rewritten and parsed.decoded is not None:
        items = CODEC.encode(parsed.decoded, list(result.messages))["input"]
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    item = parsed.announced_item(result) if result is not None and result.compacted else None
    return CompactedInput(
        items=list(items),
        item=item,
        tokens=result.report.estimated_tokens if result is not None else 0,
        checkpoint=result.checkpoint_id if result is not None else None,
        headers=context.headers(),
    )


async def responses_compact(
    request: Request, *, services: ExchangeServices, settings: Settings, compaction_key: bytes
) -> Response:
    """The ``POST /v1/responses/compact`` endpoint (mounted with its services bound)."""
    raw = await whole_body(request, settings.max_body_bytes, settings.body_read_timeout)
    parsed = parse_responses_request(raw, request.headers, key=compaction_key)
    if parsed.decoded is None:
        return await _forward(services.upstream, parsed)
    done = await compact_now(services, parsed)
    body = {
        "id": f"resp_cmp_{done.checkpoint or secrets.token_hex(8)}",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": [done.item] if done.item is not None else done.items,
        "usage": {
            "input_tokens": done.tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": done.tokens,
        },
    }
    return JSONResponse(body, headers=done.headers)


async def _forward(upstream: Upstream, parsed: ResponsesRequest) -> Response:
    """The upstream's own compaction of a conversation it keeps, relayed."""
    route = upstream.route_for(parsed.model)
    try:
        response = await upstream.http.post(
            route.url("/responses/compact"),
            content=parsed.raw,
            headers=upstream.forward_headers(
                parsed.headers, drop=("accept-encoding",), route=route
            ),
        )
    except httpx2.TransportError as exc:
        raise upstream.failure(exc, route) from exc
    headers = decoded_response_headers(response.headers.items())
    headers["x-summarizer-warning"] = (
        "the conversation lives at the provider (previous_response_id): compacted upstream"
    )
    return Response(response.content, status_code=response.status_code, headers=headers)
