"""Paths and methods the proxy does not serve: a JSON error in the path's API shape, never
Starlette's plain text, never forwarded. The real proxy on 127.0.0.1, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.apis import shape_for_path
from context_summarizer.testing import TestUpstream

from .conftest import ProxyFactory

KEY = "sk-test-paths-0123456789abcdef"
BODY = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


@pytest.fixture(scope="module")
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream() as server:
        yield server


@pytest.fixture
def proxy(start_proxy: ProxyFactory) -> ProxyServer:
    return start_proxy()


def root(proxy: ProxyServer) -> str:
    return proxy.base_url.removesuffix("/v1")


def send(proxy: ProxyServer, method: str, path: str, **kwargs: Any) -> httpx2.Response:
    headers = {"Authorization": f"Bearer {KEY}", **kwargs.pop("headers", {})}
    return httpx2.request(method, root(proxy) + path, headers=headers, timeout=10, **kwargs)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        # Only generateContent and its stream are served (tests/test_gemini_proxy.py).
        ("POST", "/v1beta/models/gemini-2.5-pro:countTokens"),
        ("POST", "/v1beta/models/gemini-2.5-pro:embedContent"),
        ("GET", "/v1beta/models/gemini-2.5-pro"),
        ("POST", "/v1beta/tunedModels/my-model:generateContent"),
        ("GET", "/v1beta/models"),
        ("POST", "/v1alpha/models/gemini-x:countTokens"),
        ("POST", "/v1/models/gemini-2.5-pro:embedContent"),
    ],
)
def test_gemini_paths_get_googles_404_and_are_not_forwarded(
    upstream: TestUpstream, proxy: ProxyServer, method: str, path: str
) -> None:
    before = len(upstream.requests)
    answer = send(proxy, method, path, json=BODY if method == "POST" else None)
    assert answer.status_code == 404
    assert answer.headers["content-type"] == "application/json"
    error = answer.json()["error"]
    assert set(answer.json()) == {"error"} and set(error) == {"code", "message", "status"}
    assert (error["code"], error["status"]) == (404, "NOT_FOUND")
    assert path.split("?")[0] in error["message"] and "Gemini" in error["message"]
    assert len(upstream.requests) == before


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND"])
def test_other_unknown_paths_get_openais_404_with_any_method(
    proxy: ProxyServer, method: str
) -> None:
    answer = send(proxy, method, "/api/generate", content=b"{}")
    assert answer.status_code == 404
    assert answer.json() == {
        "error": {
            "message": "Unknown path /api/generate.",
            "type": "invalid_request_error",
            "param": None,
            "code": "not_found",
        }
    }


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/responses", "POST"),
        ("GET", "/v1/responses/compact", "POST"),
        ("DELETE", "/healthz", "GET, HEAD"),
        ("POST", "/metrics", "GET, HEAD"),
    ],
)
def test_a_wrong_method_on_a_known_route_gets_a_json_405_with_allow(
    upstream: TestUpstream, proxy: ProxyServer, method: str, path: str, allow: str
) -> None:
    before = len(upstream.requests)
    answer = send(proxy, method, path)
    assert answer.status_code == 405 and answer.headers["allow"] == allow
    error = answer.json()["error"]
    assert error["code"] == "method_not_allowed" and error["type"] == "invalid_request_error"
    assert f"Method {method} is not allowed on {path}; use {allow}." == error["message"]
    assert len(upstream.requests) == before, "a wrong method is never forwarded"


def test_a_wrong_method_on_the_messages_route_gets_anthropics_405(proxy: ProxyServer) -> None:
    answer = send(proxy, "GET", "/v1/messages")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    body = answer.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "Method GET is not allowed on /v1/messages" in body["error"]["message"]


def test_head_gets_an_answer_without_a_body_and_the_connection_stays_usable(
    proxy: ProxyServer,
) -> None:
    with httpx2.Client(base_url=root(proxy), timeout=10) as client:
        for path, status in (("/", 404), ("/v1/messages", 405), ("/healthz", 200)):
            answer = client.head(path)
            assert answer.status_code == status, path
            assert answer.content == b""
        # Had a HEAD answer carried a body, it would be read as this answer's start.
        assert client.get("/healthz").status_code == 200
        assert client.get("/nowhere").json()["error"]["code"] == "not_found"


def test_routes_still_served_keep_their_methods(upstream: TestUpstream, proxy: ProxyServer) -> None:
    fine_tuned = "/v1/models/ft:gpt-4o-mini:acme::abc123"  # colons, but no Gemini method
    answer = send(proxy, "GET", fine_tuned)
    assert upstream.requests[-1].path == fine_tuned, "forwarded"
    assert answer.json()["error"]["code"] == "model_not_found"  # the upstream's own answer
    models = send(proxy, "GET", "/v1/models")
    assert models.status_code == 200 and upstream.requests[-1].path == "/v1/models"
    chat = send(
        proxy,
        "POST",
        "/v1/chat/completions",
        json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] == "ok"


def test_a_wrong_method_on_a_gemini_route_gets_googles_405(
    upstream: TestUpstream, proxy: ProxyServer
) -> None:
    before = len(upstream.requests)
    answer = send(proxy, "GET", "/v1beta/models/gemini-2.5-pro:generateContent")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    error = answer.json()["error"]
    assert (error["code"], error["status"]) == (405, "UNIMPLEMENTED")
    assert len(upstream.requests) == before


def test_a_refusal_on_a_gemini_path_takes_googles_shape(start_proxy: ProxyFactory) -> None:
    guarded = start_proxy(client_keys=[KEY])
    url = f"{root(guarded)}/v1beta/models/gemini-x:generateContent"
    answer = httpx2.post(url, json=BODY, timeout=10)
    assert answer.status_code == 401
    error = answer.json()["error"]
    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")


def test_shape_for_path() -> None:
    assert shape_for_path("/v1/messages") == shape_for_path("/v1/messages/batches") == "anthropic"
    assert shape_for_path("/v1beta/models/x:generateContent") == "google"
    assert shape_for_path("/v1alpha") == shape_for_path("/v1/models/m:embedContent") == "google"
    for path in ("/v1/models/ft:gpt-4o:org::id", "/v1/models", "/v1betamax", "/", "/v1/chat"):
        assert shape_for_path(path) == "openai", path


def test_a_base_url_without_v1_is_served_as_under_v1(
    upstream: TestUpstream, proxy: ProxyServer
) -> None:
    client = openai.OpenAI(base_url=root(proxy), api_key=KEY, max_retries=0, timeout=10)
    raw = client.chat.completions.with_raw_response.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.parse().choices[0].message.content == "ok"
    assert raw.headers["x-summarizer-compacted"] == "false", "context-managed, not passed through"
    assert upstream.requests[-1].path == "/v1/chat/completions"
    assert [model.id for model in client.models.list()]
    assert upstream.requests[-1].path == "/v1/models"
    before = len(upstream.requests)
    bad = send(proxy, "POST", "/messages", json={"model": "claude-x", "messages": "no"})
    assert bad.status_code == 400 and bad.json()["type"] == "error", "Anthropic's shape"
    assert len(upstream.requests) == before
    wrong = send(proxy, "GET", "/responses")
    assert wrong.status_code == 405 and "/v1/responses" in wrong.json()["error"]["message"]
    metrics = send(proxy, "GET", "/metrics").text
    assert 'summarizer_requests_total{route="chat",status="200"} 1.0' in metrics
