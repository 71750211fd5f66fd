"""The bad-input table: each malformed or hostile request gets its status and an OpenAI-style body.

The real proxy on 127.0.0.1 in front of the test upstream. Requests the proxy can serve (a lone
surrogate in a string) are served; the others get a 4xx naming what is wrong, never a 500; and a
huge body is processed off the event loop, so ``/healthz`` keeps answering meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.core.checkpoints import Checkpoint
from context_summarizer.core.messages import canonical_json, message_digest
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.library.manager import ContextManager
from context_summarizer.loaders.tokenizers import make_counter
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.body import NestingTooDeep, outgoing_body, parse_body
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .conftest import tool_turn
from .test_proxy import TOOLS, long_history

MODEL = "gpt-4o-mini"
KEY = "sk-test-badinput-0123456789abcdef"
BODY_READ_TIMEOUT = 0.5


@pytest.fixture(scope="module")
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(responder=RoutingResponder(echo_responder)) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(
    upstream: TestUpstream, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyServer]:
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        db=tmp_path_factory.mktemp("bad-input") / "checkpoints.db",
        context_window=8_000,
        max_summary_tokens=500,
        max_body_bytes=20_000_000,
        body_read_timeout=BODY_READ_TIMEOUT,
    )
    with ProxyServer(settings) as server:
        yield server


def _post(proxy: ProxyServer, content: bytes, path: str = "/chat/completions") -> httpx2.Response:
    return httpx2.post(
        proxy.base_url + path,
        content=content,
        headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
        timeout=60,
    )


def _chat(**fields: Any) -> bytes:
    return json.dumps({"model": MODEL, **fields}).encode()


USER = [{"role": "user", "content": "hi"}]


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# (id, body, status, error.type, error.code, error.param)
TABLE: list[tuple[str, bytes, int, str, str, str | None]] = [
    ("invalid-json", b"{not json", 400, "invalid_request_error", "invalid_json", None),
    ("not-utf8", b'{"model": "\xff"}', 400, "invalid_request_error", "invalid_json", None),
    ("not-an-object", b"[1, 2]", 400, "invalid_request_error", "invalid_type", None),
    (
        "no-model",
        json.dumps({"messages": USER}).encode(),
        400,
        "invalid_request_error",
        "invalid_type",
        "model",
    ),
    (
        "model-not-a-string",
        _chat(model=5, messages=USER),
        400,
        "invalid_request_error",
        "invalid_type",
        "model",
    ),
    (
        "messages-not-a-list",
        _chat(messages="hi"),
        400,
        "invalid_request_error",
        "invalid_type",
        "messages",
    ),
    (
        "message-without-role",
        _chat(messages=[{"content": "hi"}]),
        400,
        "invalid_request_error",
        "invalid_value",
        "messages[0].role",
    ),
    (
        "tool-message-without-id",
        _chat(messages=[{"role": "tool", "content": "x"}]),
        400,
        "invalid_request_error",
        "invalid_value",
        "messages[0].tool_call_id",
    ),
    (
        "nested-1000-levels",
        b'{"model": "gpt-4o-mini", "messages": [], "x": ' + _nested(1_000) + b"}",
        400,
        "invalid_request_error",
        "nested_too_deeply",
        None,
    ),
    (
        "nested-1500-levels",
        b'{"model": "gpt-4o-mini", "x": ' + _nested(1_500) + b', "messages": []}',
        400,
        "invalid_request_error",
        "nested_too_deeply",
        None,
    ),
    (
        "nested-inside-a-message",
        b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": [{"type": "text", '
        b'"text": "x", "data": ' + _nested(900) + b"}]}]}",
        400,
        "invalid_request_error",
        "nested_too_deeply",
        None,
    ),
    (
        "nested-and-a-lone-surrogate",
        b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "\\ud800"}], "x": '
        + _nested(990)
        + b"}",
        400,
        "invalid_request_error",
        "nested_too_deeply",
        None,
    ),
    (
        "over-max-body-bytes",
        _chat(messages=[{"role": "user", "content": "x" * 20_000_001}]),
        413,
        "invalid_request_error",
        "request_too_large",
        None,
    ),
]


def assert_openai_error(
    response: httpx2.Response, status: int, type: str, code: str, param: str | None
) -> None:
    assert response.status_code == status, response.text[:300]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and KEY not in response.text
    assert (error["type"], error["code"], error["param"]) == (type, code, param)


@pytest.mark.parametrize(
    ("body", "status", "type", "code", "param"),
    [row[1:] for row in TABLE],
    ids=[row[0] for row in TABLE],
)
def test_bad_input_gets_its_status_and_an_openai_style_error(
    proxy: ProxyServer,
    upstream: TestUpstream,
    body: bytes,
    status: int,
    type: str,
    code: str,
    param: str | None,
) -> None:
    upstream.clear_log()
    assert_openai_error(_post(proxy, body), status, type, code, param)
    assert upstream.requests == [], "nothing malformed reaches the upstream"


# -- item 5: a lone surrogate is served ---------------------------------------------------------

SURROGATE_BODY = (
    b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x\\ud800y"}], '
    b'"tools": [{"type": "function", "function": {"name": "f", "description": "\\udfff"}}]'
)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_lone_surrogate_is_served_and_reaches_the_upstream_as_sent(
    proxy: ProxyServer, upstream: TestUpstream, stream: bool
) -> None:
    upstream.clear_log()
    body = SURROGATE_BODY + (b', "stream": true}' if stream else b"}")
    response = _post(proxy, body)
    assert response.status_code == 200, response.text[:300]
    assert (b"data: [DONE]" in response.content) if stream else response.json()["choices"]
    (sent,) = upstream.requests
    assert sent.body["messages"][0]["content"] == "x\ud800y"
    assert sent.body["tools"][0]["function"]["description"] == "\udfff"


def test_a_conversation_with_lone_surrogates_is_compacted_and_served(
    proxy: ProxyServer, upstream: TestUpstream
) -> None:
    upstream.clear_log()
    # Long enough that its first request crosses the trigger and compacts at once (at 7 turns
    # it only began a draft ahead of time, which the next request adopted if it was done).
    messages = long_history(9, size=400, task="Fix the \ud83d bug.")  # a high half, alone
    # Facts with lone surrogates (a test id, a path) reach the ledger of the stored checkpoint.
    failure = "FAILED tests/test_\ud800x.py::test_total - ValueError at src/billing/m\udc00.py:12"
    messages[3]["content"] = failure + "\n" + messages[3]["content"]
    raw = json.dumps({"model": MODEL, "messages": messages, "tools": TOOLS}).encode()
    assert b"\\ud83d" in raw
    for stream in (False, True):
        body = raw[:-1] + (b', "stream": true}' if stream else b"}")
        response = _post(proxy, body)
        assert response.status_code == 200, response.text[:300]
        assert response.headers["x-summarizer-checkpoint"]
    summaries = [r for r in upstream.requests if r.is_summary]
    assert len(summaries) == 1 and summaries[0].status == 200
    agent = [r for r in upstream.requests if not r.is_summary]
    assert [r.status for r in agent] == [200, 200]
    assert agent[-1].body["messages"][1]["content"] == "Fix the \ud83d bug."
    assert agent[0].body["messages"][-1] == messages[-1]
    with sqlite3.connect(proxy.settings.db) as connection:  # type: ignore[arg-type]
        stored = [
            Checkpoint.model_validate_json(b)
            for (b,) in connection.execute("SELECT body FROM checkpoints")
        ]
    assert any("test_\ufffdx.py" in json.dumps(c.ledger, ensure_ascii=False) for c in stored)


def test_lone_surrogates_hash_stably_and_count_without_raising() -> None:
    message = {"role": "user", "content": "x\ud800y"}
    assert message_digest(message) == message_digest(dict(message))
    assert message_digest(message) != message_digest({"role": "user", "content": "x\udfffy"})
    assert message_digest({"role": "user", "content": "é"}) == message_digest(
        json.loads('{"role": "user", "content": "\\u00e9"}')
    )
    counter = make_counter(MODEL)
    assert counter.count_text("x\ud800y") == counter.count_text("x\ufffdy")
    assert counter.count_message(message) > 0
    assert counter.count_tools([{"type": "function", "function": {"name": "\ud800"}}]) > 0


def test_a_rewritten_body_with_a_lone_surrogate_is_valid_utf8() -> None:
    raw = (
        b'{"model": "m", "seed": 123456789012345678901234, '
        b'"messages": [{"role": "user", "content": "\\ud800"}]}'
    )
    body = parse_body(raw)
    out = outgoing_body(
        raw,
        body,
        messages=[{"role": "user", "content": "[summary] é"}, *body["messages"]],
        stream=True,
    )
    decoded = json.loads(out.decode("utf-8"))  # strict UTF-8
    assert decoded["messages"][1]["content"] == "\ud800"
    assert decoded["messages"][0]["content"] == "[summary] é"
    assert decoded["seed"] == 123456789012345678901234


# -- item 6: nesting is bounded before anything recurses ----------------------------------------


@pytest.mark.parametrize("depth", [300, 1_000, 1_025, 5_000])
def test_parse_body_refuses_deep_nesting_with_its_own_error(depth: int) -> None:
    with pytest.raises(NestingTooDeep):
        parse_body(b'{"x": ' + _nested(depth) + b"}")


def test_nesting_within_the_bound_is_parsed_hashed_and_rewritten() -> None:
    raw = (
        b'{"model": "m", "seed": 123456789012345678901234, "messages": [{"role": "user", '
        b'"content": [{"type": "text", "text": "t", "x": ' + _nested(100) + b"}]}]}"
    )
    body = parse_body(raw)
    message = body["messages"][0]
    assert canonical_json(message) and message_digest(message)
    out = outgoing_body(raw, body, messages=[message], stream=True)
    assert json.loads(out)["messages"] == [message]


# -- item 10: a huge body does not stall the event loop -----------------------------------------


def test_healthz_answers_within_100ms_while_a_16mb_body_is_processed(
    proxy: ProxyServer, upstream: TestUpstream
) -> None:
    words = "the invoice total was recomputed after the refund; "
    text = (words * (16_000_000 // len(words) + 1))[:16_000_000]
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": text}]}).encode()
    result: dict[str, httpx2.Response] = {}
    sender = threading.Thread(target=lambda: result.update(response=_post(proxy, body)))
    latencies: list[float] = []
    url = proxy.base_url.removesuffix("/v1") + "/healthz"
    with httpx2.Client(timeout=60) as client:
        client.get(url)  # the connection is open before the measurement
        sender.start()
        time.sleep(0.1)  # the upload is under way
        while sender.is_alive():
            started = time.perf_counter()
            assert client.get(url).status_code == 200
            latencies.append(time.perf_counter() - started)
            time.sleep(0.02)
    sender.join()
    assert max(latencies) < 0.1, [round(t * 1000) for t in latencies]
    assert len(latencies) >= 5, latencies
    response = result["response"]
    assert response.status_code in (200, 400), response.text[:300]
    if response.status_code == 400:
        assert response.json()["error"]["code"] == "context_length_exceeded"


# -- item 11: an upload cut short, or stalled ----------------------------------------------------


def _send_partial(proxy: ProxyServer, path: str, declared: int, sent: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=10)
    sock.sendall(
        (
            f"POST /v1{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {declared}\r\n\r\n"
        ).encode()
        + sent
    )
    return sock


def _metric(proxy: ProxyServer, route: str, status: str) -> float:
    text = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    for line in text.splitlines():
        labels = f'route="{route}"' in line and f'status="{status}"' in line
        if line.startswith("summarizer_requests_total{") and labels:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(
    ("path", "route"), [("/chat/completions", "chat"), ("/embeddings", "passthrough")]
)
def test_a_client_that_disconnects_mid_upload_is_logged_once_and_counted_as_499(
    proxy: ProxyServer, caplog: pytest.LogCaptureFixture, path: str, route: str
) -> None:
    caplog.set_level(logging.INFO)
    before = _metric(proxy, route, "499")
    _send_partial(proxy, path, 100_000, b'{"model": "gpt-4o-mini", "messages": [').close()
    deadline = time.monotonic() + 5
    while _metric(proxy, route, "499") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _metric(proxy, route, "499") == before + 1
    assert _metric(proxy, route, "500") == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert [r for r in caplog.records if "disconnected" in r.getMessage()]


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
def test_a_body_shorter_than_its_content_length_times_out_with_408(
    proxy: ProxyServer, upstream: TestUpstream, path: str
) -> None:
    upstream.clear_log()
    started = time.monotonic()
    with _send_partial(proxy, path, 1_000, b'{"model": ') as sock:
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    waited = time.monotonic() - started
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), head
    assert b"connection: close" in head.lower()
    error = json.loads(body)["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_timeout")
    assert BODY_READ_TIMEOUT <= waited < BODY_READ_TIMEOUT + 5
    if path == "/chat/completions":  # a pass-through upload streams on as it arrives
        assert upstream.requests == []


def test_the_body_read_timeout_is_a_setting(tmp_path: Path) -> None:
    assert Settings().body_read_timeout == 30.0
    assert Settings.from_env({"SUMMARIZER_BODY_READ_TIMEOUT": "2.5"}).body_read_timeout == 2.5
    assert Settings.from_env({}, body_read_timeout=4).body_read_timeout == 4


def test_the_openai_sdk_sees_an_error_for_a_refused_request(proxy: ProxyServer) -> None:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            extra_body={"deep": json.loads(_nested(500))},
        )
    assert caught.value.code == "nested_too_deeply"


def test_a_compaction_runs_off_the_event_loop() -> None:
    # 400 fresh tool outputs of 20 KB: hashing and counting them takes far longer than 100 ms.
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the build."}]
    for turn in range(400):
        messages.extend(tool_turn(f"call_{turn}", "read", "{}", f"line {turn} of output. " * 1_000))
    messages.append({"role": "user", "content": "Go on."})
    context = ContextManager(context_window=1_000_000)
    context.prepare(tool_turn("c", "read", "{}", "warm up"), model=MODEL)  # loads the encoding once

    async def summarize(call: SummarizeCall) -> SummaryOutcome:
        return SummaryOutcome(text="## Task\nFix the build.", finish_reason="stop")

    async def run() -> tuple[float, bool]:
        lags: list[float] = []
        done = asyncio.Event()

        async def tick() -> None:
            while not done.is_set():
                started = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - started - 0.01)

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0.05)
        result = await context.aprepare(messages, model=MODEL, summarizer=summarize)
        done.set()
        await ticker
        return max(lags), result.compacted

    worst, compacted = asyncio.run(run())
    assert compacted
    assert worst < 0.1, f"the event loop stalled {worst * 1000:.0f} ms"
