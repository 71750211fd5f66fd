"""The proxy under hostile input: paths that try to leave ``/v1``, who may use the server key,
session tenancy, the session header, and a proxy whose upstream leads back to itself.

Raw paths are sent with ``http.client``, which writes the request target exactly as given (the
openai SDK and httpx would normalise it first). What the upstream received is read from the
test upstream's own log.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from summarizer.proxy import ProxyServer
from summarizer.settings import Settings
from summarizer.testing import TestUpstream

SERVER_KEY = "sk-server-side-key-0123456789"
CLIENT_KEY = "sk-client-key-alpha-0123456789"

ProxyFactory = Callable[..., ProxyServer]


@pytest.fixture
def start_proxy(tmp_path: Path, upstream: TestUpstream) -> Iterator[ProxyFactory]:
    started: list[ProxyServer] = []

    def start(**overrides: Any) -> ProxyServer:
        values: dict[str, Any] = {
            "upstream": upstream.base_url,
            "port": 0,
            "db": tmp_path / "checkpoints.db",
            "context_window": 16_000,
        }
        values.update(overrides)
        proxy = ProxyServer(Settings(**values)).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


def raw_request(
    proxy: ProxyServer,
    method: str,
    target: str,
    *,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """Send ``target`` byte for byte (no client-side normalisation); status, headers, body."""
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    try:
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        return (
            response.status,
            {name.lower(): value for name, value in response.getheaders()},
            response.read(),
        )
    finally:
        connection.close()


def assert_openai_error(body: bytes, *, code: str, param: str | None = None) -> dict[str, Any]:
    """``body`` is an OpenAI-style error with ``code`` (and ``param``); the error object."""
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["param"] == param
    assert error["message"]
    return dict(error)


# -- item 12: pass-through paths stay under the upstream's base path ------------------------------

ESCAPES = [
    "/v1/../internal/admin",
    "/v1/%2e%2e/internal/admin",
    "/v1/%2E%2E/internal/admin",
    "/v1/.%2e/internal/admin",
    "/v1/%2e./internal/admin",
    "/v1/models/../../internal/admin",
    "/v1/./models",
    "/v1/models/.",
    "/v1/..;/internal/admin",
    "/v1/..\\internal\\admin",
    "/v1/..%5cinternal%5cadmin",
    "/v1/..%5Cinternal",
    "/v1/..%2finternal%2fadmin",
    "/v1/models%2F..%2F..%2Finternal",
    "/v1%2f..%2finternal/admin",
    "/v1/%252e%252e/internal",
    "/v1/models//admin",
    "/v1/files/a%00b",
]


@pytest.mark.parametrize("target", ESCAPES)
def test_a_path_leaving_v1_is_refused_and_nothing_reaches_the_upstream(
    upstream: TestUpstream, start_proxy: ProxyFactory, target: str
) -> None:
    proxy = start_proxy(upstream_api_key=SERVER_KEY)
    for method in ("GET", "POST"):
        status, _, body = raw_request(
            proxy, method, target, body=b"{}" if method == "POST" else None
        )
        assert status == 400, (method, target, body)
        assert_openai_error(body, code="invalid_path")
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("target", "forwarded"),
    [
        ("/v1/models", "/v1/models"),
        ("/v1/models/gpt-4o-mini", "/v1/models/gpt-4o-mini"),
        # Encoded characters stay encoded: %3F is part of the name, never the start of a query.
        ("/v1/models/a%3Fb", "/v1/models/a%3Fb"),
        ("/v1/files/a%20b.txt", "/v1/files/a%20b.txt"),
        ("/v1/models/..hidden", "/v1/models/..hidden"),
        ("/v1/models/", "/v1/models/"),
    ],
)
def test_a_path_inside_v1_is_forwarded_as_the_client_wrote_it(
    upstream: TestUpstream, start_proxy: ProxyFactory, target: str, forwarded: str
) -> None:
    proxy = start_proxy(upstream_api_key=SERVER_KEY)
    raw_request(proxy, "GET", target + "?limit=2")
    [received] = upstream.requests
    assert received.path == forwarded
    assert received.headers["authorization"] == f"Bearer {SERVER_KEY}"
