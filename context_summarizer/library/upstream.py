"""Performing summary calls against the model, through the ``openai`` SDK, with one retry layer.

Retries are tenacity's alone: the SDK's own are turned off (``max_retries=0``) so the two never
multiply. Retried: 429 (waiting what ``Retry-After`` asks, within a cap), 5xx, timeouts and dropped
connections; bounded in attempts and in total time. Anything else, or the last failure, becomes a
``SummaryOutcome`` with ``error`` set, worded without any credential; so does an answer that is not
a readable chat completion (invalid, empty or truncated JSON, an HTML page, content that is not
text): a failed summary, which the engine falls back from like any other.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from typing import Any

import openai
from openai.types.chat import ChatCompletion
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
)

from ..core.results import SummarizeCall, SummaryOutcome

MAX_ATTEMPTS = 4
MAX_TOTAL_SECONDS = 120.0
MAX_RETRY_AFTER_SECONDS = 30.0


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed summary call is worth another attempt.

    A 5xx is, unless the server says it could not validate the request (llama-cpp-python's
    server answers 500 with pydantic's "validation error"): the same request fails the same way.
    """
    if isinstance(exc, (openai.APITimeoutError, openai.APIConnectionError)):
        return True
    if isinstance(exc, openai.RateLimitError):
        return True
    if not isinstance(exc, openai.APIStatusError) or exc.status_code < 500:
        return False
    return not _is_validation_error(exc)


_VALIDATION_PHRASES = ("validation error", "input should be", "field required")


def _is_validation_error(exc: openai.APIStatusError) -> bool:
    """Whether the error's message says the request itself did not validate."""
    body = exc.body
    error = body.get("error", body) if isinstance(body, Mapping) else body
    message = error.get("message") if isinstance(error, Mapping) else error
    text = f"{message if isinstance(message, str) else ''} {exc.message}".casefold()
    return any(phrase in text for phrase in _VALIDATION_PHRASES)


_CONTEXT_LENGTH_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTEXT_LENGTH_PHRASES = (
    "maximum context length",
    "context length",
    "context window",
    "prompt is too long",
    "exceed context limit",  # Anthropic: "input length and `max_tokens` exceed context limit"
    "too many tokens",
    "input is too long",
    "exceeds the maximum number of tokens",  # Gemini: "The input token count (N) exceeds ..."
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
    """Honour Retry-After (capped), else exponential backoff with jitter: ``0.5 * 2**(n-1)``
    seconds plus up to 1 s of jitter before retry ``n``, at most 8 s (tenacity's
    ``wait_exponential_jitter(multiplier=0.5, max=8.0)``, written out: its ``multiplier`` needs
    tenacity 9.2, and the ``google-genai`` SDK of the dev extra holds tenacity below 9.2)."""

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        asked = retry_after_seconds(exc)
        if asked is not None:
            return max(0.0, min(asked, MAX_RETRY_AFTER_SECONDS))
        backoff = 0.5 * 2.0 ** min(state.attempt_number - 1, 32) + random.uniform(0.0, 1.0)
        return max(0.0, min(backoff, 8.0))


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
    if isinstance(exc, (openai.APIConnectionError, OSError)):
        return "could not connect to upstream"
    if isinstance(exc, ValueError):
        return "upstream answered with a body that is not valid JSON"
    if isinstance(exc, RecursionError):
        return "upstream answered with JSON nested too deeply to read"
    return type(exc).__name__


def attempt_status(exc: BaseException) -> str:
    """The bounded label of a failed attempt: an HTTP status, ``"timeout"``, ``"unreachable"``
    or ``"invalid_response"``."""
    if isinstance(exc, openai.APIStatusError):
        return str(exc.status_code)
    if isinstance(exc, openai.APITimeoutError):
        return "timeout"
    if isinstance(exc, (openai.APIConnectionError, OSError)):
        return "unreachable"
    return "invalid_response"


_FAILURES = (openai.OpenAIError, OSError, ValueError, RecursionError)
"""What a summary call can fail with: the SDK's errors, a socket's, and ``ValueError`` for an
answer the SDK could not decode (``json.JSONDecodeError``), ``RecursionError`` for one nested
past the decoder's stack."""
_NOT_A_COMPLETION = "upstream answered with something that is not a chat completion"


def _tokens(value: Any) -> int | None:
    """A usage figure, or None unless it is a non-negative int (not a bool, a string...)."""
    return value if type(value) is int and value >= 0 else None


def _without_surrogates(value: Any) -> Any:
    """``value`` with lone surrogates in its strings replaced by U+FFFD (strict UTF-8 safe)."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, dict):
        return {key: _without_surrogates(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    return value


def _outcome(completion: Any, started: float) -> SummaryOutcome:
    latency = time.monotonic() - started
    choices = getattr(completion, "choices", None)
    if not isinstance(completion, ChatCompletion) or not isinstance(choices, list):
        # e.g. the SDK's ``str`` for a text/html answer, or JSON of another shape
        return SummaryOutcome(error=_NOT_A_COMPLETION, latency_s=latency)
    choice = choices[0] if choices else None
    message = getattr(choice, "message", None)
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        return SummaryOutcome(
            error="upstream answered a summary that is not text", latency_s=latency
        )
    finish_reason = getattr(choice, "finish_reason", None)
    usage = getattr(completion, "usage", None)
    details = getattr(usage, "prompt_tokens_details", None)
    return SummaryOutcome(
        # A model may write "\\ud800" in JSON; the summary is stored and sent as strict UTF-8.
        text=_without_surrogates(content),
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        prompt_tokens=_tokens(getattr(usage, "prompt_tokens", None)),
        cached_tokens=_tokens(getattr(details, "cached_tokens", None)),
        completion_tokens=_tokens(getattr(usage, "completion_tokens", None)),
        tool_called=bool(getattr(message, "tool_calls", None)),
        tool_calls=[call.model_dump() for call in getattr(message, "tool_calls", None) or ()],
        latency_s=latency,
    )


def _failed(exc: BaseException, failures: list[str], started: float) -> SummaryOutcome:
    return SummaryOutcome(
        error=describe_error(exc),
        failed_attempts=failures,
        latency_s=time.monotonic() - started,
    )


def _finished(outcome: SummaryOutcome, failures: list[str]) -> SummaryOutcome:
    if outcome.error is not None:
        failures.append("invalid_response")
    return outcome.model_copy(update={"failed_attempts": failures})


class OpenAISummaryClient:
    """Sends summary calls with a synchronous ``openai.OpenAI`` client."""

    def __init__(self, client: openai.OpenAI, **policy: Any) -> None:
        self._client = client.with_options(max_retries=0)
        self._policy = retry_policy(**policy)

    def _create(self, body: dict[str, Any]) -> Any:
        try:
            return self._client.chat.completions.create(**body)
        except UnicodeEncodeError:  # a lone surrogate: the SDK only writes strict UTF-8
            return self._client.chat.completions.create(**_without_surrogates(body))

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        """Perform ``call``; never raises for an upstream failure or an unreadable answer."""
        started = time.monotonic()
        failures: list[str] = []
        try:
            for attempt in Retrying(**self._policy):
                with attempt:
                    try:
                        completion = self._create(call.body)
                    except _FAILURES as exc:
                        failures.append(attempt_status(exc))
                        raise
        except _FAILURES as exc:
            return _failed(exc, failures, started)
        return _finished(_outcome(completion, started), failures)


class AsyncOpenAISummaryClient:
    """Sends summary calls with an ``openai.AsyncOpenAI`` client."""

    def __init__(self, client: openai.AsyncOpenAI, **policy: Any) -> None:
        self._client = client.with_options(max_retries=0)
        self._policy = retry_policy(**policy)

    async def _create(self, body: dict[str, Any]) -> Any:
        try:
            return await self._client.chat.completions.create(**body)
        except UnicodeEncodeError:  # a lone surrogate: the SDK only writes strict UTF-8
            return await self._client.chat.completions.create(**_without_surrogates(body))

    async def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        """Perform ``call``; never raises for an upstream failure or an unreadable answer."""
        started = time.monotonic()
        failures: list[str] = []
        try:
            async for attempt in AsyncRetrying(**self._policy):
                with attempt:
                    try:
                        completion = await self._create(call.body)
                    except _FAILURES as exc:
                        failures.append(attempt_status(exc))
                        raise
        except _FAILURES as exc:
            return _failed(exc, failures, started)
        return _finished(_outcome(completion, started), failures)
