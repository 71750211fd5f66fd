"""The proxy under hostile input: paths that try to leave ``/v1``, who may use the server key,
session tenancy, the session header, and a proxy whose upstream leads back to itself.

Raw paths are sent with ``http.client``, which writes the request target exactly as given (the
openai SDK and httpx would normalise it first). What the upstream received is read from the
test upstream's own log.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.core.errors import ConfigurationError
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .conftest import ProxyFactory, wait_until_serving
from .test_proxy import TOOLS, long_history

SERVER_KEY = "sk-server-side-key-0123456789"
CLIENT_KEY = "sk-client-key-alpha-0123456789"


MODEL = "gpt-4o-mini"


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=RoutingResponder(echo_responder)) as server:
        yield server


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def sha256_of(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


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
            proxy,
            method,
            target,
            body=b"{}" if method == "POST" else None,
            headers={"Content-Type": "application/json"} if method == "POST" else None,
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


# -- item 12: who may use the proxy (and so the server-side key) ----------------------------------


def test_client_keys_are_held_as_digests_only() -> None:
    settings = Settings.from_env({"SUMMARIZER_CLIENT_KEYS": f" {CLIENT_KEY} , sk-other-key ,"})
    assert len(settings.client_keys) == 2
    held = repr(settings) + json.dumps(settings.model_dump(mode="json"))
    assert CLIENT_KEY not in held and "sk-other-key" not in held
    digest = sha256_of(CLIENT_KEY)
    assert digest in settings.client_keys
    # A digest is taken as one (keys can stay off command lines), and survives a round trip.
    assert Settings(client_keys=[digest]).client_keys == {digest}
    assert Settings.model_validate(settings.model_dump()).client_keys == settings.client_keys
    # A flag replaces the environment, as for every other setting.
    flagged = Settings.from_env({"SUMMARIZER_CLIENT_KEYS": "sk-env"}, client_keys=[CLIENT_KEY])
    assert flagged.client_keys == {digest}


@pytest.mark.parametrize("server_key", [SERVER_KEY, None])
def test_with_client_keys_every_v1_request_needs_one_of_them(
    upstream: TestUpstream, start_proxy: ProxyFactory, server_key: str | None
) -> None:
    proxy = start_proxy(upstream_api_key=server_key, client_keys=[CLIENT_KEY, "sk-second-key"])
    chat = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]})
    refused = [
        ("GET", "/v1/models", {}),
        ("GET", "/v1/models", {"Authorization": "Bearer sk-not-on-the-list"}),
        ("GET", "/v1/models", {"Authorization": f"Bearer {CLIENT_KEY}x"}),
        # The digest the proxy holds is not a key.
        ("GET", "/v1/models", {"Authorization": f"Bearer {sha256_of(CLIENT_KEY)}"}),
        ("POST", "/v1/chat/completions", {"Content-Type": "application/json"}),
        ("POST", "/v1/chat/completions", {"api-key": "sk-not-on-the-list"}),
        ("GET", "/v1/summarizer/sessions/anything", {}),
    ]
    for method, target, headers in refused:
        body = chat.encode() if method == "POST" else None
        status, _, content = raw_request(proxy, method, target, body=body, headers=headers)
        assert status == 401, (target, headers)
        assert_openai_error(content, code="invalid_api_key")
        assert CLIENT_KEY not in content.decode()
    assert upstream.requests == []

    for headers in (
        {"Authorization": f"Bearer {CLIENT_KEY}"},
        {"api-key": "sk-second-key"},
        {"x-api-key": CLIENT_KEY},
    ):
        status, _, _ = raw_request(proxy, "GET", "/v1/models", headers=headers)
        assert status == 200, headers
    status, _, _ = raw_request(
        proxy,
        "POST",
        "/v1/chat/completions",
        body=chat.encode(),
        headers={"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"},
    )
    assert status == 200
    sent = {request.headers.get("authorization") for request in upstream.requests}
    if server_key is None:
        assert f"Bearer {CLIENT_KEY}" in sent
    else:
        assert sent == {f"Bearer {server_key}"}
    # Liveness and metrics stay open.
    assert raw_request(proxy, "GET", "/healthz")[0] == 200
    assert raw_request(proxy, "GET", "/metrics")[0] == 200


@pytest.mark.parametrize("client_keys", [[], [CLIENT_KEY]])
def test_an_authorization_header_without_bearer_is_refused_not_taken_as_a_key(
    upstream: TestUpstream, start_proxy: ProxyFactory, client_keys: list[str]
) -> None:
    # docs/operating.md: a key is taken as ``Authorization: Bearer KEY``, ``api-key`` or
    # ``x-api-key``.
    # A bare key is refused: served keyless it would share every keyless client's namespace.
    proxy = start_proxy(upstream_api_key=SERVER_KEY, client_keys=client_keys)
    chat = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    messages = json.dumps(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}],
        }
    ).encode()
    json_type = {"Content-Type": "application/json"}
    for value in (CLIENT_KEY, f"Basic {CLIENT_KEY}", "Bearer", "Bearer  "):
        auth = {"Authorization": value}
        status, _, content = raw_request(
            proxy, "POST", "/v1/chat/completions", body=chat, headers={**auth, **json_type}
        )
        assert status == 401, value
        error = assert_openai_error(content, code="invalid_api_key")
        assert "Bearer" in error["message"] and CLIENT_KEY not in content.decode()
        status, _, content = raw_request(
            proxy, "POST", "/v1/messages", body=messages, headers={**auth, **json_type}
        )
        assert status == 401, value
        assert json.loads(content)["type"] == "error"  # Anthropic's error shape
        assert raw_request(proxy, "GET", "/v1/models", headers=auth)[0] == 401
        status, _, _ = raw_request(proxy, "GET", "/v1/summarizer/sessions/anything", headers=auth)
        assert status == 401
        assert raw_request(proxy, "GET", "/healthz", headers=auth)[0] == 200
    assert upstream.requests == []
    status, _, _ = raw_request(
        proxy,
        "POST",
        "/v1/chat/completions",
        body=chat,
        headers={"Authorization": f"bearer {CLIENT_KEY}", **json_type},
    )
    assert status == 200


def test_a_server_key_without_client_keys_is_refused_on_a_public_interface(
    upstream: TestUpstream,
) -> None:
    settings = Settings(
        upstream=upstream.base_url,
        host="0.0.0.0",
        port=0,
        db=":memory:",
        upstream_api_key=SERVER_KEY,
    )
    with pytest.raises(ConfigurationError) as refused:
        ProxyServer(settings).start()
    assert "--client-key" in str(refused.value)
    assert SERVER_KEY not in str(refused.value)
    # With an allow-list it starts (and still wants a key).
    with ProxyServer(
        settings.model_copy(update={"client_keys": frozenset({"sha256:" + "0" * 64})})
    ) as proxy:
        assert raw_request(proxy, "GET", "/v1/models")[0] == 401
    assert upstream.requests == []


def test_serve_refuses_a_server_key_on_a_public_interface_without_client_keys() -> None:
    env = {**os.environ, "SUMMARIZER_UPSTREAM_API_KEY": SERVER_KEY}
    env.pop("SUMMARIZER_CLIENT_KEYS", None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "context_summarizer.cli",
            "serve",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert "--client-key" in result.stderr and "Traceback" not in result.stderr
    assert SERVER_KEY not in result.stderr


def test_a_server_key_on_loopback_without_client_keys_warns_at_startup(
    upstream: TestUpstream, start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="context_summarizer.proxy")
    start_proxy(upstream_api_key=SERVER_KEY)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("any local process" in message for message in warnings), warnings
    assert SERVER_KEY not in caplog.text
    caplog.clear()
    start_proxy(upstream_api_key=SERVER_KEY, client_keys=[CLIENT_KEY])
    assert not any("any local process" in r.getMessage() for r in caplog.records)


def test_serve_takes_client_keys_from_the_flag(upstream: TestUpstream, tmp_path: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "context_summarizer.cli", "serve", "--port", str(port)),
            *("--upstream", upstream.base_url, "--db", str(tmp_path / "c.db")),
            *("--client-key", CLIENT_KEY, "--client-key", "sk-second-key"),
        ],
        env={**os.environ, "SUMMARIZER_UPSTREAM_API_KEY": SERVER_KEY},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(process, url)
        assert httpx2.get(f"{url}/v1/models").status_code == 401
        for key in (CLIENT_KEY, "sk-second-key"):
            answer = httpx2.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {key}"})
            assert answer.status_code == 200
    finally:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    assert [r.headers["authorization"] for r in upstream.requests] == [f"Bearer {SERVER_KEY}"] * 2
    assert SERVER_KEY not in stderr and CLIENT_KEY not in stderr


# -- item 13: without a credential there is no tenancy -------------------------------------------


def _compact_anonymously(proxy: ProxyServer, session: str) -> str:
    """A conversation over the trigger, sent with no credential; its checkpoint id."""
    answer = httpx2.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": MODEL, "messages": long_history(7), "tools": TOOLS},
        headers={"X-Summarizer-Session": session},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-summarizer-checkpoint"]
    return answer.headers["x-summarizer-checkpoint"]


def test_by_default_a_keyless_client_cannot_read_sessions(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    _compact_anonymously(proxy, "team-notes")
    other = httpx2.get(f"{proxy.base_url}/summarizer/sessions/team-notes")
    assert other.status_code == 401
    assert_openai_error(other.content, code="invalid_api_key")
    # A keyed client still reads its own sessions, and only those.
    keyed = openai.OpenAI(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)
    keyed.chat.completions.create(
        model=MODEL,
        messages=long_history(7),
        tools=TOOLS,
        extra_headers={"X-Summarizer-Session": "mine"},
    )
    found = keyed.get("/summarizer/sessions/mine", cast_to=object)
    assert isinstance(found, dict) and len(found["checkpoints"]) == 1
    theirs = httpx2.get(
        f"{proxy.base_url}/summarizer/sessions/team-notes",
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
    )
    assert theirs.status_code == 404


def test_sessions_api_all_serves_keyless_clients_and_off_serves_no_one(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    shared = start_proxy(sessions_api="all")
    checkpoint = _compact_anonymously(shared, "team-notes")
    found = httpx2.get(f"{shared.base_url}/summarizer/sessions/team-notes")
    assert found.status_code == 200
    assert [c["id"] for c in found.json()["checkpoints"]] == [checkpoint]

    closed = start_proxy(sessions_api="off")
    _compact_anonymously(closed, "team-notes")
    for headers in ({}, {"Authorization": f"Bearer {CLIENT_KEY}"}):
        answer = httpx2.get(f"{closed.base_url}/summarizer/sessions/team-notes", headers=headers)
        assert answer.status_code == 404
        assert_openai_error(answer.content, code="not_found")


def test_startup_says_that_keyless_clients_share_one_namespace(
    upstream: TestUpstream, start_proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="context_summarizer.proxy")
    start_proxy()
    notes = [r.getMessage() for r in caplog.records if "share one namespace" in r.getMessage()]
    assert len(notes) == 1, caplog.text
    assert "sessions API: keyed" in notes[0]


# -- item 14: the session header is bounded and validated ----------------------------------------


def _chat_with_session(proxy: ProxyServer, session: str) -> tuple[int, dict[str, str], bytes]:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    return raw_request(
        proxy,
        "POST",
        "/v1/chat/completions",
        body=body.encode(),
        headers={
            "Authorization": f"Bearer {CLIENT_KEY}",
            "Content-Type": "application/json",
            "X-Summarizer-Session": session,
        },
    )


@pytest.mark.parametrize(
    "session",
    [
        "s" * 60_000,
        "s" * 129,
        "two words",
        "semi;colon",
        'quote"d',
        "per%cent",
        "caf\u00e9",
        "tab\there",
    ],
    ids=["60KB", "129", "space", "semicolon", "quote", "percent", "non-ascii", "tab"],
)
def test_a_bad_session_header_gets_400_and_is_not_echoed(
    upstream: TestUpstream, start_proxy: ProxyFactory, session: str
) -> None:
    proxy = start_proxy()
    status, headers, body = _chat_with_session(proxy, session.encode().decode("latin-1"))
    assert status == 400
    error = assert_openai_error(body, code="invalid_value", param="x-summarizer-session")
    assert len(body) < 1_000
    assert "x-summarizer-session" not in headers
    assert "128" in error["message"]
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("path", "shape"),
    [
        ("/v1/chat/completions", "openai"),
        ("/v1/messages", "anthropic"),
        ("/v1beta/models/gemini-2.5-flash:generateContent", "google"),
    ],
)
def test_a_head_over_64_kib_gets_431_in_the_apis_shape_and_is_not_echoed(
    upstream: TestUpstream, start_proxy: ProxyFactory, path: str, shape: str
) -> None:
    proxy = start_proxy()
    header = "s" * 1_000_000
    status, headers, body = raw_request(
        proxy,
        "POST",
        path,
        body=b"{}",
        headers={"Authorization": f"Bearer {CLIENT_KEY}", "X-Summarizer-Session": header},
    )
    assert status == 431
    assert headers["connection"] == "close"
    assert len(body) < 1_000 and header[:200] not in body.decode()
    error = json.loads(body)
    if shape == "openai":
        assert error["error"]["type"] == "invalid_request_error"
    elif shape == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    else:
        assert error["error"]["code"] == 431
    assert upstream.requests == []


def test_a_valid_session_header_is_used_and_echoed(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    for session in ("a" * 128, "build-42", "team.alpha:run/7@host_x"):
        status, headers, _ = _chat_with_session(proxy, session)
        assert status == 200
        assert headers["x-summarizer-session"] == session
    # Without the header the session is derived from the conversation, as before.
    status, headers, _ = raw_request(
        proxy,
        "POST",
        "/v1/chat/completions",
        body=json.dumps({"model": MODEL, "messages": long_history(1)}).encode(),
        headers={"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"},
    )
    assert status == 200 and headers["x-summarizer-session"]


# -- item 18a: a proxy whose upstream leads back to itself ---------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "0.0.0.0"])
def test_a_proxy_whose_upstream_is_itself_refuses_to_start(host: str) -> None:
    port = free_port()
    settings = Settings(port=port, upstream=f"http://{host}:{port}/v1", db=":memory:")
    proxy = ProxyServer(settings)
    with pytest.raises(ConfigurationError) as refused:
        proxy.start()
    assert "itself" in str(refused.value) and "--upstream" in str(refused.value)
    # Nothing is left listening on the port.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_serve_refuses_an_openai_base_url_that_is_itself() -> None:
    port = free_port()
    env = {**os.environ, "OPENAI_BASE_URL": f"http://localhost:{port}/v1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "context_summarizer.cli",
            "serve",
            "--port",
            str(port),
            "--db",
            ":memory:",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and "itself" in result.stderr


def _via_of(upstream: TestUpstream) -> str:
    """The ``Via`` header of the newest request the upstream received."""
    return upstream.requests[-1].headers["via"]


def test_every_forwarded_request_carries_the_proxys_hop_and_its_own_hop_is_refused(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    keyed = {"Authorization": f"Bearer {CLIENT_KEY}"}
    httpx2.get(f"{proxy.base_url}/models", headers=keyed)
    hop = _via_of(upstream)
    assert re.fullmatch(r"1\.1 summarizer-[0-9a-f]{16}", hop), hop
    # Chat, the summary call of a compaction, and pass-through all carry it, after the client's.
    openai.OpenAI(
        base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0
    ).chat.completions.create(
        model=MODEL, messages=long_history(7), tools=TOOLS, extra_headers={"Via": "1.0 corp-gw"}
    )
    kinds = {
        ("summary" if r.is_summary else r.path): r.headers.get("via") for r in upstream.requests
    }
    assert kinds == {
        "/v1/models": hop,
        "summary": f"1.0 corp-gw, {hop}",
        "/v1/chat/completions": f"1.0 corp-gw, {hop}",
    }
    before = len(upstream.requests)
    chat = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    for method, target, body in [
        ("GET", "/v1/models", None),
        ("POST", "/v1/chat/completions", chat),
        ("GET", "/v1/summarizer/sessions/x", None),
    ]:
        for via in (
            hop,
            f"1.0 corp-gw, {hop}",
            hop.upper().replace("1.1 SUMMARIZER", "1.1 summarizer"),
        ):
            status, _, content = raw_request(
                proxy, method, target, body=body, headers={**keyed, "Via": via}
            )
            assert status == 508, (target, via)
            assert_openai_error(content, code="loop_detected")
    assert len(upstream.requests) == before
    # Another proxy's hop is not a loop.
    assert (
        raw_request(proxy, "GET", "/v1/models", headers={**keyed, "Via": "1.1 summarizer-00"})[0]
        == 200
    )


def test_two_proxies_in_a_ring_answer_508_instead_of_forwarding_forever(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    second_port = free_port()
    first = start_proxy(upstream=f"http://127.0.0.1:{second_port}/v1")
    second = start_proxy(upstream=first.base_url, port=second_port, db=":memory:")
    answer = httpx2.get(
        f"{second.base_url}/models", headers={"Authorization": "Bearer k"}, timeout=30
    )
    assert answer.status_code == 508
    assert answer.json()["error"]["code"] == "loop_detected"
    assert upstream.requests == []


def test_a_chain_of_two_distinct_proxies_is_not_a_loop(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    inner = start_proxy()
    outer = start_proxy(upstream=inner.base_url, db=":memory:")
    answer = httpx2.get(f"{outer.base_url}/models", headers={"Authorization": "Bearer k"})
    assert answer.status_code == 200
    hops = _via_of(upstream).split(", ")
    assert len(hops) == 2 and hops[0] != hops[1]
