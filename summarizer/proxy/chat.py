"""``POST /v1/chat/completions``: compact when needed, forward, relay.

The request path: read the body (bounded in size and time), parse it, locate it against the
session's checkpoints (fast path: no compaction due), else compact under the session's lock, send
the (possibly rewritten) body upstream, relay the answer. A ``context_length_exceeded`` answer gets
one compaction with a tighter target and one retry, never more.

The CPU work of a large body (parsing, re-serializing) and all locating (hashing, counting, the
store) run in worker threads, so neither one huge request nor a slow store stalls the event loop
that serves every other session. An upstream
answer that is cut short or is not a chat completion becomes an OpenAI-style error (a 502, or an
SSE error event once a stream is open), never a 500 of ours or a silently truncated stream.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import httpx2
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..core.results import Trigger
from ..library.overflow import OVERFLOW, aretry_on_overflow
from . import sse
from .activity import note_after
from .answers import (
    broken_off,
    interrupted,
    invalid_answer,
    is_context_length,
    is_event_stream,
    upstream_error_payload,
)
from .body import json_object
from .chat_context import ChatContext, Overhead
from .chat_request import ChatRequest, ManagedRequest, parse_chat_request, truth_comment
from .errors import error_event, error_payload
from .fast_path import FastPath
from .headers import decoded_response_headers
from .intake import BodyTimeout, BodyTooLarge, ClientGone, read_body, unread_body_response
from .state import ProxyState

logger = logging.getLogger("summarizer.proxy")

OFFLOAD_BYTES = 512 * 1024
"""Bodies larger than this are parsed and re-serialized in a worker thread. Below it the work
costs a few milliseconds at most (a 100k-token body is about 400 KB) and stays on the event
loop, where it does not pay a thread hand-off. Locating always runs in a worker thread: it may
wait on the store."""

_T = TypeVar("_T")


class ChatExchange:
    """One chat completion request: its context settled, then sent upstream and relayed."""

    def __init__(
        self, state: ProxyState, chat: ManagedRequest, *, overflowed: bool = False
    ) -> None:
        self.state = state
        self.chat = chat
        self.overflowed = overflowed
        """The upstream already refused this request as too long (sent by the lane): what is
        left is the one retry, compacted harder."""
        self.large = len(chat.raw) > OFFLOAD_BYTES
        self.overhead = Overhead(state, chat.stream)
        self.context = ChatContext(state, chat, self.overhead)

    async def offloaded(self, work: Callable[[], _T]) -> _T:
        """``work()``, in a worker thread when the body is large."""
        return await asyncio.to_thread(work) if self.large else work()

    # -- upstream -----------------------------------------------------------------------------

    async def send(self) -> httpx2.Response | Response:
        """Send the request upstream (streamed response), or a 502/504 error response."""
        state, route = self.state, self.context.route
        request = state.http.build_request(
            "POST",
            route.url(self.chat.upstream_path),
            content=await self.offloaded(self.context.outgoing),
            headers=[
                *state.forward_headers(
                    self.chat.headers, drop=("accept-encoding",), api=self.chat.api, route=route
                ),
                ("accept-encoding", "identity"),
            ],
        )
        self.overhead.pause()
        try:
            return await state.http.send(request, stream=True)
        except httpx2.TransportError as exc:
            return state.upstream_failure(exc, route)
        finally:
            self.overhead.resume()

    async def _read(self, response: httpx2.Response) -> bytes | Response:
        """The whole body of an upstream response (not proxy time), then the connection back;
        an error response when the upstream breaks off mid-body."""
        self.overhead.pause()
        try:
            return await response.aread()
        except httpx2.TransportError as exc:
            return broken_off(self.state, exc, self.context.route)
        finally:
            await response.aclose()
            self.overhead.resume()

    async def _whole_answer(self, response: httpx2.Response) -> Response:
        """A success answer read whole: relayed (and its usage observed) if it is a JSON
        object, else a 502."""
        content = await self._read(response)
        if isinstance(content, Response):
            return content
        return await self.answer(response.status_code, response.headers.items(), content)

    async def answer(
        self, status: int, upstream_headers: Iterable[tuple[str, str]], content: bytes
    ) -> Response:
        """The answer to relay for a whole upstream answer (its usage observed) when it is a
        JSON object, else a 502."""
        response, usage = self.answered(status, upstream_headers, content)
        await self.context.observe(usage)
        return response

    def answered(
        self, status: int, upstream_headers: Iterable[tuple[str, str]], content: bytes
    ) -> tuple[Response, Any]:
        """``answer`` without observing its usage: the answer to relay, and the usage to
        observe (``ChatContext.observe``; the lane observes it once the answer is written)."""
        completion = json_object(content, exact=self.chat.rewrites_answers)
        if completion is None:
            return invalid_answer(self.state, status, self.context.route), None
        usage = self.chat.answer_usage(completion)
        if isinstance(usage, Mapping):
            usage = dict(usage)  # as reported, whatever rewriting the answer does to it
        if 200 <= status < 300 and self.chat.rewrite_answer(completion, self.context.result):
            content = json.dumps(completion).encode()
        headers = decoded_response_headers(upstream_headers)
        headers.update(self.context.headers())
        return Response(content, status_code=status, headers=headers), usage

    async def send_with_retry(self) -> tuple[httpx2.Response | Response, bytes | None]:
        """Send; on ``context_length_exceeded`` compact harder and send once more (the one
        policy, ``retry_on_overflow``).

        Returns the streamed response (body unread if 2xx) or an error response, and the body
        of a non-2xx upstream answer that was read to inspect it.
        """

        async def attempt(force: Trigger | None) -> tuple[httpx2.Response | Response, bytes | None]:
            if force is not None:
                logger.info("upstream says context length exceeded; compacting and retrying")
                failed = await self.context.compact(force=force)
                if failed is not None:
                    return failed, None
            response = await self.send()
            if not isinstance(response, httpx2.Response) or response.is_success:
                return response, None
            content = await self._read(response)
            if isinstance(content, Response):
                return content, None
            self.state.metrics.upstream_errors.labels(str(response.status_code)).inc()
            if self.context.result is not None and is_context_length(response.status_code, content):
                raise _Overflowed(response, content)
            return response, content

        try:
            if self.overflowed:
                return await attempt(OVERFLOW)
            return await aretry_on_overflow(attempt, lambda exc: isinstance(exc, _Overflowed))
        except _Overflowed as twice:  # refused again after the retry: passed through
            return twice.response, twice.content

    # -- answering ----------------------------------------------------------------------------

    async def respond(self) -> Response:
        """The whole non-streaming exchange."""
        response, content = await self.send_with_retry()
        if not isinstance(response, httpx2.Response):
            self.overhead.finish()
            return response
        if content is None:
            answer = await self._whole_answer(response)
            self.overhead.finish()
            return answer
        headers = decoded_response_headers(response.headers.items())
        headers.update(self.context.headers())
        self.overhead.finish()
        return Response(content, status_code=response.status_code, headers=headers)

    async def respond_stream(self) -> Response:
        """The whole streaming exchange, once any compaction is done."""
        response, content = await self.send_with_retry()
        if not isinstance(response, httpx2.Response):
            self.overhead.finish()
            return response
        if content is not None:  # an upstream error, passed through as is
            headers = decoded_response_headers(response.headers.items())
            self.overhead.finish()
            return Response(content, status_code=response.status_code, headers=headers)
        if not is_event_stream(response):  # an upstream that ignored "stream", or garbage
            answer = await self._whole_answer(response)
            self.overhead.finish()
            return answer
        headers = decoded_response_headers(response.headers.items())
        headers.update(self.context.headers())
        self.overhead.finish()
        return StreamingResponse(
            self.relay(response.aiter_bytes(), response.aclose),
            status_code=response.status_code,
            headers=headers,
        )

    async def relay(
        self,
        chunks: AsyncIterator[bytes],
        close: Callable[[], Awaitable[None]],
        usages: list[Any] | None = None,
    ) -> AsyncIterator[bytes]:
        """The upstream's events (its body's ``chunks``) as they arrive, minus a usage chunk the
        client did not want; ``close`` releases the upstream answer at the end. The usage an
        event reports is observed at once, or added to ``usages`` for the caller to observe
        once the stream is written."""
        splitter = sse.EventSplitter()
        rewrite = self.chat.event_rewriter(self.context.result)
        try:
            async for chunk in chunks:
                out = []
                for event in splitter.feed(chunk):
                    usage = self.chat.event_usage(event)
                    if usage is not None:
                        if usages is None:
                            await self.context.observe(usage)
                        else:
                            usages.append(usage)
                        if not self.chat.keep_event(event):
                            continue
                    out.append(event if rewrite is None else rewrite(event))
                if out:
                    yield b"".join(out)
            rest = splitter.rest()
            if rest:
                yield rest
        except httpx2.TransportError as exc:
            # The 200 is already sent: end with an error event (the SDKs raise on it); the
            # unfinished event the upstream was sending, if any, is dropped.
            interrupted(self.state, exc, self.context.route)
            yield error_event(
                error_payload(
                    f"The upstream {self.context.route.host} broke off the stream: "
                    f"{type(exc).__name__}.",
                    type="upstream_error",
                    code="stream_interrupted",
                )
            )
        finally:
            await close()

    async def relay_after_compaction(
        self, task: asyncio.Task[Response | None]
    ) -> AsyncIterator[bytes]:
        """A stream begun before its compaction ended: keepalives, then the upstream's events."""
        interval = self.state.settings.keepalive_interval
        while not task.done():
            yield self.chat.comment_event(sse.comment("summarizer: compacting the conversation"))
            await asyncio.wait({task}, timeout=interval)
        try:
            failed = task.result()
        except Exception:
            # The 200 is already sent: the failure becomes an error event the SDKs raise on.
            logger.exception("compaction failed while a stream was held open")
            yield error_event(
                error_payload(
                    "The summarizer proxy failed to handle this request.",
                    type="server_error",
                    code="internal_error",
                )
            )
            return
        if failed is not None:
            yield error_event(json.loads(bytes(failed.body)))
            return
        yield self.chat.comment_event(truth_comment(self.context.result))
        response, content = await self.send_with_retry()
        if (
            isinstance(response, httpx2.Response)
            and content is None
            and not is_event_stream(response)
        ):
            response = await self._whole_answer(response)
        self.overhead.finish()
        if not isinstance(response, httpx2.Response):
            # An error, or a whole JSON answer to a stream request: its body as the one event.
            payload = json.loads(bytes(response.body))
            yield error_event(payload) if response.status_code >= 400 else sse.data_event(payload)
            return
        if content is not None:
            yield error_event(upstream_error_payload(response.status_code, content))
            return
        async for piece in self.relay(response.aiter_bytes(), response.aclose):
            yield piece


class _Overflowed(Exception):
    """The upstream answered ``context_length_exceeded`` (its answer, already read)."""

    def __init__(self, response: httpx2.Response, content: bytes) -> None:
        super().__init__("context length exceeded")
        self.response = response
        self.content = content


HANDED_OVER = "summarizer.handed_over"
"""Where, in the ASGI ``state`` of a request the lane (``proxy.lane``) hands over to this path,
it leaves what its fast path made of the body: the request, or None (parse it whole)."""

OVERFLOWED = "summarizer.overflowed"
"""Set there (True) when the lane's send of it was refused as too long."""

Parse = Callable[[bytes, Any], ManagedRequest | Response]
"""Parses and checks a request body (with its headers): the request, or the 4xx answer."""


async def chat_completions(request: Request) -> Response:
    """The ``POST /v1/chat/completions`` endpoint."""
    return await serve_managed(request, parse_chat_request)


async def serve_managed(request: Request, parse: Parse) -> Response:
    """A context-managed endpoint: read, ``parse``, locate, compact if due, send, relay."""
    state: ProxyState = request.app.state.proxy
    settings = state.settings
    started = time.time()
    try:
        raw = await read_body(request, settings.max_body_bytes, settings.body_read_timeout)
    except (BodyTooLarge, BodyTimeout, ClientGone) as exc:
        return unread_body_response(
            request, exc, limit=settings.max_body_bytes, timeout=settings.body_read_timeout
        )
    fast = state.fast_path if parse is parse_chat_request else None
    parsed: ManagedRequest | Response | None = None
    handed = request.scope.get("state") or {}
    if HANDED_OVER in handed:  # the lane tried this body already
        parsed = handed[HANDED_OVER]
    elif fast is not None:
        parsed = fast.parse(raw, request.headers)
    if parsed is None:
        work = functools.partial(_parse_whole, parse, fast, raw, request.headers)
        parsed = await asyncio.to_thread(work) if len(raw) > OFFLOAD_BYTES else work()
    if isinstance(parsed, Response):
        return parsed
    exchange = ChatExchange(state, parsed, overflowed=handed.get(OVERFLOWED, False))
    response = await _exchange(state, exchange)
    return note_after(response, state, exchange.context, started)


def _parse_whole(
    parse: Parse, fast: FastPath | None, raw: bytes, headers: Any
) -> ManagedRequest | Response:
    """``parse(raw, headers)``; a chat request is then remembered for the fast path."""
    parsed = parse(raw, headers)
    if fast is not None and isinstance(parsed, ChatRequest):
        fast.learn(parsed)
    return parsed


async def _exchange(state: ProxyState, exchange: ChatExchange) -> Response:
    """Locate, compact if due, send, relay: the answer to a parsed request."""
    parsed = exchange.chat
    context = exchange.context
    invalid = await context.locate()
    if invalid is not None:
        return invalid
    if context.due:
        if not parsed.stream:
            failed = await context.compact()
            if failed is not None:
                return failed
        else:
            task = asyncio.ensure_future(context.compact())
            done, _ = await asyncio.wait({task}, timeout=state.settings.keepalive_interval)
            if not done:
                # Not known yet: the SSE comment after the keepalives says what happened.
                headers = {
                    "x-summarizer-compacted": "pending",
                    "x-summarizer-prompt-tokens": "",
                    "x-summarizer-checkpoint": "",
                    "cache-control": "no-cache",
                }
                return StreamingResponse(
                    exchange.relay_after_compaction(task),
                    media_type="text/event-stream",
                    headers=headers,
                )
            failed = task.result()
            if failed is not None:
                return failed
    return await (exchange.respond_stream() if parsed.stream else exchange.respond())
