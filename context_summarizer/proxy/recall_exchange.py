"""The recall tool loop of one exchange: the tool offered once its conversation has a
compaction, the model asked again while it calls recall alone, and the client answered once,
streamed or not, in its API's shape (``core.recall_loop`` decides; this module sends).

The client never sees the recall exchange: its answer is the last round's (its text streamed
as it comes, the calls of a round held until the round ends), and its history never holds a
recall call. Only the first round's usage calibrates the engine (it is the request the engine
counted); the later rounds add the recall exchange, which the engine never counted (their usage
is only counted, in the token counters). A later round's upstream failure is passed to the
client as it came.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import httpx2
from starlette.responses import Response

from ..core.recall_codec import RecallStream
from ..core.recall_loop import RecallLoop, Step, loop_for
from . import sse
from .answers import (
    count_usage,
    interrupted,
    invalid_answer,
    is_event_stream,
    upstream_error_payload,
)
from .body import json_bytes, json_object
from .errors import ProxyError, error_event, error_payload
from .headers import decoded_response_headers

if TYPE_CHECKING:
    from .chat_context import ChatContext
    from .exchange_services import ExchangeServices
    from .managed_request import ManagedRequest


class Exchange(Protocol):
    """What the loop uses of the exchange it runs in (``exchange.Exchange``): its request,
    context and services, and how it sends a body, reads an answer and answers the client."""

    services: ExchangeServices
    chat: ManagedRequest
    context: ChatContext

    async def send(self, content: bytes | None = None) -> httpx2.Response:
        """Send a body upstream (its answer streamed)."""
        ...

    async def read(self, response: httpx2.Response) -> bytes:
        """The whole body of an upstream answer."""
        ...

    def answered(
        self, status: int, upstream_headers: Iterable[tuple[str, str]], content: bytes
    ) -> tuple[Response, Any]:
        """The answer to relay for a whole upstream answer, and its usage."""
        ...


def recall_loop(context: ChatContext) -> RecallLoop | None:
    """The loop of ``context``'s settled request (``core.recall_loop.loop_for``)."""
    prompts = context.route.context.engine.prompts
    return loop_for(context.chat.recall, context.located, context.result, prompts)


def offered_body(loop: RecallLoop, outgoing: bytes) -> bytes:
    """The outgoing body with the tool offered (the loop's first request)."""
    body = json_object(outgoing, exact=True)
    assert body is not None  # the proxy's own serialization of a JSON object
    return json_bytes(loop.first(body))


def recall_headers(loop: RecallLoop) -> dict[str, str]:
    """The ``x-summarizer-recall-*`` headers: the rounds asked again and the calls answered."""
    return {
        "x-summarizer-recall-rounds": str(loop.rounds),
        "x-summarizer-recall-calls": str(loop.calls),
    }


def account(exchange: Exchange, loop: RecallLoop, step: Step) -> None:
    """Count the loop in the metrics, and hold the results of recall calls made beside the
    agent's own for the conversation's next request."""
    metrics, api = exchange.services.metrics, exchange.chat.api.name
    if step.held is not None:
        exchange.services.held.put(exchange.chat.namespace, step.held)
        metrics.recall_calls.labels(api, "held").inc(len(step.held.results))
    asked_again = loop.calls - (len(step.held.results) if step.held is not None else 0)
    if asked_again:
        metrics.recall_calls.labels(api, "asked_again").inc(asked_again)
    if loop.rounds:
        metrics.recall_rounds.labels(api).inc(loop.rounds)
    if loop.chars:
        metrics.recall_chars.labels(api).inc(loop.chars)
    exchange.context.recall_calls = loop.calls
    exchange.context.recalled = list(loop.recalled)


async def whole_answer(exchange: Exchange, loop: RecallLoop, response: httpx2.Response) -> Response:
    """A non-streamed exchange's answer: rounds until the model answers without calling recall
    alone (or the bound is reached), then that answer, the recall calls taken out."""
    content = await exchange.read(response)
    status, upstream_headers = response.status_code, response.headers.items()
    first_usage: Any = None
    rounds = 0
    while True:
        answer = json_object(content, exact=exchange.chat.rewrites_answers)
        if answer is None:
            raise invalid_answer(exchange.services.upstream, status, exchange.context.route)
        usage = exchange.chat.answer_usage(answer)
        if rounds == 0:
            first_usage = dict(usage) if isinstance(usage, Mapping) else usage
        else:  # a later round's: counted, never observed
            count_usage(exchange.services.metrics.tokens, exchange.chat.api.name, usage)
        step = loop.step(answer)
        if step.again is None:
            break
        rounds += 1
        response = await exchange.send(json_bytes(step.again))
        content = await exchange.read(response)
        status, upstream_headers = response.status_code, response.headers.items()
        if not response.is_success:  # passed through as the upstream wrote it
            account(exchange, loop, Step(answer))
            exchange.services.upstream.errors.labels(str(status)).inc()
            headers = decoded_response_headers(upstream_headers)
            headers.update(exchange.context.headers())
            headers.update(recall_headers(loop))
            return Response(content, status_code=status, headers=headers)
    account(exchange, loop, step)
    if step.answer is not answer:  # recall calls taken out: the answer is written anew
        content = json_bytes(step.answer)
    answered, _ = exchange.answered(status, upstream_headers, content)
    answered.headers.update(recall_headers(loop))
    await exchange.context.observe(first_usage)
    return answered


async def relay(
    exchange: Exchange, loop: RecallLoop, response: httpx2.Response
) -> AsyncIterator[bytes]:
    """A streamed exchange's events: each round's relayed as they come until its first call;
    a round that called recall alone is dropped from there and the model asked again; the last
    round's held events end the stream, the recall calls taken out."""
    chat = exchange.chat
    rewrite = chat.event_rewriter(exchange.context.result)
    stream: RecallStream = loop.codec.stream(None)
    first = True
    try:
        while True:
            splitter = sse.EventSplitter()
            try:
                async for chunk in response.aiter_bytes():
                    for event in splitter.feed(chunk):
                        usage = chat.event_usage(event)
                        if usage is not None and first:
                            await exchange.context.observe(usage)
                        elif usage is not None:  # a later round's: counted, never observed
                            count_usage(exchange.services.metrics.tokens, chat.api.name, usage)
                        for out in stream.feed(event):
                            kept = _client_event(exchange, out, rewrite)
                            if kept:
                                yield kept
                rest = splitter.rest()
                if rest.strip():
                    for out in stream.feed(rest):
                        kept = _client_event(exchange, out, rewrite)
                        if kept:
                            yield kept
            finally:
                await response.aclose()
            first = False
            answer = stream.answer()
            step = loop.step(answer)
            if step.again is None:
                account(exchange, loop, step)
                taken_out = step.answer is not answer
                for out in stream.release(loop.tool.name if taken_out else None):
                    kept = _client_event(exchange, out, rewrite)
                    if kept:
                        yield kept
                return
            response = await exchange.send(json_bytes(step.again))
            if not response.is_success or not is_event_stream(response):
                content = await exchange.read(response)
                account(exchange, loop, Step(answer))
                exchange.services.upstream.errors.labels(str(response.status_code)).inc()
                yield error_event(upstream_error_payload(response.status_code, content))
                return
            stream = loop.codec.stream(stream)
    except ProxyError as failed:  # no answer to a later round: the 200 is sent, so an event
        yield failed.event()
    except httpx2.TransportError as exc:
        interrupted(exchange.services.upstream, exc, exchange.context.route)
        yield error_event(
            error_payload(
                f"The upstream {exchange.context.route.host} broke off the stream: "
                f"{type(exc).__name__}.",
                type="upstream_error",
                code="stream_interrupted",
            )
        )


def _client_event(exchange: Exchange, event: bytes, rewrite: Any) -> bytes | None:
    """``event`` as the client is sent it: rewritten by its API's rewriter, or None for a usage
    chunk the client did not ask for."""
    chat = exchange.chat
    if chat.event_usage(event) is not None and not chat.keep_event(event):
        return None
    return event if rewrite is None else rewrite(event)
