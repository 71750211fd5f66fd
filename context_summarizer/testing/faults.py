"""Failures the test upstream can inject, and the error bodies it answers with: OpenAI's
shape, Anthropic's for the Messages API and Google's for the Gemini API.

Each ``Fault`` is consumed by the next chat completion (or Messages API) request it
``matches``; see ``TestUpstream.inject``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel

from .responders import is_summary_request

FaultKind = Literal["status", "rate_limit", "delay", "drop", "body", "bad_usage", "reset"]


class Fault(BaseModel):
    """A failure to inject into the next matching chat completion or Messages API request.

    - ``"status"``: answer ``status`` with ``body`` (default: an OpenAI-style error body, or
      for ``POST /v1/messages`` Anthropic's, e.g. 529 ``overloaded_error``);
    - ``"rate_limit"``: answer 429 with OpenAI's ``rate_limit_exceeded`` body (Anthropic's
      ``rate_limit_error`` for ``POST /v1/messages``);
    - ``"delay"``: sleep ``seconds``, then answer normally;
    - ``"drop"``: read the request, then close the connection without any response;
    - ``"body"``: answer ``status`` (default here: 200) with the bytes ``content`` as they are,
      labelled ``content_type``: invalid, empty or truncated JSON, an HTML page...;
    - ``"bad_usage"``: answer normally, but with ``usage.prompt_tokens`` set to
      ``prompt_tokens`` (any JSON value: ``"12"``, ``None``, ``{}``, ``True``);
    - ``"reset"``: start a normal 200 answer, send ``events`` SSE events of it (a stream) or
      half of its JSON body (otherwise), then reset the connection.

    ``seconds`` delays the answer of any kind (``"delay"``: then answers normally).
    ``retry_after`` (seconds) adds ``Retry-After`` and ``retry-after-ms`` headers to a
    ``"status"`` or ``"rate_limit"`` answer; without it they are not sent. ``match`` picks the
    chat completions (and messages) it applies to: ``"summary"`` (``tool_choice == "none"``;
    ``{"type": "none"}`` for messages), ``"agent"`` (all others) or ``"any"``;
    ``"embeddings"`` applies it to the next ``POST /v1/embeddings`` instead (kinds
    ``"status"``, ``"delay"``, ``"drop"``, ``"body"`` and ``"reset"``). ``"bad_usage"`` sets a
    message's ``usage.input_tokens``.
    """

    kind: FaultKind
    status: int | None = None
    body: dict[str, Any] | None = None
    retry_after: float | None = None
    seconds: float = 0
    content: bytes = b""
    content_type: str = "application/json"
    prompt_tokens: Any = None
    events: int = 2
    match: Literal["any", "summary", "agent", "embeddings"] = "any"

    def matches(self, body: Mapping[str, Any]) -> bool:
        """Whether this fault applies to a chat completion request with ``body`` (a Messages
        API request is matched by its chat translation)."""
        if self.match == "embeddings":
            return False
        if self.match == "any":
            return True
        return is_summary_request(body) == (self.match == "summary")

    def answer_status(self) -> int:
        """The HTTP status this fault answers with (``"status"``: 500 unless set)."""
        if self.kind == "rate_limit":
            return 429
        if self.status is not None:
            return self.status
        return 500 if self.kind == "status" else 200


def error_body(
    message: str,
    *,
    type: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> dict[str, Any]:
    """An error body shaped like OpenAI's."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


_DEFAULT_STATUS_MESSAGES = {
    400: ("Simulated bad request.", "invalid_request_error", None),
    401: ("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to access this resource.", "invalid_request_error", None),
    404: ("The requested resource does not exist.", "invalid_request_error", None),
    408: ("Request timed out.", "server_error", None),
    409: ("The request conflicted with another request.", "invalid_request_error", None),
    500: (
        "The server had an error while processing your request. Sorry about that!",
        "server_error",
        None,
    ),
    502: ("Bad gateway.", "server_error", None),
    503: ("The engine is currently overloaded, please try again later.", "server_error", None),
    504: ("Gateway timeout.", "server_error", None),
}


def default_fault_body(status: int) -> dict[str, Any]:
    """The OpenAI-style error body a ``"status"`` fault answers with by default."""
    message, kind, code = _DEFAULT_STATUS_MESSAGES.get(
        status,
        (
            f"Simulated upstream error (HTTP {status}).",
            "server_error" if status >= 500 else "invalid_request_error",
            None,
        ),
    )
    return error_body(message, type=kind, code=code)


def rate_limit_body(model: str, retry_after: float | None) -> dict[str, Any]:
    """OpenAI's 429 body for ``model``."""
    wait = f" Please try again in {retry_after:g}s." if retry_after is not None else ""
    return error_body(
        f"Rate limit reached for {model} in organization org-test on requests per min (RPM): "
        f"Limit 60, Used 60, Requested 1.{wait} "
        "Visit https://platform.openai.com/account/rate-limits to learn more.",
        type="requests",
        code="rate_limit_exceeded",
    )


def retry_headers(retry_after: float | None) -> dict[str, str]:
    """``Retry-After`` and ``retry-after-ms`` for ``retry_after`` seconds (none for None)."""
    if retry_after is None:
        return {}
    seconds = f"{retry_after:g}" if retry_after != int(retry_after) else str(int(retry_after))
    return {"Retry-After": seconds, "retry-after-ms": str(round(retry_after * 1000))}


# --- Anthropic's shape (the Messages API) -------------------------------------------------------


def anthropic_error_body(
    message: str, *, type: str = "invalid_request_error", request_id: str | None = None
) -> dict[str, Any]:
    """An error body shaped like Anthropic's (``request_id``: added when given)."""
    body: dict[str, Any] = {"type": "error", "error": {"type": type, "message": message}}
    if request_id is not None:
        body["request_id"] = request_id
    return body


_ANTHROPIC_STATUS_MESSAGES = {
    400: ("Simulated bad request.", "invalid_request_error"),
    401: ("invalid x-api-key", "authentication_error"),
    402: ("Your credit balance is too low to access the Anthropic API.", "billing_error"),
    403: (
        "Your API key does not have permission to use the specified resource.",
        "permission_error",
    ),
    404: ("The requested resource could not be found.", "not_found_error"),
    413: ("Request exceeds the maximum allowed number of bytes.", "request_too_large"),
    429: (
        "This request would exceed the rate limit for your organization (org-test) of 50 "
        "requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. "
        "You can see the response headers for current usage. Please reduce the prompt length or "
        "the maximum tokens requested, or try again later.",
        "rate_limit_error",
    ),
    500: ("Internal server error", "api_error"),
    504: ("Request timed out.", "timeout_error"),
    529: ("Overloaded", "overloaded_error"),
}


def anthropic_fault_body(status: int, request_id: str | None = None) -> dict[str, Any]:
    """Anthropic's error body for a ``"status"`` or ``"rate_limit"`` fault answering ``status``.

    ``status`` picks the error type as Anthropic does: 401 ``authentication_error``, 403
    ``permission_error``, 404 ``not_found_error``, 429 ``rate_limit_error``, 500 ``api_error``,
    529 ``overloaded_error``...; any other 4xx is an ``invalid_request_error`` and any other
    5xx an ``api_error``.
    """
    message, kind = _ANTHROPIC_STATUS_MESSAGES.get(
        status,
        (
            f"Simulated upstream error (HTTP {status}).",
            "api_error" if status >= 500 else "invalid_request_error",
        ),
    )
    return anthropic_error_body(message, type=kind, request_id=request_id)


# --- Google's shape (the Gemini API) ------------------------------------------------------------

GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
"""The ``status`` Google's APIs name each HTTP status with."""


def google_error_body(status: int, message: str) -> dict[str, Any]:
    """An error body shaped like Google's: ``{"error": {"code", "message", "status"}}``."""
    name = GOOGLE_STATUSES.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
    return {"error": {"code": status, "message": message, "status": name}}


_GOOGLE_STATUS_MESSAGES = {
    429: "Resource has been exhausted (e.g. check quota).",
    500: "An internal error has occurred. Please retry or report in "
    "https://developers.generativeai.google/guide/troubleshooting",
    503: "The model is overloaded. Please try again later.",
}


def google_fault_body(status: int) -> dict[str, Any]:
    """Google's error body for a ``"status"`` or ``"rate_limit"`` fault answering ``status``."""
    message = _GOOGLE_STATUS_MESSAGES.get(status, f"Simulated upstream error (HTTP {status}).")
    return google_error_body(status, message)
