"""Unit tests for ``context_summarizer.library.upstream.says_context_length_exceeded``."""

from __future__ import annotations

from typing import Any

import pytest

from context_summarizer.library.upstream import says_context_length_exceeded

OPENAI_BODY = {
    "error": {
        "message": (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130000 tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
ANTHROPIC_BODY = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


def test_openai_error_body() -> None:
    assert says_context_length_exceeded(400, OPENAI_BODY) is True


def test_openai_code_alone_is_enough() -> None:
    body = {"error": {"message": "nope", "code": "context_length_exceeded"}}
    assert says_context_length_exceeded(400, body) is True


def test_string_above_max_length_code() -> None:
    body = {"error": {"message": "string too long", "code": "string_above_max_length"}}
    assert says_context_length_exceeded(400, body) is True


def test_unwrapped_error_object() -> None:
    assert says_context_length_exceeded(400, OPENAI_BODY["error"]) is True
    assert says_context_length_exceeded(400, {"code": "context_length_exceeded"}) is True


def test_anthropic_style_message() -> None:
    assert says_context_length_exceeded(400, ANTHROPIC_BODY) is True


@pytest.mark.parametrize(
    "message",
    [
        "Input is too long for requested model.",
        "The request exceeds the model's Context Window",
        "Too many tokens: 40000 > 32768",
        "This model's maximum context length is 8192 tokens",
    ],
)
def test_other_provider_messages(message: str) -> None:
    assert says_context_length_exceeded(400, {"error": {"message": message}}) is True


def test_error_given_as_a_string() -> None:
    body = {"error": "prompt is too long: 5000 tokens > 4096 maximum"}
    assert says_context_length_exceeded(400, body) is True


@pytest.mark.parametrize("status", [413, 422])
def test_other_client_error_statuses_with_matching_text(status: int) -> None:
    assert says_context_length_exceeded(status, ANTHROPIC_BODY) is True


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "Invalid value for 'temperature': must be <= 2.", "code": None}},
        {"error": {"message": "Unknown model gpt-9", "code": "model_not_found"}},
        {"error": {"message": "max_tokens must be positive", "type": "invalid_request_error"}},
        {"error": "bad request"},
        {},
        None,
    ],
)
def test_400_with_another_error_is_false(body: Any) -> None:
    assert says_context_length_exceeded(400, body) is False


@pytest.mark.parametrize("status", [500, 429, 503, 401, 200])
def test_other_statuses_are_false_even_with_matching_body(status: int) -> None:
    assert says_context_length_exceeded(status, OPENAI_BODY) is False
    assert says_context_length_exceeded(status, ANTHROPIC_BODY) is False
