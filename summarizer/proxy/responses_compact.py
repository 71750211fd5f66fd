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
from typing import Any

import httpx2
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .chat_context import ChatContext, Overhead
from .headers import decoded_response_headers
from .intake import BodyTimeout, BodyTooLarge, ClientGone, read_body, unread_body_response
from .responses_request import CODEC, ResponsesRequest, parse_responses_request
from .state import ProxyState


async def responses_compact(request: Request) -> Response:
    """The ``POST /v1/responses/compact`` endpoint."""
    state: ProxyState = request.app.state.proxy
    settings = state.settings
    try:
        raw = await read_body(request, settings.max_body_bytes, settings.body_read_timeout)
    except (BodyTooLarge, BodyTimeout, ClientGone) as exc:
        return unread_body_response(
            request, exc, limit=settings.max_body_bytes, timeout=settings.body_read_timeout
        )
    parsed = parse_responses_request(raw, request.headers)
    if isinstance(parsed, Response):
        return parsed
    if parsed.decoded is None:
        return await _forward(state, parsed)
    parsed.compact_threshold = 1  # compact now: everything but what must stay verbatim
    context = ChatContext(state, parsed, Overhead(state, stream=False))
    invalid = await context.locate()
    if invalid is not None:
        return invalid
    if context.warning is None:
        failed = await context.compact(force="manual")
        if failed is not None:
            return failed
    result = context.result
    items: Any = parsed.body["input"]
    if result is not None and result.rewritten:
        items = CODEC.encode(parsed.decoded, list(result.messages))["input"]
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    output = list(items)
    if result is not None and result.compacted:
        announced = parsed.announced_item(result)
        output = [announced] if announced is not None else output
    tokens = result.report.estimated_tokens if result is not None else 0
    checkpoint = result.checkpoint_id if result is not None else None
    body = {
        "id": f"resp_cmp_{checkpoint or secrets.token_hex(8)}",
        "object": "response.compaction",
        "created_at": int(time.time()),
        "output": output,
        "usage": {
            "input_tokens": tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 0,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tokens,
        },
    }
    return JSONResponse(body, headers=context.headers())


async def _forward(state: ProxyState, parsed: ResponsesRequest) -> Response:
    """The upstream's own compaction of a conversation it keeps, relayed."""
    route = state.route_for(parsed.model)
    try:
        response = await state.http.post(
            route.url("/responses/compact"),
            content=parsed.raw,
            headers=state.forward_headers(parsed.headers, drop=("accept-encoding",), route=route),
        )
    except httpx2.TransportError as exc:
        return state.upstream_failure(exc, route)
    headers = decoded_response_headers(response.headers.items())
    headers["x-summarizer-warning"] = (
        "the conversation lives at the provider (previous_response_id): compacted upstream"
    )
    return Response(response.content, status_code=response.status_code, headers=headers)
