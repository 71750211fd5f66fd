"""Summary calls for a Messages conversation, sent as a Messages request to the upstream.

The engine asks for a summary as a Chat Completions body: its view of the conversation plus one
user instruction. Here that becomes the client's own Messages request (same model, system, tools,
thinking settings, and the conversation's kept messages as the client's own objects, with the same
managed breakpoints) plus one user text block, with ``tool_choice: {"type": "none"}``: the prefix
the provider cached for the previous request serves this one too.

Retries follow the chat summary client's policy (``library.upstream.retry_policy``'s limits):
429, 529 and other 5xx, timeouts and dropped connections, honouring ``retry-after``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx2
from tenacity import AsyncRetrying, retry_if_exception

from ..core.results import SummarizeCall, SummaryOutcome
from ..library.upstream import retry_policy

if TYPE_CHECKING:
    from .messages_request import MessagesRequest
    from .state import ProxyState

_NOT_COPIED = frozenset(
    {"messages", "stream", "max_tokens", "tool_choice", "stop_sequences", "metadata"}
)
"""Client fields a summary request does not reuse: it has its own conversation end and cap."""
_NOT_FOR_SUMMARY = ("content-type", "accept", "accept-encoding", "content-length")
_STOP_REASONS = {"max_tokens": "length", "end_turn": "stop", "stop_sequence": "stop"}


class _Refused(Exception):
    """The upstream answered the summary request with an error status."""

    def __init__(self, response: httpx2.Response) -> None:
        super().__init__(f"upstream returned HTTP {response.status_code}")
        self.response = response
        self.status_code = response.status_code


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, httpx2.TransportError):
        return True
    return isinstance(exc, _Refused) and (exc.status_code == 429 or exc.status_code >= 500)


class MessagesSummaryClient:
    """Performs ``SummarizeCall``s for one Messages request against the upstream."""

    def __init__(self, state: ProxyState, request: MessagesRequest) -> None:
        self._state = state
        self._request = request
        self._policy = {**retry_policy(), "retry": retry_if_exception(_retryable)}

    def wire_body(self, chat_body: Mapping[str, Any]) -> dict[str, Any]:
        """The Messages request for a summary call's Chat Completions body."""
        chat_messages = list(chat_body["messages"])
        instruction = chat_messages.pop()
        client = self._request.body
        body = {key: value for key, value in client.items() if key not in _NOT_COPIED}
        body.update(self._request.wire_fields(chat_messages))
        body["messages"] = [
            *body["messages"],
            {"role": "user", "content": [{"type": "text", "text": str(instruction["content"])}]},
        ]
        body["model"] = chat_body.get("model", client.get("model"))
        cap = next(
            (
                chat_body[key]
                for key in ("max_completion_tokens", "max_tokens")
                if isinstance(chat_body.get(key), int)
            ),
            1024,
        )
        thinking = client.get("thinking")
        if isinstance(thinking, Mapping) and isinstance(thinking.get("budget_tokens"), int):
            cap += thinking["budget_tokens"]  # max_tokens must exceed the thinking budget
        body["max_tokens"] = cap
        if client.get("tools"):
            body["tool_choice"] = {"type": "none"}
        return body

    async def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        """Perform ``call``; never raises for an upstream failure or an unreadable answer."""
        started = time.monotonic()
        failures: list[str] = []
        body = json.dumps(self.wire_body(call.body)).encode()
        state = self._state
        headers = [
            *state.forward_headers(self._request.headers, drop=_NOT_FOR_SUMMARY, api="anthropic"),
            ("content-type", "application/json"),
        ]
        url = state.upstream_url(self._request.upstream_path)
        try:
            async for attempt in AsyncRetrying(**self._policy):
                with attempt:
                    try:
                        response = await state.http.post(url, content=body, headers=headers)
                    except httpx2.TransportError as exc:
                        failures.append(
                            "timeout" if isinstance(exc, httpx2.TimeoutException) else "unreachable"
                        )
                        raise
                    if response.status_code >= 400:
                        failures.append(str(response.status_code))
                        raise _Refused(response)
        except _Refused as exc:
            return _failed(f"upstream returned HTTP {exc.status_code}", failures, started)
        except httpx2.TimeoutException:
            return _failed("upstream timed out", failures, started)
        except httpx2.TransportError:
            return _failed("could not connect to upstream", failures, started)
        outcome = _outcome(response.content, started)
        if outcome.error is not None:
            failures.append("invalid_response")
        return outcome.model_copy(update={"failed_attempts": failures})


def _failed(error: str, failures: list[str], started: float) -> SummaryOutcome:
    return SummaryOutcome(
        error=error, failed_attempts=failures, latency_s=time.monotonic() - started
    )


def _outcome(content: bytes, started: float) -> SummaryOutcome:
    latency = time.monotonic() - started
    try:
        message = json.loads(content)
    except ValueError:
        message = None
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return SummaryOutcome(
            error="upstream answered with something that is not a message", latency_s=latency
        )
    blocks = [b for b in message["content"] if isinstance(b, Mapping)]
    text = "".join(
        b["text"] for b in blocks if b.get("type") == "text" and isinstance(b.get("text"), str)
    )
    usage = message.get("usage") if isinstance(message.get("usage"), Mapping) else {}
    assert isinstance(usage, Mapping)
    read = _tokens(usage.get("cache_read_input_tokens"))
    parts = [
        _tokens(usage.get(key))
        for key in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    ]
    stop = message.get("stop_reason")
    return SummaryOutcome(
        text=text if blocks else None,
        finish_reason=_STOP_REASONS.get(stop, stop) if isinstance(stop, str) else None,
        prompt_tokens=sum(p or 0 for p in parts) if parts[0] is not None else None,
        cached_tokens=read,
        completion_tokens=_tokens(usage.get("output_tokens")),
        tool_called=any(b.get("type") == "tool_use" for b in blocks),
        latency_s=latency,
    )


def _tokens(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None
