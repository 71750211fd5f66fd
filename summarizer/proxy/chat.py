"""``POST /v1/chat/completions``: compact when needed, forward, relay.

The request path: read the body (bounded in size and time), parse it, locate it against the
session's checkpoints (fast path: no compaction due), else compact under the session's lock, send
the (possibly rewritten) body upstream, relay the answer. A ``context_length_exceeded`` answer gets
one compaction with a tighter target and one retry, never more.

The CPU work of a large body (parsing, hashing, counting, re-serializing) runs in a worker thread,
so one huge request never stalls the event loop that serves every other session. An upstream
answer that is cut short or is not a chat completion becomes an OpenAI-style error (a 502, or an
SSE error event once a stream is open), never a 500 of ours or a silently truncated stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

import httpx2
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..core.errors import (
    BudgetExceeded,
    ConfigurationError,
    InvalidConversation,
    SummarizerError,
    TokenizerUnavailable,
)
from ..core.results import PrepareResult, SummarizeCall, SummaryOutcome, Trigger
from . import sse
from .answers import (
    broken_off,
    error_event,
    interrupted,
    invalid_answer,
    is_context_length,
    is_event_stream,
    json_object,
    usable_usage,
)
from .body import outgoing_body, wants_usage
from .chat_request import ChatRequest, parse_chat_request, summarizer_headers, truth_comment
from .errors import error_payload, error_response
from .headers import response_headers
from .intake import BodyTimeout, BodyTooLarge, ClientGone, read_body, unread_body_response
from .state import ProxyState

logger = logging.getLogger("summarizer.proxy")

_CHAT_PATH = "/chat/completions"
_MAX_WARNED_MODELS = 1000  # model names come from clients: bound what is remembered

OFFLOAD_BYTES = 512 * 1024
"""Bodies larger than this are parsed, located and re-serialized in a worker thread. Below it
the work costs a few milliseconds at most (a 100k-token body is about 400 KB) and stays on the
event loop, where it does not pay a thread hand-off."""

_T = TypeVar("_T")


class ChatHandler:
    """Handles one chat completion request against the proxy's shared state."""

    def __init__(self, state: ProxyState, chat: ChatRequest) -> None:
        self.state = state
        self.chat = chat
        self.large = len(chat.raw) > OFFLOAD_BYTES
        self.result: PrepareResult | None = None
        self.warning: str | None = None
        self.overhead = 0.0
        self._mark = time.perf_counter()

    # -- timing: time spent in the proxy, outside upstream calls and compactions --------------

    def _pause(self) -> None:
        self.overhead += time.perf_counter() - self._mark

    def _resume(self) -> None:
        self._mark = time.perf_counter()

    def _finish(self) -> None:
        self._pause()
        self.state.metrics.overhead.labels("true" if self.chat.stream else "false").observe(
            self.overhead
        )

    # -- preparing ----------------------------------------------------------------------------

    def quick(self) -> PrepareResult | Response | None:
        """The no-compaction result, an error response, or None when a compaction is due."""
        try:
            result = self.state.context.unchanged(self.chat.body["messages"], **self.chat.args())
        except InvalidConversation as exc:
            return error_response(400, str(exc), param=exc.param, code="invalid_value")
        except (ConfigurationError, TokenizerUnavailable) as exc:
            self._unmanaged(exc)
            return None
        if result is not None:
            self.result = result
        return result

    def _unmanaged(self, exc: SummarizerError) -> None:
        """Forward without context management (e.g. a model whose window is unknown).

        Never silent: a warning header on the response, a metric, and a log line per model.
        """
        self.state.metrics.unmanaged.labels(type(exc).__name__).inc()
        warned = self.state.warned_models
        if self.chat.model not in warned and len(warned) < _MAX_WARNED_MODELS:
            warned.add(self.chat.model)
            logger.warning("forwarding %r requests unmanaged: %s", self.chat.model, exc)
        # Header values must be printable ASCII; the message may quote client input.
        text = " ".join(str(exc).split())[:300]
        self.warning = "".join(ch if " " <= ch <= "~" else "?" for ch in text)

    async def compact(self, force: Trigger | None = None) -> Response | None:
        """Compact (waiting for the session's lock); an error response if it cannot fit."""
        self._pause()
        try:
            self.result = await self.state.context.aprepare(
                self.chat.body["messages"],
                force=force,
                summarizer=self._counted(self.state.summarizer_for(self.chat.headers)),
                **self.chat.args(),
            )
        except BudgetExceeded as exc:
            return error_response(400, str(exc), param="messages", code="context_length_exceeded")
        except InvalidConversation as exc:
            return error_response(400, str(exc), param=exc.param, code="invalid_value")
        except (ConfigurationError, TokenizerUnavailable) as exc:
            self._unmanaged(exc)
        finally:
            self._resume()
        return None

    def _counted(self, perform: Callable[[SummarizeCall], Any]) -> Callable[[SummarizeCall], Any]:
        """``perform``, counting each failed attempt in ``summarizer_upstream_errors_total``."""
        errors = self.state.metrics.upstream_errors

        async def call(request: SummarizeCall) -> SummaryOutcome:
            outcome: SummaryOutcome = await perform(request)
            for status in outcome.failed_attempts:
                errors.labels(status, "summary").inc()
            return outcome

        return call

    async def offloaded(self, work: Callable[[], _T]) -> _T:
        """``work()``, in a worker thread when the body is large."""
        return await asyncio.to_thread(work) if self.large else work()

    def outgoing(self) -> bytes:
        """The body to send upstream for the current result."""
        result = self.result
        return outgoing_body(
            self.chat.raw,
            self.chat.body,
            messages=result.messages if result is not None and result.rewritten else None,
            stream=self.chat.stream,
        )

    def headers(self) -> dict[str, str]:
        """The ``x-summarizer-*`` response headers."""
        out = summarizer_headers(self.result)
        if self.warning:
            out["x-summarizer-warning"] = self.warning
        return out

    def observe(self, usage: Any) -> None:
        """Calibrate with the provider's reported usage (ignored, and said once per kind of
        value, when ``prompt_tokens`` is not a positive integer)."""
        if self.result is None or not isinstance(usage, Mapping):
            return
        if not usable_usage(self.state, usage):
            return
        self.state.context.observe(self.result, usage, model=self.chat.model)

    # -- upstream -----------------------------------------------------------------------------

    async def send(self) -> httpx2.Response | Response:
        """Send the request upstream (streamed response), or a 502/504 error response."""
        state = self.state
        request = state.http.build_request(
            "POST",
            state.upstream_url(_CHAT_PATH),
            content=await self.offloaded(self.outgoing),
            headers=[
                *state.forward_headers(self.chat.headers, drop=("accept-encoding",)),
                ("accept-encoding", "identity"),
            ],
        )
        self._pause()
        try:
            return await state.http.send(request, stream=True)
        except httpx2.TransportError as exc:
            return state.upstream_failure(exc)
        finally:
            self._resume()

    async def _read(self, response: httpx2.Response) -> bytes | Response:
        """The whole body of an upstream response (not proxy time), then the connection back;
        an error response when the upstream breaks off mid-body."""
        self._pause()
        try:
            return await response.aread()
        except httpx2.TransportError as exc:
            return broken_off(self.state, exc)
        finally:
            await response.aclose()
            self._resume()

    async def _whole_answer(self, response: httpx2.Response) -> Response:
        """A success answer read whole: relayed (and its usage observed) if it is a JSON
        object, else a 502."""
        content = await self._read(response)
        if isinstance(content, Response):
            return content
        completion = json_object(content)
        if completion is None:
            return invalid_answer(self.state, response.status_code)
        self.observe(completion.get("usage"))
        headers = {
            k: v for k, v in response_headers(response.headers.items()) if k != "content-encoding"
        }
        headers.update(self.headers())
        return Response(content, status_code=response.status_code, headers=headers)

    async def send_with_retry(self) -> tuple[httpx2.Response | Response, bytes | None]:
        """Send; on ``context_length_exceeded`` compact harder and send once more.

        Returns the streamed response (body unread if 2xx) or an error response, and the body
        of a non-2xx upstream answer that was read to inspect it.
        """
        for attempt in (1, 2):
            response = await self.send()
            if not isinstance(response, httpx2.Response) or response.is_success:
                return response, None
            content = await self._read(response)
            if isinstance(content, Response):
                return content, None
            self.state.metrics.upstream_errors.labels(str(response.status_code)).inc()
            if (
                attempt == 1
                and self.result is not None
                and is_context_length(response.status_code, content)
            ):
                logger.info("upstream says context length exceeded; compacting and retrying")
                failed = await self.compact(force="context_length_exceeded")
                if failed is not None:
                    return failed, None
                continue
            return response, content
        raise AssertionError("unreachable")

    # -- answering ----------------------------------------------------------------------------

    async def respond(self) -> Response:
        """The whole non-streaming exchange."""
        response, content = await self.send_with_retry()
        if not isinstance(response, httpx2.Response):
            self._finish()
            return response
        if content is None:
            answer = await self._whole_answer(response)
            self._finish()
            return answer
        headers = {
            k: v for k, v in response_headers(response.headers.items()) if k != "content-encoding"
        }
        headers.update(self.headers())
        self._finish()
        return Response(content, status_code=response.status_code, headers=headers)

    async def respond_stream(self) -> Response:
        """The whole streaming exchange, once any compaction is done."""
        response, content = await self.send_with_retry()
        if not isinstance(response, httpx2.Response):
            self._finish()
            return response
        if content is not None:  # an upstream error, passed through as is
            headers = dict(response_headers(response.headers.items()))
            headers.pop("content-encoding", None)
            self._finish()
            return Response(content, status_code=response.status_code, headers=headers)
        if not is_event_stream(response):  # an upstream that ignored "stream", or garbage
            answer = await self._whole_answer(response)
            self._finish()
            return answer
        headers = {
            k: v for k, v in response_headers(response.headers.items()) if k != "content-encoding"
        }
        headers.update(self.headers())
        self._finish()
        return StreamingResponse(
            self.relay(response), status_code=response.status_code, headers=headers
        )

    async def relay(self, response: httpx2.Response) -> AsyncIterator[bytes]:
        """The upstream's events as they arrive, minus a usage chunk the client did not want."""
        keep_usage = wants_usage(self.chat.body)
        splitter = sse.EventSplitter()
        try:
            async for chunk in response.aiter_bytes():
                out = []
                for event in splitter.feed(chunk):
                    usage = sse.usage_of(event)
                    if usage is not None:
                        self.observe(usage)
                        if not keep_usage and sse.is_usage_only(event):
                            continue
                    out.append(event)
                if out:
                    yield b"".join(out)
            rest = splitter.rest()
            if rest:
                yield rest
        except httpx2.TransportError as exc:
            # The 200 is already sent: end with an error event (the SDKs raise on it); the
            # unfinished event the upstream was sending, if any, is dropped.
            interrupted(self.state, exc)
            yield sse.data_event(
                error_payload(
                    f"The upstream {self.state.upstream_host} broke off the stream: "
                    f"{type(exc).__name__}.",
                    type="upstream_error",
                    code="stream_interrupted",
                )
            )
        finally:
            await response.aclose()

    async def relay_after_compaction(
        self, task: asyncio.Task[Response | None]
    ) -> AsyncIterator[bytes]:
        """A stream begun before its compaction ended: keepalives, then the upstream's events."""
        interval = self.state.settings.keepalive_interval
        while not task.done():
            yield sse.comment("summarizer: compacting the conversation")
            await asyncio.wait({task}, timeout=interval)
        try:
            failed = task.result()
        except Exception:
            # The 200 is already sent: the failure becomes an error event the SDKs raise on.
            logger.exception("compaction failed while a stream was held open")
            yield sse.data_event(
                error_payload(
                    "The summarizer proxy failed to handle this request.",
                    type="server_error",
                    code="internal_error",
                )
            )
            return
        if failed is not None:
            yield sse.data_event(json.loads(bytes(failed.body)))
            return
        yield truth_comment(self.result)
        response, content = await self.send_with_retry()
        if (
            isinstance(response, httpx2.Response)
            and content is None
            and not is_event_stream(response)
        ):
            response = await self._whole_answer(response)
        self._finish()
        if not isinstance(response, httpx2.Response):
            # An error, or a whole JSON answer to a stream request: its body as the one event.
            yield sse.data_event(json.loads(bytes(response.body)))
            return
        if content is not None:
            yield sse.data_event(error_event(response.status_code, content))
            return
        async for piece in self.relay(response):
            yield piece


async def chat_completions(request: Request) -> Response:
    """The ``POST /v1/chat/completions`` endpoint."""
    state: ProxyState = request.app.state.proxy
    settings = state.settings
    try:
        raw = await read_body(request, settings.max_body_bytes, settings.body_read_timeout)
    except (BodyTooLarge, BodyTimeout, ClientGone) as exc:
        return unread_body_response(
            request, exc, limit=settings.max_body_bytes, timeout=settings.body_read_timeout
        )
    if len(raw) > OFFLOAD_BYTES:
        parsed = await asyncio.to_thread(parse_chat_request, raw, request.headers)
    else:
        parsed = parse_chat_request(raw, request.headers)
    if isinstance(parsed, Response):
        return parsed
    handler = ChatHandler(state, parsed)
    quick = await handler.offloaded(handler.quick)
    if isinstance(quick, Response):
        return quick
    if quick is None and handler.warning is None:
        if not parsed.stream:
            failed = await handler.compact()
            if failed is not None:
                return failed
        else:
            task = asyncio.ensure_future(handler.compact())
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
                    handler.relay_after_compaction(task),
                    media_type="text/event-stream",
                    headers=headers,
                )
            failed = task.result()
            if failed is not None:
                return failed
    return await (handler.respond_stream() if parsed.stream else handler.respond())
