"""``POST /v1/chat/completions``: compact when needed, forward, relay.

The request path: read the body (bounded), parse it, locate it against the session's
checkpoints (fast path: no compaction due), else compact under the session's lock, send the
(possibly rewritten) body upstream, relay the answer. A ``context_length_exceeded`` answer gets
one compaction with a tighter target and one retry, never more.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..errors import (
    BudgetExceeded,
    ConfigurationError,
    InvalidConversation,
    SummarizerError,
    TokenizerUnavailable,
)
from ..results import PrepareResult, Trigger
from ..upstream import says_context_length_exceeded
from . import sse
from .body import outgoing_body, parse_body, wants_usage
from .errors import error_payload, error_response
from .headers import (
    SESSION_HEADER,
    credential,
    credential_namespace,
    invalid_session_header,
    response_headers,
)
from .state import ProxyState

logger = logging.getLogger("summarizer.proxy")

_CHAT_PATH = "/chat/completions"
_MAX_WARNED_MODELS = 1000  # model names come from clients: bound what is remembered


class BodyTooLarge(Exception):
    """The request body is over ``max_body_bytes``."""


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (``BodyTooLarge``) as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


@dataclass
class ChatRequest:
    """A parsed, checked chat completion request and who sent it."""

    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    namespace: str
    session: str | None
    headers: Any

    def args(self) -> dict[str, Any]:
        """Keyword arguments for ``ContextManager.unchanged`` / ``aprepare``."""
        tools = self.body.get("tools")
        return {
            "model": self.model,
            "tools": tools if isinstance(tools, list) else None,
            "session": self.session,
            "request": self.body,
            "namespace": self.namespace,
        }


def parse_chat_request(raw: bytes, headers: Any) -> ChatRequest | Response:
    """The request, or the 400 response saying what is wrong with it."""
    try:
        body = parse_body(raw)
    except ValueError:
        return error_response(
            400,
            "We could not parse the JSON body of your request. The body must be valid JSON.",
            code="invalid_json",
        )
    if not isinstance(body, dict):
        return error_response(400, "The request body must be a JSON object.", code="invalid_type")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return error_response(
            400, "'model' is required and must be a string.", param="model", code="invalid_type"
        )
    messages = body.get("messages")
    if not isinstance(messages, list):
        return error_response(
            400,
            "'messages' is required and must be an array.",
            param="messages",
            code="invalid_type",
        )
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return error_response(400, "'tools' must be an array.", param="tools", code="invalid_type")
    if (bad_session := invalid_session_header(headers)) is not None:
        return bad_session
    return ChatRequest(
        raw=raw,
        body=body,
        model=model,
        stream=body.get("stream") is True,
        namespace=credential_namespace(credential(headers)),
        session=headers.get(SESSION_HEADER) or None,
        headers=headers,
    )


def _summarizer_headers(result: PrepareResult | None) -> dict[str, str]:
    if result is None:
        return {
            "x-summarizer-compacted": "false",
            "x-summarizer-prompt-tokens": "",
            "x-summarizer-checkpoint": "",
        }
    return {
        "x-summarizer-compacted": "true" if result.compacted else "false",
        "x-summarizer-prompt-tokens": str(result.report.estimated_tokens),
        "x-summarizer-checkpoint": result.checkpoint_id or "",
        "x-summarizer-session": result.session,
    }


class ChatHandler:
    """Handles one chat completion request against the proxy's shared state."""

    def __init__(self, state: ProxyState, chat: ChatRequest) -> None:
        self.state = state
        self.chat = chat
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
                summarizer=self.state.summarizer_for(self.chat.headers),
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
        out = _summarizer_headers(self.result)
        if self.warning:
            out["x-summarizer-warning"] = self.warning
        return out

    def observe(self, usage: Any) -> None:
        """Calibrate with the provider's reported usage."""
        if self.result is not None and isinstance(usage, Mapping):
            self.state.context.observe(self.result, usage, model=self.chat.model)

    # -- upstream -----------------------------------------------------------------------------

    async def send(self) -> httpx2.Response | Response:
        """Send the request upstream (streamed response), or a 502/504 error response."""
        state = self.state
        request = state.http.build_request(
            "POST",
            state.upstream_url(_CHAT_PATH),
            content=self.outgoing(),
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

    async def _read(self, response: httpx2.Response) -> bytes:
        """The whole body of an upstream response (not proxy time), then the connection back."""
        self._pause()
        try:
            return await response.aread()
        finally:
            await response.aclose()
            self._resume()

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
            self.state.metrics.upstream_errors.labels(str(response.status_code)).inc()
            if (
                attempt == 1
                and self.result is not None
                and _is_context_length(response.status_code, content)
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
            content = await self._read(response)
            if response.is_success:
                self.observe(_usage_of_completion(content))
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
        if self.result is not None:
            yield sse.comment(
                f"summarizer: compacted=true checkpoint={self.result.checkpoint_id or ''} "
                f"prompt_tokens={self.result.report.estimated_tokens}"
            )
        response, content = await self.send_with_retry()
        if not isinstance(response, httpx2.Response):
            self._finish()
            yield sse.data_event(json.loads(bytes(response.body)))
            return
        self._finish()
        if content is not None:
            yield sse.data_event(_error_of(response.status_code, content))
            return
        async for piece in self.relay(response):
            yield piece


def _is_context_length(status: int, content: bytes) -> bool:
    try:
        body = json.loads(content)
    except ValueError:
        return False
    return says_context_length_exceeded(status, body)


def _usage_of_completion(content: bytes) -> Any:
    try:
        data = json.loads(content)
    except ValueError:
        return None
    return data.get("usage") if isinstance(data, dict) else None


def _error_of(status: int, content: bytes) -> dict[str, Any]:
    """An upstream error as an SSE ``data`` payload (the openai SDK raises on ``error``)."""
    try:
        data = json.loads(content)
    except ValueError:
        data = None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return data
    return error_payload(
        f"The upstream answered HTTP {status}.", type="upstream_error", code=str(status)
    )


async def chat_completions(request: Request) -> Response:
    """The ``POST /v1/chat/completions`` endpoint."""
    state: ProxyState = request.app.state.proxy
    try:
        raw = await read_body(request, state.settings.max_body_bytes)
    except BodyTooLarge:
        return error_response(
            413,
            f"The request body is larger than {state.settings.max_body_bytes} bytes.",
            code="request_too_large",
        )
    parsed = parse_chat_request(raw, request.headers)
    if isinstance(parsed, Response):
        return parsed
    handler = ChatHandler(state, parsed)
    quick = handler.quick()
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
                headers = {
                    "x-summarizer-compacted": "true",
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
