"""What the upstream answered a chat request, judged: an error that says the prompt is too long,
an answer cut short or not a chat completion (a 502, counted and logged once, never a 500), a
usage figure fit for calibration, and the usage counted in the token counters."""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from typing import Any

import httpx2

from ..library.upstream import says_context_length_exceeded
from .body import json_object
from .errors import ProxyError, error_payload
from .metrics import TokenCounts
from .model_routes import ModelRoute
from .upstream import Upstream

logger = logging.getLogger("context_summarizer.proxy")

_warned_usage: weakref.WeakKeyDictionary[Upstream, set[str]] = weakref.WeakKeyDictionary()


def usable_usage(upstream: Upstream, usage: Mapping[str, Any]) -> bool:
    """Whether ``usage.prompt_tokens`` is a positive integer; if not, say so once per kind of
    value (a misbehaving upstream would otherwise log on every request)."""
    tokens = usage.get("prompt_tokens")
    if type(tokens) is int and tokens > 0:
        return True
    cause = type(tokens).__name__ if type(tokens) is not int else "not positive"
    warned = _warned_usage.setdefault(upstream, set())
    if cause not in warned:
        warned.add(cause)
        logger.warning(
            "the upstream reported usage.prompt_tokens of type %s (%s); ignored for "
            "calibration (said once per kind)",
            type(tokens).__name__,
            cause,
        )
    return False


def broken_off(upstream: Upstream, exc: httpx2.TransportError, route: ModelRoute) -> ProxyError:
    """The 504 (timeout) or 502 for an answer ``route``'s upstream began and did not finish."""
    if isinstance(exc, httpx2.TimeoutException):
        return upstream.failure(exc, route)
    interrupted(upstream, exc, route)
    return ProxyError(
        502,
        f"The upstream {route.host} broke off its answer: {type(exc).__name__}.",
        type="upstream_error",
        code="upstream_interrupted",
    )


def interrupted(upstream: Upstream, exc: httpx2.TransportError, route: ModelRoute) -> None:
    """Count and log (one line, no traceback) an answer ``route``'s upstream cut short."""
    label = "timeout" if isinstance(exc, httpx2.TimeoutException) else "stream_interrupted"
    upstream.errors.labels(label).inc()
    logger.warning(
        "the upstream %s interrupted its answer to a chat request: %s",
        route.host,
        type(exc).__name__,
    )


def invalid_answer(upstream: Upstream, status: int, route: ModelRoute) -> ProxyError:
    """The 502 for a success answer (of ``route``'s upstream) that is not a chat completion."""
    upstream.errors.labels("invalid_response").inc()
    logger.warning(
        "the upstream %s answered HTTP %d with a body that is not a chat completion",
        route.host,
        status,
    )
    return ProxyError(
        502,
        f"The upstream {route.host} answered HTTP {status} with a body that "
        "is not a chat completion.",
        type="upstream_error",
        code="upstream_invalid_response",
    )


def is_context_length(status: int, content: bytes) -> bool:
    """Whether an upstream error answer says the prompt is over the window."""
    return says_context_length_exceeded(status, json_object(content, exact=True))


def is_event_stream(response: httpx2.Response) -> bool:
    """Whether the upstream answers with server-sent events."""
    return response.headers.get("content-type", "").startswith("text/event-stream")


def upstream_error_payload(status: int, content: bytes) -> dict[str, Any]:
    """An upstream error answer as the payload of an SSE error event: its own JSON when that
    has an ``error`` object (OpenAI's and Anthropic's shapes both do), else ours."""
    data = json_object(content, exact=True)
    if data is not None and isinstance(data.get("error"), dict):
        return data
    return error_payload(
        f"The upstream answered HTTP {status}.", type="upstream_error", code=str(status)
    )


def usage_figures(usage: Any) -> tuple[int | None, int | None]:
    """``(prompt tokens, cached tokens)`` of a usage the front doors normalized
    (``prompt_tokens`` plus ``cached_tokens`` or ``prompt_tokens_details.cached_tokens``)."""
    if not isinstance(usage, Mapping):
        return None, None
    prompt = usage.get("prompt_tokens")
    cached = usage.get("cached_tokens")
    details = usage.get("prompt_tokens_details")
    if cached is None and isinstance(details, Mapping):
        cached = details.get("cached_tokens")
    return _count(prompt), _count(cached)


def count_usage(tokens: TokenCounts, route: str, usage: Any) -> None:
    """Count an agent request's answer's usage, as its front door normalized it (plus
    ``completion_tokens``), in the token counters."""
    prompt, cached = usage_figures(usage)
    completion = _count(usage.get("completion_tokens")) if isinstance(usage, Mapping) else None
    tokens.add(route, "agent", prompt, cached, completion)


def reports_prompt(usage: Any) -> bool:
    """Whether a normalized usage reports the prompt: not one that reports the answer's length
    alone (a Messages stream's ``message_delta``), which has nothing to calibrate with."""
    return isinstance(usage, Mapping) and "prompt_tokens" in usage


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
