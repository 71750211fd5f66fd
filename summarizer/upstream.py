"""Performing summary calls against the model, through the ``openai`` SDK, with one retry layer.

Retries are tenacity's alone: the SDK's own are turned off (``max_retries=0``) so the two never
multiply. Retried: 429 (waiting what ``Retry-After`` asks, within a cap), 5xx, timeouts and dropped
connections; bounded in attempts and in total time. Anything else, or the last failure, becomes a
``SummaryOutcome`` with ``error`` set, worded without any credential.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import openai
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)

from .results import SummarizeCall, SummaryOutcome

MAX_ATTEMPTS = 4
MAX_TOTAL_SECONDS = 120.0
MAX_RETRY_AFTER_SECONDS = 30.0


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed summary call is worth another attempt."""
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    if isinstance(exc, openai.RateLimitError):
        return True
    return isinstance(exc, openai.APIStatusError) and exc.status_code >= 500


_CONTEXT_LENGTH_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTEXT_LENGTH_PHRASES = (
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
)


def says_context_length_exceeded(status: int, body: Any) -> bool:
    """Whether an upstream error (status and decoded JSON body) says the prompt is too long.

    Matches OpenAI's ``code`` and, for providers that use another code, the message text.
    """
    if status not in (400, 413, 422):
        return False
    error = body.get("error", body) if isinstance(body, Mapping) else {}
    if not isinstance(error, Mapping):
        error = {"message": error}
    if error.get("code") in _CONTEXT_LENGTH_CODES:
        return True
    text = str(error.get("message", "")).lower()
    return any(phrase in text for phrase in _CONTEXT_LENGTH_PHRASES)


def retry_after_seconds(exc: BaseException | None) -> float | None:
    """The delay a 429/503 response asks for (``retry-after-ms`` or ``Retry-After``), if any."""
    response = getattr(exc, "response", None)
    headers: Mapping[str, str] = getattr(response, "headers", None) or {}
    try:
        if "retry-after-ms" in headers:
            return float(headers["retry-after-ms"]) / 1000.0
        if "retry-after" in headers:
            return float(headers["retry-after"])
    except (TypeError, ValueError):
        return None
    return None


class _Wait:
    """Honour Retry-After (capped), else exponential backoff with jitter."""

    def __init__(self) -> None:
        self._backoff = wait_exponential_jitter(multiplier=0.5, max=8.0)

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc)
        if asked is not None:
            return max(0.0, min(asked, MAX_RETRY_AFTER_SECONDS))
        return float(self._backoff(state))


def retry_policy(
    *, attempts: int = MAX_ATTEMPTS, total_seconds: float = MAX_TOTAL_SECONDS
) -> dict[str, Any]:
    """The tenacity arguments shared by the sync and async callers."""
    return {
        "stop": stop_after_attempt(attempts) | stop_after_delay(total_seconds),
        "wait": _Wait(),
        "retry": retry_if_exception(is_retryable),
        "reraise": True,
    }


def describe_error(exc: BaseException) -> str:
    """A short, credential-free description of a failed call."""
    if isinstance(exc, openai.APIStatusError):
        code = None
        body = exc.body
        if isinstance(body, Mapping):
            error = body.get("error", body)
            if isinstance(error, Mapping):
                code = error.get("code") or error.get("type")
        return f"upstream returned HTTP {exc.status_code}" + (f" ({code})" if code else "")
    if isinstance(exc, openai.APITimeoutError):
        return "upstream timed out"
    if isinstance(exc, openai.APIConnectionError):
        return "could not connect to upstream"
    return type(exc).__name__


def _outcome(completion: Any, started: float) -> SummaryOutcome:
    choice = completion.choices[0] if completion.choices else None
    usage = getattr(completion, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return SummaryOutcome(
        text=choice.message.content if choice is not None else None,
        finish_reason=choice.finish_reason if choice is not None else None,
        prompt_tokens=getattr(usage, "prompt_tokens", None),
        cached_tokens=getattr(details, "cached_tokens", None),
        completion_tokens=getattr(usage, "completion_tokens", None),
        latency_s=time.monotonic() - started,
    )


class OpenAISummaryClient:
    """Sends summary calls with a synchronous ``openai.OpenAI`` client."""

    def __init__(self, client: openai.OpenAI, **policy: Any) -> None:
        self._client = client.with_options(max_retries=0)
        self._policy = retry_policy(**policy)

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        """Perform ``call``; never raises for an upstream failure."""
        started = time.monotonic()
        try:
            for attempt in Retrying(**self._policy):
                with attempt:
                    completion = self._client.chat.completions.create(**call.body)
        except (openai.OpenAIError, OSError) as exc:
            return SummaryOutcome(error=describe_error(exc), latency_s=time.monotonic() - started)
        return _outcome(completion, started)


class AsyncOpenAISummaryClient:
    """Sends summary calls with an ``openai.AsyncOpenAI`` client."""

    def __init__(self, client: openai.AsyncOpenAI, **policy: Any) -> None:
        self._client = client.with_options(max_retries=0)
        self._policy = retry_policy(**policy)

    async def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        """Perform ``call``; never raises for an upstream failure."""
        started = time.monotonic()
        try:
            async for attempt in AsyncRetrying(**self._policy):
                with attempt:
                    completion = await self._client.chat.completions.create(**call.body)
        except (openai.OpenAIError, OSError) as exc:
            return SummaryOutcome(error=describe_error(exc), latency_s=time.monotonic() - started)
        return _outcome(completion, started)
