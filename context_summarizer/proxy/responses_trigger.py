"""``POST /v1/responses`` whose ``input`` ends with ``{"type": "compaction_trigger"}``: answered
by the proxy with one of its own compaction items, for any model.

This is how Codex CLI compacts (its ``remote_compaction_v2``, sent with the header
``x-codex-beta-features: remote_compaction_v2``): an ordinary Responses request, streamed, whose
input is the whole conversation plus that last item; it requires exactly one ``compaction`` item
among the output items (``response.output_item.done``) before ``response.completed``, keeps it in
its history and sends it back in later inputs. The proxy compacts the input without the trigger as
``POST /v1/responses/compact`` does (``responses_compact.compact_now``) and answers a Response
whose ``output`` is that one item: when nothing could be compacted, an item standing for the input
as it was. The answer is whole or streamed (``response.created``, ``response.in_progress``,
``response.output_item.added``/``.done``, ``response.completed``) as the request's ``stream``
says. Its ``usage`` is the proxy's estimate of the input, no output tokens.

A request whose history the provider keeps (``previous_response_id``...) goes upstream as it is,
trigger included, like any other.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.responses import JSONResponse, Response

from ..core.codecs.responses_chat import dumps, response_object
from .apis import RESPONSES
from .body import replaced_body
from .exchange_services import ExchangeServices
from .front_door import Arrival, DoorAnswer, FrontDoor
from .responses_compact import compact_now
from .responses_request import ResponsesRequest, parse_responses_request

TRIGGER = "compaction_trigger"
"""The type of the input item asking for a compaction."""


def ends_with_trigger(body: Any) -> bool:
    """Whether a request body's ``input`` ends with a ``compaction_trigger`` item."""
    items = body.get("input") if isinstance(body, dict) else None
    return (
        isinstance(items, list)
        and bool(items)
        and isinstance(items[-1], dict)
        and items[-1].get("type") == TRIGGER
    )


def parse_responses(
    raw: bytes, headers: Any, *, key: bytes, chat_upstream: bool = False
) -> ResponsesRequest | TriggeredCompaction:
    """``parse_responses_request``, except that a managed request ending with a compaction
    trigger becomes ``TriggeredCompaction``, the proxy's own answer."""
    parsed = parse_responses_request(raw, headers, key=key, chat_upstream=chat_upstream)
    if parsed.decoded is None or not ends_with_trigger(parsed.body):
        return parsed
    conversation = parsed.body["input"][:-1]
    rest = replaced_body(parsed.raw, parsed.body, {"input": conversation})
    # The input is expanded already: it holds no compaction item of ours to read again.
    request = parse_responses_request(rest, headers, key=key, chat_upstream=chat_upstream)
    return TriggeredCompaction(request)


class TriggeredCompaction(DoorAnswer):
    """A compaction trigger, which the proxy answers: the request's conversation compacted
    (``compact_now``), and the Response holding the compaction item."""

    def __init__(self, request: ResponsesRequest) -> None:
        self.request = request

    async def answer(self, services: ExchangeServices) -> Response:
        """Compact, and answer; ``ProxyError`` when it cannot be compacted."""
        return await triggered_answer(services, self.request)


async def triggered_answer(services: ExchangeServices, parsed: ResponsesRequest) -> Response:
    """The Response to a compaction trigger on ``parsed``'s conversation (trigger removed);
    ``ProxyError`` when it cannot be compacted."""
    done = await compact_now(services, parsed)
    item = done.item or parsed.sealed("", done.items, done.checkpoint)
    response_id = f"resp_cmp_{done.checkpoint or secrets.token_hex(8)}"
    usage = {"prompt_tokens": done.tokens, "completion_tokens": 0}
    body = response_object(parsed.body, response_id, [item], usage, "stop")
    headers = done.headers
    if not parsed.stream:
        return JSONResponse(body, headers=headers)
    started = response_object(parsed.body, response_id, [], None, None, in_progress=True)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": body},
    ]
    stream = b"".join(
        f"event: {event['type']}\ndata: {dumps({**event, 'sequence_number': n})}\n\n".encode()
        for n, event in enumerate(events)
    )
    headers["cache-control"] = "no-cache"
    return Response(stream, media_type="text/event-stream", headers=headers)


def _parse(raw: bytes, headers: Any, arrival: Arrival) -> ResponsesRequest | TriggeredCompaction:
    chat = arrival.settings.responses_upstream == "chat"
    return parse_responses(raw, headers, key=arrival.compaction_key, chat_upstream=chat)


FRONT_DOOR = FrontDoor(RESPONSES, ("/v1/responses",), _parse)
"""OpenAI's Responses, managed (``/v1/responses/compact`` is answered by ``responses_compact``)."""
