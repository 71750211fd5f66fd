"""Unit tests for ``context_summarizer.proxy.headers``: which headers cross the proxy."""

from __future__ import annotations

import re

import pytest

from context_summarizer.proxy.errors import ProxyError
from context_summarizer.proxy.headers import (
    ANONYMOUS,
    HOP_BY_HOP,
    check_authorization,
    credential,
    credential_namespace,
    request_headers,
    response_headers,
)


def _names(pairs: list[tuple[str, str]]) -> list[str]:
    return [name for name, _ in pairs]


# -- request_headers ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(HOP_BY_HOP))
def test_hop_by_hop_headers_are_dropped(name: str) -> None:
    out = request_headers([(name, "x"), ("accept", "application/json")])
    assert out == [("accept", "application/json")]


def test_host_and_content_length_are_dropped() -> None:
    out = request_headers(
        [("Host", "localhost:8787"), ("Content-Length", "123"), ("Content-Type", "a/b")]
    )
    assert out == [("content-type", "a/b")]


def test_headers_named_by_connection_are_dropped_case_insensitively() -> None:
    out = request_headers(
        [
            ("Connection", "Keep-Alive, X-Private-Hop"),
            ("x-private-hop", "1"),
            ("X-Kept", "2"),
        ]
    )
    assert out == [("x-kept", "2")]


def test_summarizer_headers_are_dropped_in_any_case() -> None:
    out = request_headers(
        [
            ("X-Summarizer-Session", "s1"),
            ("x-summarizer-anything", "v"),
            ("X-SUMMARIZER-DEBUG", "1"),
            ("x-summarizerish", "kept"),
        ]
    )
    assert out == [("x-summarizerish", "kept")]


def test_names_are_lowercased_and_values_and_order_kept() -> None:
    out = request_headers(
        [("User-Agent", "OpenAI/Python 1.0"), ("Accept", "text/event-stream"), ("X-A", " v ")]
    )
    assert out == [
        ("user-agent", "OpenAI/Python 1.0"),
        ("accept", "text/event-stream"),
        ("x-a", " v "),
    ]


def test_client_credential_forwarded_without_upstream_key() -> None:
    out = request_headers([("Authorization", "Bearer sk-client"), ("api-key", "azure")])
    assert out == [("authorization", "Bearer sk-client"), ("api-key", "azure")]


def test_upstream_key_replaces_every_client_credential_header() -> None:
    out = request_headers(
        [
            ("Authorization", "Bearer sk-client"),
            ("API-Key", "azure-client"),
            ("X-Api-Key", "anthropic-client"),
            ("Accept", "application/json"),
        ],
        upstream_api_key="sk-upstream",
    )
    assert sorted(out) == [("accept", "application/json"), ("authorization", "Bearer sk-upstream")]


def test_upstream_key_added_when_client_sent_none() -> None:
    out = request_headers([("accept", "*/*")], upstream_api_key="sk-upstream")
    assert out == [("accept", "*/*"), ("authorization", "Bearer sk-upstream")]


def test_explicit_drop_is_case_insensitive() -> None:
    out = request_headers(
        [("Accept-Encoding", "gzip"), ("Accept", "*/*")], drop=["ACCEPT-ENCODING"]
    )
    assert out == [("accept", "*/*")]


# -- response_headers -----------------------------------------------------------------------------


def test_response_headers_drop_hop_by_hop_and_length() -> None:
    out = response_headers(
        [
            ("Content-Type", "text/event-stream"),
            ("Transfer-Encoding", "chunked"),
            ("Content-Length", "10"),
            ("Connection", "close, X-Hop"),
            ("X-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("X-Request-Id", "req_1"),
            ("openai-processing-ms", "12"),
        ]
    )
    assert out == [
        ("content-type", "text/event-stream"),
        ("x-request-id", "req_1"),
        ("openai-processing-ms", "12"),
    ]


def test_response_headers_keep_repeated_headers() -> None:
    out = response_headers([("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")])
    assert out == [("set-cookie", "a=1"), ("set-cookie", "b=2")]


# -- credential -----------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_credential_strips_bearer_in_any_case(scheme: str) -> None:
    assert credential({"authorization": f"{scheme} sk-abc123"}) == "sk-abc123"


def test_credential_strips_surrounding_whitespace() -> None:
    assert credential({"authorization": "Bearer   sk-abc123  "}) == "sk-abc123"


def test_credential_from_raw_api_key_headers() -> None:
    assert credential({"api-key": "azure-key"}) == "azure-key"
    assert credential({"x-api-key": " anthropic-key "}) == "anthropic-key"


@pytest.mark.parametrize(
    "value", ["sk-abc123456789", "Basic dXNlcjpwYXNz", "Bearer", "Bearer   ", "Token sk-abc123"]
)
def test_only_a_bearer_authorization_is_a_credential(value: str) -> None:
    # docs/operating.md: a key is taken as ``Authorization: Bearer KEY``, ``api-key`` or
    # ``x-api-key``.
    assert credential({"authorization": value}) is None
    assert credential({"authorization": value, "x-api-key": "second"}) == "second"
    with pytest.raises(ProxyError) as refused:
        check_authorization({"authorization": value})
    refusal = refused.value.response()
    assert refusal.status_code == 401
    assert value.strip() not in bytes(refusal.body).decode() or value.strip() == "Bearer"


@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer sk-abc123"},
        {"authorization": "bearer  sk-abc123 "},
        {"authorization": ""},
        {"x-api-key": "anything"},
    ],
)
def test_a_bearer_or_missing_authorization_is_not_refused(headers: dict[str, str]) -> None:
    check_authorization(headers)  # raises ProxyError if refused


def test_credential_authorization_wins_over_api_key_headers() -> None:
    headers = {"x-api-key": "third", "api-key": "second", "authorization": "Bearer first"}
    assert credential(headers) == "first"


def test_credential_empty_header_falls_through() -> None:
    assert credential({"authorization": "", "api-key": "second"}) == "second"


def test_credential_none_without_credential_headers() -> None:
    assert credential({}) is None
    assert credential({"accept": "*/*", "authorization": ""}) is None


# -- credential_namespace -------------------------------------------------------------------------


def test_namespace_is_deterministic() -> None:
    assert credential_namespace("sk-abc123") == credential_namespace("sk-abc123")


def test_namespace_differs_per_key() -> None:
    keys = ["sk-abc123", "sk-abc124", "sk-ABC123", "azure-key", "x"]
    assert len({credential_namespace(k) for k in keys}) == len(keys)


def test_namespace_never_contains_the_key() -> None:
    for key in ["sk-proj-0123456789abcdef", "0123456789abcdef", "key-1"]:
        namespace = credential_namespace(key)
        assert key not in namespace
        assert re.fullmatch(r"key-[0-9a-f]{32}", namespace)


@pytest.mark.parametrize("secret", [None, ""])
def test_namespace_anonymous_without_credential(secret: str | None) -> None:
    assert credential_namespace(secret) == ANONYMOUS == "anonymous"


def test_namespace_of_a_key_is_not_anonymous() -> None:
    assert credential_namespace("anonymous") != ANONYMOUS
