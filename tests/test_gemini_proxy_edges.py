"""The proxy's Gemini front door at its edges, over real HTTP with the real ``google-genai`` SDK:
malformed requests get Google's 400 and go nowhere, upstream errors pass through, a prompt the
upstream calls too long is compacted harder once, a route's key goes as ``x-goog-api-key``, a key
in ``?key=`` counts as that header, ``cachedContent`` passes through unmanaged, and a stream held
open by a compaction stays readable by the SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from google import genai
from google.genai import errors, types

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Fault, ScriptedToolAgent, TestUpstream

from .conftest import ProxyFactory
from .gemini_support import KEY, MODEL, NO_AUTO, gemini_client, gemini_requests, root

READ_FILE = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="read_file",
            description="Read a file.",
            parameters_json_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        )
    ]
)
TOOLS_JSON = [
    {
        "functionDeclarations": [
            {"name": "read_file", "parametersJsonSchema": {"type": "object"}},
        ]
    }
]


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000) as server:
        yield server


@pytest.fixture
def proxy(start_proxy: ProxyFactory, upstream: TestUpstream) -> ProxyServer:
    return start_proxy(upstream=f"{upstream.root_url}/v1beta")


def long_contents(turns: int, *, size: int = 900) -> list[dict[str, Any]]:
    """A Gemini conversation of ``turns`` function call exchanges of about ``2 * size`` tokens."""
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "Fix the failing invoice test."}]}
    ]
    for turn in range(turns):
        call = {"functionCall": {"name": "read_file", "args": {"n": turn}}}
        contents.append({"role": "model", "parts": [call]})
        output = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        output += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        result = {"functionResponse": {"name": "read_file", "response": {"output": output}}}
        contents.append({"role": "user", "parts": [result]})
    contents.append({"role": "user", "parts": [{"text": "Go on."}]})
    return contents


def url(proxy: ProxyServer, method: str = "generateContent", model: str = MODEL) -> str:
    return f"{root(proxy)}/v1beta/models/{model}:{method}"


@pytest.mark.parametrize(
    ("target", "raw", "says"),
    [
        (url, b"{not json", "parse the JSON"),
        (url, b"[]", "JSON object"),
        (url, json.dumps({"contents": []}).encode(), "contents"),
        (
            url,
            json.dumps({"contents": [{"role": "bot", "parts": [{"text": "x"}]}]}).encode(),
            "role",
        ),
        (
            url,
            json.dumps(
                {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "ls"}}]}]}
            ).encode(),
            "answers no function call",
        ),
        (
            lambda proxy: url(proxy, "streamGenerateContent"),
            json.dumps({"contents": [{"parts": [{"text": "hi"}]}]}).encode(),
            "alt=sse",
        ),
        (
            lambda proxy: url(proxy, model="gemini..%24"),
            json.dumps({"contents": [{"parts": [{"text": "hi"}]}]}).encode(),
            "Invalid model name",
        ),
    ],
)
def test_a_malformed_request_gets_googles_400_and_goes_nowhere(
    upstream: TestUpstream, proxy: ProxyServer, target: Any, raw: bytes, says: str
) -> None:
    answer = httpx2.post(
        target(proxy),
        content=raw,
        headers={"x-goog-api-key": KEY, "content-type": "application/json"},
    )
    assert answer.status_code == 400
    assert set(answer.json()) == {"error"}
    error = answer.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert says in error["message"]
    assert not upstream.requests


def test_the_python_sdks_default_version_is_served_too(
    upstream: TestUpstream, proxy: ProxyServer
) -> None:
    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=root(proxy)))
    answer = client.models.generate_content(model=MODEL, contents="hi")
    assert answer.text == "ok"
    assert answer.sdk_http_response and answer.sdk_http_response.headers
    assert answer.sdk_http_response.headers["x-summarizer-compacted"] == "false"
    # The SDK asked under /v1; the proxy's upstream route is Google's v1beta.
    assert upstream.requests[-1].path == f"/v1beta/models/{MODEL}:generateContent"
    # Any other path under /v1/models (an OpenAI model's) still passes through.
    httpx2.get(f"{proxy.base_url}/models/test-model", headers={"x-goog-api-key": KEY})
    assert upstream.requests[-1].path == "/v1beta/models/test-model"


def test_the_sdk_raises_on_googles_400(upstream: TestUpstream, proxy: ProxyServer) -> None:
    client = gemini_client(proxy)
    bad = types.Content(
        role="user", parts=[types.Part.from_function_response(name="ls", response={})]
    )
    with pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model=MODEL, contents=[bad])
    assert caught.value.code == 400 and caught.value.status == "INVALID_ARGUMENT"
    assert "contents[0].parts[0]" in str(caught.value.message)
    assert not upstream.requests


@pytest.mark.parametrize(
    ("fault", "status", "name"),
    [
        (Fault(kind="status", status=503), 503, "UNAVAILABLE"),
        (Fault(kind="rate_limit", retry_after=1), 429, "RESOURCE_EXHAUSTED"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_an_upstream_error_passes_through(
    upstream: TestUpstream, proxy: ProxyServer, fault: Fault, status: int, name: str, stream: bool
) -> None:
    upstream.inject(fault)
    client = gemini_client(proxy)
    with pytest.raises(errors.APIError) as caught:
        if stream:
            list(client.models.generate_content_stream(model=MODEL, contents="hi"))
        else:
            client.models.generate_content(model=MODEL, contents="hi")
    assert caught.value.code == status and caught.value.status == name
    assert [r.status for r in upstream.requests] == [status]  # the agent's request: no retry
    # The upstream's own answer, as it wrote it.
    assert "Simulated" not in str(caught.value.message)


def test_prompt_too_long_compacts_harder_and_retries_once(tmp_path: Path) -> None:
    # The proxy believes the window is 32k; the upstream enforces 12k.
    agent = ScriptedToolAgent([], final="Carrying on.")
    with TestUpstream(context_window=12_000, responder=agent) as small:
        settings = Settings(
            upstream=f"{small.root_url}/v1beta", port=0, db=tmp_path / "c.db", context_window=32_000
        )
        with ProxyServer(settings) as proxy:
            answer = httpx2.post(
                url(proxy),
                json={"contents": long_contents(8), "tools": TOOLS_JSON},
                headers={"x-goog-api-key": KEY},
                timeout=30,
            )
        assert answer.status_code == 200, answer.text
        assert answer.json()["candidates"][0]["content"]["parts"][0]["text"] == "Carrying on."
        sent = gemini_requests(small)
        assert [r.status for r in sent] == [400, 200]
        assert (sent[1].prompt_tokens or 0) <= 12_000
        assert gemini_requests(small, summary=True)


def test_a_routes_key_goes_upstream_as_x_goog_api_key(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(upstream=f"{upstream.root_url}/v1beta", upstream_api_key="server-key-42")
    client = gemini_client(proxy, "client-key-1")
    assert client.models.generate_content(model=MODEL, contents="hi").text == "ok"
    headers = upstream.requests[-1].headers
    assert headers["x-goog-api-key"] == "server-key-42"
    assert "authorization" not in headers


def test_a_key_in_the_query_is_read_as_the_header(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(upstream=f"{upstream.root_url}/v1beta", client_keys=[KEY])
    body = {"contents": [{"parts": [{"text": "hi"}]}]}
    answer = httpx2.post(f"{url(proxy)}?key={KEY}", json=body)
    assert answer.status_code == 200
    assert upstream.requests[-1].headers["x-goog-api-key"] == KEY
    refused = httpx2.post(f"{url(proxy)}?key=not-{KEY}", json=body)
    assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert KEY not in refused.text
    # The same tenant as with the header: its session answers to either.
    session = answer.headers["x-summarizer-session"]
    again = httpx2.post(url(proxy), json=body, headers={"x-goog-api-key": KEY})
    assert again.headers["x-summarizer-session"] == session
    assert len(gemini_requests(upstream)) == 2


def test_cached_content_passes_through_unmanaged(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(upstream=f"{upstream.root_url}/v1beta", context_window=6_000)
    body = {"cachedContent": "cachedContents/abc123", "contents": long_contents(6)}
    headers = {"x-goog-api-key": KEY, "content-type": "application/json"}
    answer = httpx2.post(url(proxy), content=json.dumps(body).encode(), headers=headers)
    assert answer.status_code == 200
    assert "cachedContent" in answer.headers["x-summarizer-warning"]
    assert answer.headers["x-summarizer-compacted"] == "false"
    assert upstream.requests[-1].body == body and not gemini_requests(upstream, summary=True)
    # Without it, the same conversation is over this window's trigger: compacted.
    del body["cachedContent"]
    managed = httpx2.post(url(proxy), content=json.dumps(body).encode(), headers=headers)
    assert managed.headers["x-summarizer-compacted"] == "true"
    assert gemini_requests(upstream, summary=True)


def test_a_stream_held_by_a_compaction_stays_readable_by_the_sdk(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    upstream.responder = ScriptedToolAgent([], final="Carrying on with the fix.")
    proxy = start_proxy(upstream=f"{upstream.root_url}/v1beta", keepalive_interval=0.2)
    upstream.inject(Fault(kind="delay", seconds=1.2, match="summary"))
    body = {"contents": long_contents(9), "tools": TOOLS_JSON}
    with httpx2.stream(
        "POST",
        f"{url(proxy, 'streamGenerateContent')}?alt=sse",
        json=body,
        headers={"x-goog-api-key": KEY},
        timeout=30,
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["x-summarizer-compacted"] == "pending"
        text = b"".join(answer.iter_raw())
    lead = text[: text.index(b"data: ")]
    assert len(lead) >= 3 and lead.strip() == b""  # keepalives: blank lines, never a comment
    assert b": summarizer" not in text and b'"finishReason": "STOP"' in text
    # The SDK reads such a stream as any other.
    upstream.inject(Fault(kind="delay", seconds=0.6, match="summary"))
    other = long_contents(9)
    other[0]["parts"][0]["text"] = "Another task entirely."
    client = gemini_client(proxy)
    config = types.GenerateContentConfig(tools=[READ_FILE], automatic_function_calling=NO_AUTO)
    chunks = list(client.models.generate_content_stream(model=MODEL, contents=other, config=config))  # type: ignore[arg-type]
    assert "".join(c.text or "" for c in chunks) == "Carrying on with the fix."
    assert len(gemini_requests(upstream, summary=True)) == 2
