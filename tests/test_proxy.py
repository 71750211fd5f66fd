"""The proxy end to end: uvicorn on 127.0.0.1 in front of the test upstream, real openai clients."""

from __future__ import annotations

import asyncio
import json
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

from context_summarizer.cli.demo import run_coding_session
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import (
    Fault,
    Reply,
    RoutingResponder,
    ScriptedToolAgent,
    TestUpstream,
    ToolCallSpec,
    echo_responder,
    is_summary_request,
)
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory, message_from_stream

MODEL = "gpt-4o-mini"
KEY_A = "sk-test-alpha-0123456789abcdef"
KEY_B = "sk-test-bravo-0123456789abcdef"


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=RoutingResponder(echo_responder)) as server:
        yield server


def client(proxy: ProxyServer, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)


def long_history(
    turns: int, *, size: int = 900, task: str = "Fix the failing invoice test."
) -> list[dict[str, Any]]:
    """A conversation with ``turns`` tool exchanges of about ``2 * size`` tokens each."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": task},
    ]
    for turn in range(turns):
        call_id = f"call_{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"n": {turn}}}'},
                    }
                ],
            }
        )
        body = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        body += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": body})
    messages.append({"role": "user", "content": "Go on."})
    return messages


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
        },
    }
]


def chat_requests(upstream: TestUpstream, *, summary: bool | None = None) -> list[Any]:
    out = [r for r in upstream.requests if r.path.endswith("/chat/completions") and r.body]
    if summary is None:
        return out
    return [r for r in out if is_summary_request(r.body) == summary]


# -- the main job ---------------------------------------------------------------------------


def test_a_long_tool_session_through_the_proxy_compacts_and_stays_inside_the_window() -> None:
    stats = run_coding_session(turns=110, context_window=16_000, model=MODEL, via="proxy")
    assert stats.compactions >= 5
    # Each compaction is one summary request; a draft begun ahead of time near the end may
    # have sent its request before the session ended, its compaction never due.
    assert stats.compactions <= stats.summary_requests <= stats.compactions + 1
    assert stats.largest_prompt_tokens <= 16_000
    assert stats.append_only_pairs == stats.consecutive_pairs - stats.compaction_boundaries
    assert stats.summary_prefix_shared == stats.summary_requests
    assert stats.planted_lost == []
    assert stats.stored_checkpoints == stats.compactions


def test_a_conversation_arriving_over_the_window_gets_a_model_summary_not_a_fallback(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy()
    messages = long_history(16)  # about 27k tokens for a 16k window
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "true"
    summary_calls = chat_requests(upstream, summary=True)
    assert [r.status for r in summary_calls] == [200]
    assert summary_calls[0].prompt_tokens + 2_000 <= 16_000, "the summary request fits"
    assert chat_requests(upstream, summary=False)[-1].prompt_tokens <= 16_000
    session = raw.headers["x-summarizer-session"]
    found = client(proxy).get(f"/summarizer/sessions/{session}", cast_to=object)
    assert isinstance(found, dict)
    (checkpoint,) = found["checkpoints"]
    assert checkpoint["failure"] is None
    assert "could not summarize" not in checkpoint["summary"]


def test_plain_request_is_forwarded_byte_for_byte_with_summarizer_headers(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hello"}],
        temperature=0.25,
        extra_body={"vendor_field": {"nested": [1, 2.5, "é"]}, "seed": 12345678901234},
    )
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert int(raw.headers["x-summarizer-prompt-tokens"]) > 0
    assert raw.headers["x-summarizer-checkpoint"] == ""
    body = chat_requests(upstream)[-1].body
    assert body == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hello"}],
        "temperature": 0.25,
        "vendor_field": {"nested": [1, 2.5, "é"]},
        "seed": 12345678901234,
    }


def test_compaction_changes_only_messages_and_every_other_field_arrives_unchanged(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    messages = long_history(9)
    extra = {"vendor_field": {"keep": True}, "metadata": {"run": "r1"}}
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        tool_choice="auto",
        parallel_tool_calls=True,
        temperature=0,
        max_completion_tokens=500,
        extra_body=extra,
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "true"
    assert raw.headers["x-summarizer-checkpoint"]
    agent = chat_requests(upstream, summary=False)[-1].body
    assert agent["messages"] != messages
    assert agent["messages"][0] == messages[0] and agent["messages"][-1] == messages[-1]
    # The agent's tools as sent, and the recall tool after them (the request stands on a
    # compaction).
    tools = agent.pop("tools")
    assert tools[:-1] == TOOLS and tools[-1]["function"]["name"] == "recall"
    expected = {
        "model": MODEL,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "temperature": 0,
        "max_completion_tokens": 500,
        **extra,
    }
    assert {k: v for k, v in agent.items() if k != "messages"} == expected
    assert chat_requests(upstream)[-1].prompt_tokens <= 16_000


def test_streaming_through_the_proxy_with_and_without_include_usage(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    c = client(proxy)
    chunks = list(
        c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "stream please"}], stream=True
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text
    assert all(ch.usage is None for ch in chunks), "the usage chunk was not asked for"
    sent = chat_requests(upstream)[-1].body
    assert sent["stream_options"] == {"include_usage": True}

    chunks = list(
        c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "stream please"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0


def test_tool_calls_and_parallel_tool_calls_round_trip(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    upstream.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec(name="read_file", arguments={"n": 1}),
                ToolCallSpec(name="read_file", arguments={"n": 2}),
            ]
        )
    )
    c = client(proxy)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "read two files"}]
    reply = c.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    calls = reply.choices[0].message.tool_calls or []
    assert [call.function.name for call in calls] == ["read_file", "read_file"]
    messages.append(reply.choices[0].message.model_dump(exclude_none=True))
    for call in calls:
        messages.append({"role": "tool", "tool_call_id": call.id, "content": "contents"})
    upstream.enqueue(Reply(tool_calls=[ToolCallSpec(name="read_file", arguments={"n": 3})]))
    stream = c.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, stream=True)
    names = [
        tc.function.name
        for ch in stream
        if ch.choices
        for tc in ch.choices[0].delta.tool_calls or []
        if tc.function and tc.function.name
    ]
    assert names == ["read_file"]
    assert chat_requests(upstream)[-1].body["messages"] == messages


def test_async_client_and_async_streaming(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()

    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=proxy.base_url, api_key=KEY_A, max_retries=0) as c:
            plain = await c.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}]
            )
            stream = await c.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            text = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
            return plain.choices[0].message.content or "", text

    plain, streamed = asyncio.run(run())
    assert plain and streamed == plain


def test_a_restart_rewrites_the_same_conversation_to_the_same_upstream_messages(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    messages = long_history(7)
    first = start_proxy()
    client(first).chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    messages = [*messages, {"role": "assistant", "content": "Looking."}]
    messages.append({"role": "user", "content": "And the tests?"})
    client(first).chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    before = chat_requests(upstream, summary=False)[-1].body["messages"]
    first.stop()

    second = start_proxy()
    raw = client(second).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    raw.parse()
    after = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert after == before
    assert len(chat_requests(upstream, summary=True)) == 1, "no second summary after restart"


def test_two_credentials_never_see_each_others_sessions(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    messages = long_history(7)
    raw = client(proxy, KEY_A).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    raw.parse()
    session = raw.headers["x-summarizer-session"]
    checkpoint = raw.headers["x-summarizer-checkpoint"]
    assert checkpoint

    mine = httpx2.get(
        f"{proxy.base_url}/summarizer/sessions/{session}",
        headers={"Authorization": f"Bearer {KEY_A}"},
    )
    assert mine.status_code == 200
    stored = mine.json()["checkpoints"]
    assert [c["id"] for c in stored] == [checkpoint]
    assert stored[0]["summary"] and stored[0]["ledger"] and "score" in stored[0]
    (slot,) = stored[0]["slots"]
    assert slot["summary"] == stored[0]["summary"] and slot["end"] > slot["start"] >= 2
    assert "message" not in slot and "namespace" not in stored[0]

    theirs = httpx2.get(
        f"{proxy.base_url}/summarizer/sessions/{session}",
        headers={"Authorization": f"Bearer {KEY_B}"},
    )
    assert theirs.status_code == 404
    assert theirs.json()["error"]["code"] == "session_not_found"

    # The same conversation under another key finds none of A's checkpoints: it compacts anew.
    raw_b = client(proxy, KEY_B).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    raw_b.parse()
    assert raw_b.headers["x-summarizer-compacted"] == "true"
    assert raw_b.headers["x-summarizer-checkpoint"] not in ("", checkpoint)
    assert len(chat_requests(upstream, summary=True)) == 2


def test_an_upstream_cookie_never_reaches_another_clients_request(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    # OpenAI's edge sets cookies; the proxy's HTTP clients are shared by every client.
    upstream.response_headers["Set-Cookie"] = "__cf_bm=alpha-session; Path=/; HttpOnly"
    proxy = start_proxy()
    client(proxy, KEY_A).chat.completions.create(model=MODEL, messages=long_history(7))
    assert len(chat_requests(upstream, summary=True)) == 1  # a summary call went out too
    upstream.clear_log()
    client(proxy, KEY_B).chat.completions.create(model=MODEL, messages=long_history(1))
    client(proxy, KEY_B).chat.completions.create(model=MODEL, messages=long_history(7, task="b"))
    sent = chat_requests(upstream)
    assert len(chat_requests(upstream, summary=True)) == 1
    assert sent and all("cookie" not in request.headers for request in sent)


def test_concurrent_requests_of_one_session_summarize_once(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    upstream.inject(Fault(kind="delay", seconds=0.5, match="summary"))
    messages = long_history(7)
    results: list[str] = []
    errors: list[BaseException] = []

    def send() -> None:
        try:
            raw = client(proxy).chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, tools=TOOLS
            )
            raw.parse()
            results.append(raw.headers["x-summarizer-checkpoint"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(chat_requests(upstream, summary=True)) == 1
    assert len(set(results)) == 1 and results[0]


def test_fifty_concurrent_sessions_complete_without_error(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()

    async def session(index: int, c: openai.AsyncOpenAI) -> int:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": f"Task {index}: fix bug #{index}."},
        ]
        for turn in range(4):
            reply = await c.chat.completions.create(
                model=MODEL, messages=messages, stream=turn % 2 == 1
            )
            if turn % 2 == 1:
                text = "".join([ch.choices[0].delta.content or "" async for ch in reply])
            else:
                text = reply.choices[0].message.content or ""
            messages.append({"role": "assistant", "content": text})
            messages.append({"role": "user", "content": f"step {turn} " + "data " * 300})
        return len(messages)

    async def run() -> list[int]:
        async with openai.AsyncOpenAI(
            base_url=proxy.base_url, api_key=KEY_A, max_retries=0, timeout=60
        ) as c:
            return await asyncio.gather(*(session(i, c) for i in range(50)))

    lengths = asyncio.run(run())
    assert lengths == [10] * 50
    assert len(chat_requests(upstream)) == 200
    assert all(r.status == 200 for r in upstream.requests)


# -- streaming: relay without buffering, keepalives while compacting --------------------------


def _raw_stream(proxy: ProxyServer, body: dict[str, Any]) -> Iterator[tuple[float, bytes]]:
    """Send a request over a plain socket; yield (seconds since sent, bytes) as they arrive."""
    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {KEY_A}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode() + payload
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(request)
        while True:
            data = sock.recv(65536)
            if not data:
                return
            yield time.monotonic() - started, data


def test_stream_events_are_relayed_as_they_arrive_not_buffered(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    upstream.enqueue(Reply(content="one two three four five six seven eight", chunk_delay=0.4))
    arrivals: list[tuple[float, bytes]] = list(
        _raw_stream(
            proxy,
            {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True},
        )
    )
    first_data = next(t for t, data in arrivals if b"data: {" in data)
    last = arrivals[-1][0]
    # The upstream spends at least 4 x 0.4 s between its first and last chunk.
    assert last >= 1.5
    assert first_data < 0.4, f"first event after {first_data:.2f}s: the relay buffered"
    body = b"".join(data for _, data in arrivals)
    assert body.count(b"data: {") >= 5 and b"data: [DONE]" in body


def test_keepalive_comments_are_sent_while_a_compaction_holds_a_stream(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(keepalive_interval=0.2)
    upstream.inject(Fault(kind="delay", seconds=1.2, match="summary"))
    body = {"model": MODEL, "messages": long_history(7), "tools": TOOLS, "stream": True}
    arrivals = list(_raw_stream(proxy, body))
    text = b"".join(data for _, data in arrivals)
    head, _, rest = text.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0]
    assert b"x-summarizer-compacted: pending" in head.lower()
    keepalives = [t for t, data in arrivals if b": summarizer: compacting" in data]
    assert len(keepalives) >= 3
    assert keepalives[0] < 0.6
    assert b": summarizer: compacted=true checkpoint=" in rest
    assert rest.index(b": summarizer: compacting") < rest.index(b"data: {")
    assert b"data: [DONE]" in rest

    # The openai SDK reads such a stream normally (comments are ignored).
    upstream.inject(Fault(kind="delay", seconds=0.6, match="summary"))
    chunks = list(
        client(proxy).chat.completions.create(
            model=MODEL,
            messages=long_history(7, task="Another task entirely."),
            tools=TOOLS,
            stream=True,
        )
    )
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert len(chat_requests(upstream, summary=True)) == 2


# -- context_length_exceeded ------------------------------------------------------------------


def test_context_length_exceeded_compacts_harder_and_retries_once(
    tmp_path: Path,
) -> None:
    # The proxy believes the window is 32k; the upstream enforces 12k.
    with TestUpstream(context_window=12_000) as small:
        settings = Settings(
            upstream=small.base_url, port=0, db=tmp_path / "c.db", context_window=32_000
        )
        with ProxyServer(settings) as proxy:
            messages = long_history(9)
            raw = client(proxy).chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, tools=TOOLS
            )
            assert raw.parse().choices[0].message.content
            agent = chat_requests(small, summary=False)
            assert [r.status for r in agent] == [400, 200]
            assert raw.headers["x-summarizer-compacted"] == "true"


def test_context_length_exceeded_is_passed_through_when_the_retry_fails_too(
    tmp_path: Path,
) -> None:
    with TestUpstream(context_window=12_000) as small:
        settings = Settings(
            upstream=small.base_url, port=0, db=tmp_path / "c.db", context_window=32_000
        )
        with ProxyServer(settings) as proxy:
            cle = {
                "error": {
                    "message": "This model's maximum context length is 12000 tokens.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            }
            small.inject(
                Fault(kind="status", status=400, body=cle, match="agent"),
                Fault(kind="status", status=400, body=cle, match="agent"),
            )
            with pytest.raises(openai.BadRequestError) as caught:
                client(proxy).chat.completions.create(
                    model=MODEL, messages=long_history(4), tools=TOOLS
                )
            assert caught.value.code == "context_length_exceeded"
            assert len(chat_requests(small, summary=False)) == 2, "one retry, never a loop"


# -- bad input and faults ---------------------------------------------------------------------


def _post(proxy: ProxyServer, content: bytes, **headers: str) -> httpx2.Response:
    return httpx2.post(
        f"{proxy.base_url}/chat/completions",
        content=content,
        headers={"Authorization": f"Bearer {KEY_A}", "Content-Type": "application/json", **headers},
        timeout=30,
    )


def _assert_error(response: httpx2.Response, status: int, param: str | None = None) -> None:
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["param"] == param
    assert KEY_A not in response.text


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (json.dumps({"model": MODEL, "messages": "hi"}).encode(), "messages"),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(), "model"),
        (
            json.dumps({"model": MODEL, "messages": [{"content": "hi"}]}).encode(),
            "messages[0].role",
        ),
        (
            json.dumps({"model": MODEL, "messages": [{"role": "tool", "content": "x"}]}).encode(),
            "messages[0].tool_call_id",
        ),
        (
            json.dumps(
                {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "tools": {}}
            ).encode(),
            "tools",
        ),
    ],
)
def test_malformed_requests_get_a_400_naming_the_field(
    upstream: TestUpstream, start_proxy: ProxyFactory, content: bytes, param: str | None
) -> None:
    proxy = start_proxy()
    _assert_error(_post(proxy, content), 400, param)
    assert chat_requests(upstream) == [], "nothing malformed reaches the upstream"


def test_a_body_over_the_limit_gets_413(upstream: TestUpstream, start_proxy: ProxyFactory) -> None:
    proxy = start_proxy(max_body_bytes=10_000)
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x" * 20_000}]})
    _assert_error(_post(proxy, body.encode()), 413)
    assert _post(proxy, b'{"model": "gpt-4o-mini", "messages": []}').status_code != 413


def test_an_unreachable_upstream_gets_502_and_the_server_keeps_serving(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    settings = Settings(upstream=f"http://127.0.0.1:{dead_port}/v1", port=0, db=tmp_path / "c.db")
    with ProxyServer(settings) as proxy:
        body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
        response = _post(proxy, body.encode())
        _assert_error(response, 502)
        assert response.json()["error"]["code"] == "upstream_unreachable"
        assert httpx2.get(proxy.base_url.replace("/v1", "/healthz")).status_code == 200


def test_an_upstream_that_does_not_answer_in_time_gets_504(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(upstream_timeout=0.3)
    upstream.inject(Fault(kind="delay", seconds=1.5))
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    response = _post(proxy, body.encode())
    _assert_error(response, 504)
    assert response.json()["error"]["code"] == "upstream_timeout"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("status", [429, 500, 503])
def test_upstream_errors_pass_through_with_status_and_body(
    upstream: TestUpstream, start_proxy: ProxyFactory, status: int, stream: bool
) -> None:
    proxy = start_proxy()
    body = {"error": {"message": f"boom {status}", "type": "x", "param": None, "code": "y"}}
    upstream.inject(Fault(kind="status", status=status, body=body, retry_after=2))
    request = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": stream}
    response = _post(proxy, json.dumps(request).encode())
    assert response.status_code == status
    assert response.json() == body
    assert response.headers.get("retry-after") == "2"


def test_a_failed_summary_never_leaves_a_half_written_checkpoint(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy()
    upstream.inject(*[Fault(kind="status", status=500, match="summary") for _ in range(8)])
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=long_history(7), tools=TOOLS
    )
    raw.parse()
    # Summaries failed: a mechanical fallback compaction, recorded as such, or nothing.
    with sqlite3.connect(tmp_path / "checkpoints.db") as db:
        rows = db.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    assert rows <= 1
    assert chat_requests(upstream, summary=False)[-1].prompt_tokens <= 16_000


# -- routes, metrics, secrets -----------------------------------------------------------------


def test_other_v1_routes_pass_through(upstream: TestUpstream, start_proxy: ProxyFactory) -> None:
    proxy = start_proxy()
    c = client(proxy)
    direct_models = openai.OpenAI(base_url=upstream.base_url, api_key="x").models.list()
    assert [m.id for m in c.models.list()] == [m.id for m in direct_models]
    proxied = [r for r in upstream.requests if r.path.endswith("/models")][-1]
    assert "transfer-encoding" not in proxied.headers, "a GET carries no body"
    embedding = c.embeddings.create(model="text-embedding-3-small", input="hello")
    assert embedding.data and embedding.data[0].embedding
    sent = [r for r in upstream.requests if r.path.endswith("/embeddings")][-1]
    assert sent.body == {
        "model": "text-embedding-3-small",
        "input": "hello",
        "encoding_format": "base64",
    }
    missing = httpx2.get(f"{proxy.base_url}/no/such/route")
    direct = httpx2.get(f"{upstream.base_url}/no/such/route")
    assert missing.status_code == direct.status_code
    assert missing.content == direct.content


def test_health_and_prometheus_metrics(upstream: TestUpstream, start_proxy: ProxyFactory) -> None:
    proxy = start_proxy()
    client(proxy).chat.completions.create(model=MODEL, messages=long_history(7), tools=TOOLS)
    root = proxy.base_url.removesuffix("/v1")
    assert httpx2.get(f"{root}/healthz").json() == {"status": "ok"}
    metrics = httpx2.get(f"{root}/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    for name in (
        'summarizer_requests_total{route="chat",status="200"} 1.0',
        'summarizer_compactions_total{outcome="summary",trigger="threshold"} 1.0',
        "summarizer_compaction_tokens_before_count 1.0",
        "summarizer_compaction_tokens_after_count 1.0",
        "summarizer_summary_latency_seconds_count 1.0",
        "summarizer_summary_score_count 1.0",
        'summarizer_proxy_overhead_seconds_count{stream="false"} 1.0',
    ):
        assert name in text, name
    assert KEY_A not in text


def test_unknown_models_are_forwarded_unmanaged_with_a_warning(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(context_window=None)
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="mystery-model-9", messages=[{"role": "user", "content": "hi"}]
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert "mystery-model-9" in raw.headers["x-summarizer-warning"]
    assert chat_requests(upstream)[-1].body["model"] == "mystery-model-9"
    # A model name that is not printable ASCII still gets a valid header.
    raw = client(proxy).chat.completions.with_raw_response.create(
        model="modèle-☃", messages=[{"role": "user", "content": "hi"}]
    )
    raw.parse()
    assert raw.headers["x-summarizer-warning"].isascii()
    assert chat_requests(upstream)[-1].body["model"] == "modèle-☃"


def test_upstream_key_replaces_the_client_credential_and_no_key_leaks(
    upstream: TestUpstream,
    start_proxy: ProxyFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    server_key = "sk-upstream-server-key-987654321"
    proxy = start_proxy(upstream_api_key=server_key)
    client(proxy).chat.completions.create(model=MODEL, messages=long_history(7), tools=TOOLS)
    for request in chat_requests(upstream):
        assert request.headers.get("authorization") == f"Bearer {server_key}"
    bad = _post(proxy, b"{oops")
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("checkpoints.db*"))
    metrics = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    for secret in (KEY_A, server_key):
        assert secret.encode() not in stored
        assert secret not in metrics
        assert secret not in bad.text
        assert secret not in caplog.text


def test_hop_by_hop_headers_are_not_forwarded(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "x"}]})
    _post(
        proxy,
        body.encode(),
        **{"Proxy-Authorization": "secret", "X-Custom": "kept", "X-Summarizer-Session": "mine"},
    )
    headers = chat_requests(upstream)[-1].headers
    assert "proxy-authorization" not in headers
    assert headers.get("x-custom") == "kept"
    assert "x-summarizer-session" not in headers


def test_the_session_header_names_a_session(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    c = client(proxy)
    raw = c.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=long_history(7),
        tools=TOOLS,
        extra_headers={"X-Summarizer-Session": "build-42"},
    )
    raw.parse()
    assert raw.headers["x-summarizer-session"] == "build-42"
    found = c.get("/summarizer/sessions/build-42", cast_to=object)
    assert isinstance(found, dict) and len(found["checkpoints"]) == 1


def test_scripted_agent_session_runs_through_streaming_too(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=30, seed=3)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=8_000)
    c = client(proxy)
    messages: list[dict[str, Any]] = [session.system, session.task]
    for turn in range(31):
        stream = c.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=session.tools,
            stream=True,
            max_completion_tokens=500,
        )
        message = message_from_stream(stream)
        messages.append(message)
        if "tool_calls" not in message:
            break
        for call in message["tool_calls"]:
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "content": session.execute(
                        turn, call["function"]["name"], call["function"]["arguments"]
                    ),
                }
            )
    requests = chat_requests(upstream)
    assert len(chat_requests(upstream, summary=True)) >= 2
    assert max(r.prompt_tokens or 0 for r in requests) <= 8_000
    assert all(r.status == 200 for r in requests)
