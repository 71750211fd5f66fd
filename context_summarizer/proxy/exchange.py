"""``Exchange``: one managed request, any front door's: its context settled, then sent upstream
and its answer relayed.

Once located (``chat_context``), a request due for compaction is compacted under its session's
lock, then the (possibly rewritten) body goes upstream and the answer is relayed, its usage
observed. A ``context_length_exceeded`` answer gets one compaction with a tighter target and one
retry, never more. The CPU work of a large body (re-serializing) runs in a worker thread. An
upstream answer that is cut short or is not a JSON answer becomes an error in the client's API's
shape (a 502, or an SSE error event once a stream is open), never a 500 of ours or a silently
truncated stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar

import httpx2
from starlette.responses import Response, StreamingResponse

from ..core.recall_loop import RecallLoop
from ..core.results import Trigger
from ..library.overflow import OVERFLOW, aretry_on_overflow
from . import recall_exchange, sse
from .answers import (
    broken_off,
    interrupted,
    invalid_answer,
    is_context_length,
    is_event_stream,
    upstream_error_payload,
)
from .body import json_object
from .chat_context import ChatContext
from .errors import ProxyError, error_event, error_payload
from .exchange_services import ExchangeServices
from .headers import decoded_response_headers
from .managed_request import ManagedRequest, truth_comment
from .overhead import Overhead
from .recall_exchange import offered_body, recall_loop

logger = logging.getLogger("context_summarizer.proxy")

OFFLOAD_BYTES = 512 * 1024
"""Bodies larger than this are parsed and re-serialized in a worker thread. Below it the work
costs a few milliseconds at most (a 100k-token body is about 400 KB) and stays on the event
loop, where it does not pay a thread hand-off. Locating always runs in a worker thread: it may
wait on the store."""

_T = TypeVar("_T")


class Exchange:
    """One chat completion request: its context settled, then sent upstream and relayed."""

    def __init__(
        self, services: ExchangeServices, chat: ManagedRequest, *, overflowed: bool = False
    ) -> None:
        self.services = services
        self.chat = chat
        self.overflowed = overflowed
        """The upstream already refused this request as too long (sent by the lane): what is
        left is the one retry, compacted harder."""
        self.large = len(chat.raw) > OFFLOAD_BYTES
        self.overhead = Overhead(services.metrics, chat.stream)
        self.context = ChatContext(services, chat, self.overhead)
        self.loop: RecallLoop | None = None
        """The recall loop of what was last sent (``recall_exchange``; None: no tool)."""

    async def offloaded(self, work: Callable[[], _T]) -> _T:
        """``work()``, in a worker thread when the body is large."""
        return await asyncio.to_thread(work) if self.large else work()

    # -- upstream -----------------------------------------------------------------------------

    async def send(self, content: bytes | None = None) -> httpx2.Response:
        """Send the request upstream (its answer streamed); ``content``: a recall loop's next
        body, in place of the request's own (which is then offered the recall tool when its
        conversation has a compaction). ``ProxyError`` (a 502 or 504) when the upstream gives
        none."""
        upstream, route = self.services.upstream, self.context.route
        if content is None:
            content = await self.offloaded(self.context.outgoing)
            self.loop = recall_loop(self.context)
            if self.loop is not None:
                content = offered_body(self.loop, content)
        request = upstream.http.build_request(
            "POST",
            route.url(self.chat.upstream_path),
            content=content,
            headers=[
                *upstream.forward_headers(
                    self.chat.headers,
                    drop=("accept-encoding",),
                    key_header=self.chat.api.key_header,
                    route=route,
                ),
                ("accept-encoding", "identity"),
            ],
        )
        self.overhead.pause()
        try:
            return await upstream.http.send(request, stream=True)
        except httpx2.TransportError as exc:
            raise upstream.failure(exc, route) from exc
        finally:
            self.overhead.resume()

    async def read(self, response: httpx2.Response) -> bytes:
        """The whole body of an upstream response (not proxy time), then the connection back;
        ``ProxyError`` when the upstream breaks off mid-body."""
        self.overhead.pause()
        try:
            return await response.aread()
        except httpx2.TransportError as exc:
            raise broken_off(self.services.upstream, exc, self.context.route) from exc
        finally:
            await response.aclose()
            self.overhead.resume()

    async def _whole_answer(self, response: httpx2.Response) -> Response:
        """A success answer read whole: relayed (and its usage observed) if it is a JSON
        object, else a 502."""
        content = await self.read(response)
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
        observe (``ChatContext.observe``; the lane observes it once the answer is written).
        ``ProxyError`` (a 502) for an answer that is not a JSON object."""
        completion = json_object(content, exact=self.chat.rewrites_answers)
        if completion is None:
            raise invalid_answer(self.services.upstream, status, self.context.route)
        usage = self.chat.answer_usage(completion)
        if isinstance(usage, Mapping):
            usage = dict(usage)  # as reported, whatever rewriting the answer does to it
        if 200 <= status < 300 and self.chat.rewrite_answer(completion, self.context.result):
            content = json.dumps(completion).encode()
        headers = decoded_response_headers(upstream_headers)
        headers.update(self.context.headers())
        return Response(content, status_code=status, headers=headers), usage

    async def send_with_retry(self) -> tuple[httpx2.Response, bytes | None]:
        """Send; on ``context_length_exceeded`` compact harder and send once more (the one
        policy, ``retry_on_overflow``).

        Returns the streamed response (body unread if 2xx) and the body of a non-2xx upstream
        answer that was read to inspect it; ``ProxyError`` when there is no answer to relay.
        """

        async def attempt(force: Trigger | None) -> tuple[httpx2.Response, bytes | None]:
            if force is not None:
                logger.info("upstream says context length exceeded; compacting and retrying")
                await self.context.compact(force=force)
            response = await self.send()
            if response.is_success:
                return response, None
            content = await self.read(response)
            self.services.upstream.errors.labels(str(response.status_code)).inc()
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
        try:
            response, content = await self.send_with_retry()
            if content is None and self.loop is not None:
                return await recall_exchange.whole_answer(self, self.loop, response)
            if content is None:
                return await self._whole_answer(response)
            headers = decoded_response_headers(response.headers.items())
            headers.update(self.context.headers())
            return Response(content, status_code=response.status_code, headers=headers)
        finally:
            self.overhead.finish()

    async def respond_stream(self) -> Response:
        """The whole streaming exchange, once any compaction is done."""
        try:
            response, content = await self.send_with_retry()
            if content is not None:  # an upstream error, passed through as is
                headers = decoded_response_headers(response.headers.items())
                return Response(content, status_code=response.status_code, headers=headers)
            if not is_event_stream(response):  # an upstream that ignored "stream", or garbage
                return await self._whole_answer(response)
            headers = decoded_response_headers(response.headers.items())
            headers.update(self.context.headers())
        finally:
            self.overhead.finish()
        return StreamingResponse(
            self.relay_answer(response), status_code=response.status_code, headers=headers
        )

    def relay_answer(self, response: httpx2.Response) -> AsyncIterator[bytes]:
        """The events of a streamed success answer, through the recall loop when the tool
        was offered (``recall_exchange.relay``)."""
        if self.loop is not None:
            return recall_exchange.relay(self, self.loop, response)
        return self.relay(response.aiter_bytes(), response.aclose)

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
            interrupted(self.services.upstream, exc, self.context.route)
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

    async def relay_after_compaction(self, task: asyncio.Task[None]) -> AsyncIterator[bytes]:
        """A stream begun before its compaction ended: keepalives, then the upstream's events;
        once the 200 is sent, any failure is an error event (the SDKs raise on it)."""
        interval = self.services.keepalive_interval
        while not task.done():
            yield self.chat.comment_event(sse.comment("summarizer: compacting the conversation"))
            await asyncio.wait({task}, timeout=interval)
        try:
            task.result()
        except ProxyError as failed:
            yield failed.event()
            return
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
        yield self.chat.comment_event(truth_comment(self.context.result))
        try:
            response, content = await self.send_with_retry()
            whole = None
            if content is None and not is_event_stream(response):
                whole = await self._whole_answer(response)
        except ProxyError as failed:
            yield failed.event()
            return
        finally:
            self.overhead.finish()
        if whole is not None:  # a whole JSON answer to a stream request: its body as one event
            payload = json.loads(bytes(whole.body))
            yield error_event(payload) if whole.status_code >= 400 else sse.data_event(payload)
            return
        if content is not None:
            yield error_event(upstream_error_payload(response.status_code, content))
            return
        async for piece in self.relay_answer(response):
            yield piece


class _Overflowed(Exception):
    """The upstream answered ``context_length_exceeded`` (its answer, already read)."""

    def __init__(self, response: httpx2.Response, content: bytes) -> None:
        super().__init__("context length exceeded")
        self.response = response
        self.content = content
