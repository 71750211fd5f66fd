"""The test upstream, driven over real sockets by the real openai SDK (no mocks)."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from context_summarizer.loaders.tokenizers import load_encoding
from context_summarizer.testing import (
    Fault,
    PromptTokenCounter,
    Reply,
    RoutingResponder,
    ScriptedToolAgent,
    TestUpstream,
    ToolCallSpec,
    echo_responder,
    summary_responder,
)

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the workspace.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
OTHER_TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "run_shell",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


@pytest.fixture
def up() -> Iterator[TestUpstream]:
    with TestUpstream() as upstream:
        yield upstream


def client_for(upstream: TestUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=upstream.base_url, api_key="test", max_retries=0)


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def tokens(text: str) -> int:
    return len(load_encoding("o200k_base").encode_ordinary(text))


def long_text(seed: str, n_tokens: int) -> str:
    """Text of exactly ``n_tokens`` o200k_base tokens, distinct per ``seed``."""
    encoding = load_encoding("o200k_base")
    words = " ".join(f"{seed}{i} item" for i in range(n_tokens))
    return encoding.decode(encoding.encode_ordinary(words)[:n_tokens])


def expected_cached(prefix: int) -> int:
    return 0 if prefix < 1024 else 1024 + 128 * ((prefix - 1024) // 128)


# --- chat completions ---------------------------------------------------------------------------


def test_non_streaming_text_reply_parses_in_sdk(up: TestUpstream) -> None:
    client = client_for(up)
    result = client.chat.completions.create(model="gpt-test", messages=[user("hello")])
    assert result.object == "chat.completion"
    assert result.model == "gpt-test"
    choice = result.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == "ok"
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert result.usage is not None
    # 4 per message + role + content, plus 3 priming the reply.
    assert result.usage.prompt_tokens == 4 + tokens("user") + tokens("hello") + 3
    assert result.usage.completion_tokens == tokens("ok")
    assert result.usage.total_tokens == result.usage.prompt_tokens + tokens("ok")
    assert result.usage.prompt_tokens_details is not None
    assert result.usage.prompt_tokens_details.cached_tokens == 0


def test_parallel_tool_calls_non_streaming(up: TestUpstream) -> None:
    up.enqueue(
        Reply(
            content="Reading both.",
            tool_calls=[
                ToolCallSpec(name="read_file", arguments={"path": "src/app.py"}),
                ToolCallSpec(name="read_file", arguments='{"path": "README.md"}', id="call_x"),
            ],
        )
    )
    result = client_for(up).chat.completions.create(
        model="gpt-test",
        messages=[user("read")],
        tools=TOOLS,
    )
    choice = result.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Reading both."
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 2
    first, second = calls
    assert first.type == "function" and second.type == "function"
    assert first.id.startswith("call_") and second.id == "call_x"
    assert first.function.name == "read_file"
    assert json.loads(first.function.arguments) == {"path": "src/app.py"}
    assert second.function.arguments == '{"path": "README.md"}'


def test_streaming_content_and_usage_with_include_usage(up: TestUpstream) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    up.enqueue(text)
    stream = client_for(up).chat.completions.create(
        model="gpt-test",
        messages=[user("go")],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    pieces = [c.choices[0].delta.content or "" for c in chunks if c.choices]
    assert "".join(pieces) == text
    assert sum(1 for piece in pieces if piece) > 1  # delivered in several pieces
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and all(f is None for f in finishes[:-1])
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert last.usage.prompt_tokens == 4 + tokens("user") + tokens("go") + 3
    assert last.usage.completion_tokens == tokens(text)
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_without_include_usage_has_no_usage(up: TestUpstream) -> None:
    stream = client_for(up).chat.completions.create(
        model="gpt-test", messages=[user("go")], stream=True
    )
    chunks = list(stream)
    assert all(c.usage is None for c in chunks)
    assert all(c.choices for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "ok"


def test_streaming_parallel_tool_calls_assemble(up: TestUpstream) -> None:
    up.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec(name="read_file", arguments={"path": "a/b.py", "lines": [1, 20]}),
                ToolCallSpec(name="run_shell", arguments={"cmd": "pytest -q tests"}),
            ]
        )
    )
    stream = client_for(up).chat.completions.create(
        model="gpt-test", messages=[user("go")], stream=True
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in stream:
        delta = chunk.choices[0].delta
        assert delta.content in (None, "")
        for call in delta.tool_calls or []:
            entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] += call.id or ""
            if call.function is not None:
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls"
    assert sorted(calls) == [0, 1]
    assert calls[0]["name"] == "read_file" and calls[1]["name"] == "run_shell"
    assert json.loads(calls[0]["arguments"]) == {"path": "a/b.py", "lines": [1, 20]}
    assert json.loads(calls[1]["arguments"]) == {"cmd": "pytest -q tests"}
    assert calls[0]["id"].startswith("call_") and calls[0]["id"] != calls[1]["id"]


def test_async_client_non_streaming_streaming_and_concurrent(up: TestUpstream) -> None:
    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=up.base_url, api_key="test", max_retries=0)
        try:
            up.enqueue("first")
            result = await client.chat.completions.create(model="m", messages=[user("a")])
            assert result.choices[0].message.content == "first"
            up.enqueue(Reply.call("read_file", {"path": "x.py"}))
            stream = await client.chat.completions.create(
                model="m",
                messages=[user("b")],
                stream=True,
                stream_options={"include_usage": True},
            )
            names: list[str] = []
            usage_seen = False
            async for chunk in stream:
                for choice in chunk.choices:
                    for call in choice.delta.tool_calls or []:
                        if call.function is not None and call.function.name:
                            names.append(call.function.name)
                usage_seen = usage_seen or chunk.usage is not None
            assert names == ["read_file"] and usage_seen
            results = await asyncio.gather(
                *(
                    client.chat.completions.create(model="m", messages=[user(f"q{i}")])
                    for i in range(8)
                )
            )
            assert [r.choices[0].message.content for r in results] == ["ok"] * 8
        finally:
            await client.close()

    asyncio.run(main())
    assert len(up.requests) == 10


def test_max_completion_tokens_truncates_with_length(up: TestUpstream) -> None:
    text = "one two three four five six seven eight nine ten eleven twelve"
    encoding = load_encoding("o200k_base")
    up.enqueue(text, Reply(content=text, tool_calls=[ToolCallSpec(name="read_file")]), text)
    client = client_for(up)
    result = client.chat.completions.create(
        model="m", messages=[user("count")], max_completion_tokens=5
    )
    assert result.choices[0].finish_reason == "length"
    assert result.choices[0].message.content == encoding.decode(encoding.encode(text)[:5])
    assert result.usage is not None and result.usage.completion_tokens == 5
    # The legacy max_tokens is honoured too; a truncated reply loses its tool calls.
    result = client.chat.completions.create(model="m", messages=[user("count")], max_tokens=3)
    assert result.choices[0].finish_reason == "length"
    assert result.choices[0].message.tool_calls is None
    stream = client.chat.completions.create(
        model="m", messages=[user("count")], max_completion_tokens=4, stream=True
    )
    chunks = list(stream)
    assert chunks[-1].choices[0].finish_reason == "length"
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert content == encoding.decode(encoding.encode(text)[:4])


# --- token and cache accounting -----------------------------------------------------------------


def test_prompt_token_rendering() -> None:
    counter = PromptTokenCounter()
    body: dict[str, Any] = {
        "model": "m",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "name": "ann",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:,"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path":"a.py"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "print(1)"},
        ],
    }
    tools_json = json.dumps(TOOLS, sort_keys=True, separators=(",", ":"))
    expected = (
        tokens(tools_json)
        + (4 + tokens("system") + tokens("Be brief."))
        + (4 + tokens("user") + tokens("look") + 85 + tokens("ann"))
        + (4 + tokens("assistant") + tokens("read_file") + tokens('{"path":"a.py"}'))
        + (4 + tokens("tool") + tokens("print(1)") + tokens("call_1"))
        + 3
    )
    assert counter.prompt(body) == expected


def test_cached_tokens_follow_prefix_with_128_rounding(up: TestUpstream) -> None:
    client = client_for(up)
    conversation = [
        {"role": "system", "content": long_text("sys", 900)},
        user(long_text("task", 1100)),
    ]

    def usage(messages: list[Any], **kwargs: Any) -> tuple[int, int]:
        result = client.chat.completions.create(model="m", messages=messages, **kwargs)
        assert result.usage is not None and result.usage.prompt_tokens_details is not None
        cached = result.usage.prompt_tokens_details.cached_tokens
        assert cached is not None
        return result.usage.prompt_tokens, cached

    prompt, cached = usage(conversation)
    assert prompt > 2000 and cached == 0  # cold cache
    prompt_again, cached = usage(conversation)
    assert prompt_again == prompt
    assert cached == expected_cached(prompt - 3)  # every message matches; priming is not cached
    assert cached % 128 == 0 and 1024 <= cached <= prompt

    extended = [*conversation, {"role": "assistant", "content": "ok"}, user("continue please")]
    prompt_ext, cached = usage(extended)
    assert prompt_ext > prompt
    assert cached == expected_cached(prompt - 3)  # the shared two-message prefix
    assert up.requests[-1].cached_tokens == cached

    # A different tools list, or another model, is another cache namespace.
    _, cached = usage(extended, tools=TOOLS)
    assert cached == 0
    _, cached = usage(extended, tools=OTHER_TOOLS)
    assert cached == 0
    prompt_tools, cached = usage(extended, tools=TOOLS)
    assert cached == expected_cached(prompt_tools - 3)
    result = client.chat.completions.create(model="other-model", messages=extended)
    assert result.usage is not None and result.usage.prompt_tokens_details is not None
    assert result.usage.prompt_tokens_details.cached_tokens == 0

    up.reset_cache()
    _, cached = usage(extended)
    assert cached == 0


def test_short_conversation_never_cached(up: TestUpstream) -> None:
    client = client_for(up)
    for _ in range(3):
        result = client.chat.completions.create(model="m", messages=[user("short")])
        assert result.usage is not None and result.usage.prompt_tokens_details is not None
        assert result.usage.prompt_tokens_details.cached_tokens == 0


def test_streaming_usage_reports_cached_tokens(up: TestUpstream) -> None:
    client = client_for(up)
    messages = [user(long_text("s", 1500))]
    client.chat.completions.create(model="m", messages=messages)
    stream = client.chat.completions.create(
        model="m",
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
    )
    usage = next(c.usage for c in stream if c.usage is not None)
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == expected_cached(usage.prompt_tokens - 3)


def test_context_length_exceeded() -> None:
    with TestUpstream(context_window=200) as small:
        client = client_for(small)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="m", messages=[user(long_text("x", 300))])
        error = caught.value
        assert error.status_code == 400
        assert error.code == "context_length_exceeded"
        assert error.param == "messages"
        assert isinstance(error.body, dict) and error.body["type"] == "invalid_request_error"
        assert "maximum context length is 200 tokens" in error.body["message"]
        # Fits alone, but not with the requested output.
        fits = [user(long_text("y", 100))]
        client.chat.completions.create(model="m", messages=fits)
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model="m",
                messages=fits,
                max_completion_tokens=150,
            )
        assert caught.value.code == "context_length_exceeded"
        assert [r.status for r in small.requests] == [400, 200, 400]


# --- faults -------------------------------------------------------------------------------------


def test_status_fault_500(up: TestUpstream) -> None:
    up.inject(Fault(kind="status"))
    client = client_for(up)
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m", messages=[user("hi")])
    assert caught.value.status_code == 500
    assert isinstance(caught.value.body, dict) and caught.value.body["type"] == "server_error"
    # Consumed: the next request succeeds.
    assert client.chat.completions.create(model="m", messages=[user("hi")]).choices
    assert [r.status for r in up.requests] == [500, 200]


def test_status_fault_with_custom_body(up: TestUpstream) -> None:
    body = {"error": {"message": "nope", "type": "invalid_request_error", "code": "custom"}}
    up.inject(Fault(kind="status", status=400, body=body))
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(up).chat.completions.create(model="m", messages=[user("hi")])
    assert caught.value.code == "custom"


def test_rate_limit_fault_sets_retry_after(up: TestUpstream) -> None:
    up.inject(Fault(kind="rate_limit", retry_after=2))
    with pytest.raises(openai.RateLimitError) as caught:
        client_for(up).chat.completions.create(model="m", messages=[user("hi")])
    error = caught.value
    assert error.status_code == 429
    assert error.code == "rate_limit_exceeded"
    assert error.response.headers["retry-after"] == "2"
    assert error.response.headers["retry-after-ms"] == "2000"


def test_delay_fault_delays_then_answers(up: TestUpstream) -> None:
    up.inject(Fault(kind="delay", seconds=0.3))
    start = time.monotonic()
    result = client_for(up).chat.completions.create(model="m", messages=[user("hi")])
    assert time.monotonic() - start >= 0.3
    assert result.choices[0].message.content == "ok"


def test_drop_fault_raises_connection_error(up: TestUpstream) -> None:
    up.inject(Fault(kind="drop"))
    client = client_for(up)
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=[user("hi")])
    assert up.requests[-1].status is None and up.requests[-1].fault == "drop"
    assert up.requests[-1].body["messages"] == [user("hi")]
    assert client.chat.completions.create(model="m", messages=[user("hi")]).choices


def test_fault_match_summary_skips_agent_requests(up: TestUpstream) -> None:
    up.inject(Fault(kind="status", status=503, match="summary"))
    client = client_for(up)
    client.chat.completions.create(model="m", messages=[user("agent turn")])
    assert up.pending_faults == 1
    with pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="m",
            messages=[user("agent turn"), user("Summarize.")],
            tools=TOOLS,
            tool_choice="none",
        )
    assert caught.value.status_code == 503
    assert up.pending_faults == 0


def test_responder_exception_is_a_500(up: TestUpstream) -> None:
    def broken(body: dict[str, Any]) -> Reply:
        raise RuntimeError("boom")

    up.responder = broken
    with pytest.raises(openai.InternalServerError, match="boom"):
        client_for(up).chat.completions.create(model="m", messages=[user("hi")])


# --- the request log and the other endpoints ---------------------------------------------------


def test_request_log_records_bodies_and_headers(up: TestUpstream) -> None:
    client = client_for(up)
    client.chat.completions.create(model="m", messages=[user("first")], temperature=0)
    up.enqueue("scripted")
    client.chat.completions.create(model="m", messages=[user("second")])
    records = up.requests
    assert [r.path for r in records] == ["/v1/chat/completions"] * 2
    assert records[0].method == "POST" and records[0].status == 200
    assert records[0].body == {"model": "m", "messages": [user("first")], "temperature": 0}
    assert records[0].headers["authorization"] == "Bearer test"
    assert records[0].headers["content-type"] == "application/json"
    assert records[0].prompt_tokens == 4 + tokens("user") + tokens("first") + 3
    assert records[0].cached_tokens == 0
    assert records[0].time <= records[1].time
    assert records[1].completion_tokens == tokens("scripted")
    up.clear_log()
    assert up.requests == []


def test_models_embeddings_and_unknown_paths(up: TestUpstream) -> None:
    client = client_for(up)
    assert [m.id for m in client.models.list()] == ["test-model"]
    assert client.models.retrieve("test-model").id == "test-model"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")
    first = client.embeddings.create(model="emb", input=["alpha", "beta"])
    again = client.embeddings.create(model="emb", input="alpha", encoding_format="float")
    assert len(first.data) == 2 and len(first.data[0].embedding) == 64
    assert first.data[0].embedding == pytest.approx(again.data[0].embedding, abs=1e-6)
    assert first.data[0].embedding != first.data[1].embedding
    assert first.usage.prompt_tokens == tokens("alpha") + tokens("beta")
    sized = client.embeddings.create(model="emb", input="x", dimensions=8)
    assert len(sized.data[0].embedding) == 8
    with pytest.raises(openai.NotFoundError) as caught:
        client.completions.create(model="m", prompt="hi")
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == "Invalid URL (POST /v1/completions)"


def raw_request(
    connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[http.client.HTTPResponse, bytes]:
    headers = {"Content-Type": "application/json"}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    return response, response.read()


def test_bad_requests_get_openai_error_bodies(up: TestUpstream) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", up.port, timeout=5)
    try:
        response, data = raw_request(connection, "POST", "/v1/chat/completions", b"{not json")
        assert response.status == 400
        assert json.loads(data)["error"]["type"] == "invalid_request_error"
        response, data = raw_request(
            connection, "POST", "/v1/chat/completions", json.dumps({"model": "m"}).encode()
        )
        assert response.status == 400 and json.loads(data)["error"]["param"] == "messages"
        payload = json.dumps({"model": "m", "messages": "hi"}).encode()
        response, data = raw_request(connection, "POST", "/v1/chat/completions", payload)
        assert response.status == 400 and json.loads(data)["error"]["param"] == "messages"
        payload = json.dumps(
            {"model": "m", "messages": [{"role": "tool", "content": "x"}]}
        ).encode()
        response, data = raw_request(connection, "POST", "/v1/chat/completions", payload)
        assert json.loads(data)["error"]["param"] == "messages[0].tool_call_id"
        response, data = raw_request(connection, "GET", "/elsewhere")
        assert response.status == 404
        assert json.loads(data)["error"]["message"] == "Invalid URL (GET /elsewhere)"
    finally:
        connection.close()
    assert [r.status for r in up.requests] == [400, 400, 400, 400, 404]


def test_keep_alive_and_chunked_sse_on_one_connection(up: TestUpstream) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", up.port, timeout=5)
    try:
        body = {"model": "m", "messages": [user("hi")], "stream": True}
        response, data = raw_request(
            connection, "POST", "/v1/chat/completions", json.dumps(body).encode()
        )
        assert response.status == 200
        assert response.getheader("Transfer-Encoding") == "chunked"
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        events = [e for e in data.decode().split("\n\n") if e]
        assert all(e.startswith("data: ") for e in events)
        assert events[-1] == "data: [DONE]"
        first_socket = connection.sock
        body["stream"] = False
        response, data = raw_request(
            connection, "POST", "/v1/chat/completions", json.dumps(body).encode()
        )
        assert response.status == 200
        assert int(response.getheader("Content-Length", "0")) == len(data)
        assert json.loads(data)["choices"][0]["message"]["content"] == "ok"
        assert connection.sock is first_socket  # the same TCP connection served both
    finally:
        connection.close()


# --- responders ---------------------------------------------------------------------------------


def summary_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a coding agent."},
        user(
            "Fix the failing date parser in the billing service.\nNOTE: the customer id is C-4411"
        ),
        {
            "role": "assistant",
            "content": "Looking at the parser.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": json.dumps({"path": "billing/dates.py"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "def parse(s): ...\nNOTE: dates.py must stay Python 3.9 compatible",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {
                        "name": "run_shell",
                        "arguments": json.dumps({"cmd": "pytest tests/test_dates.py -q"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": "FAILED tests/test_dates.py::test_iso - ValueError: bad month\n1 failed",
        },
        {
            "role": "assistant",
            "content": "Decision: use datetime.fromisoformat instead of the regex.\n"
            "TODO: add a test for leap years",
        },
    ]


def test_summary_responder_through_the_sdk(up: TestUpstream) -> None:
    up.responder = RoutingResponder(agent=echo_responder)
    client = client_for(up)
    messages = [
        *summary_conversation(),
        user("Summarize the conversation so far. List errors, decisions and TODO items."),
    ]
    result = client.chat.completions.create(
        model="m",
        messages=messages,
        tools=TOOLS,
        tool_choice="none",
    )
    summary = result.choices[0].message.content
    assert summary is not None
    assert summary.startswith(
        "## Task and constraints\nFix the failing date parser in the billing service."
    )
    assert "NOTE: the customer id is C-4411" in summary
    assert "NOTE: dates.py must stay Python 3.9 compatible" in summary
    for heading in (
        "## Current state",
        "## Files and identifiers",
        "## Decisions",
        "## Errors and fixes",
        "## Open work and next step",
    ):
        assert heading in summary
    assert "- billing/dates.py\n- tests/test_dates.py" in summary
    assert "Decision: use datetime.fromisoformat instead of the regex." in summary
    assert "FAILED tests/test_dates.py::test_iso - ValueError: bad month" in summary
    assert "- TODO: add a test for leap years" in summary
    assert "List errors" not in summary  # the instruction itself is not summarized
    # An agent request through the same router is answered by the agent responder.
    agent = client.chat.completions.create(model="m", messages=[user("hi")])
    assert agent.choices[0].message.content == "ok"


def test_summary_responder_is_bounded_and_keeps_notes_across_summaries() -> None:
    first = summary_responder({"messages": [*summary_conversation(), user("Summarize.")]})
    assert first.content is not None
    # Summarizing a conversation that starts from the earlier summary keeps task and notes.
    second = summary_responder(
        {
            "messages": [
                user(first.content),
                {"role": "assistant", "content": "Continuing.\nNOTE: deploy on Friday"},
                user("Summarize."),
            ]
        }
    )
    assert second.content is not None
    assert "Fix the failing date parser" in second.content.split("## Notes")[0]
    assert "NOTE: the customer id is C-4411" in second.content
    assert "NOTE: deploy on Friday" in second.content
    strict = summary_responder(
        {
            "messages": [
                *summary_conversation(),
                user(
                    "Write it again. Keep it under 120 words. These must be mentioned: "
                    "billing/dates.py; compute_total; C-9"
                ),
            ]
        }
    )
    assert strict.content is not None and len(strict.content.split()) <= 120
    assert "- compute_total\n- C-9" in strict.content
    assert strict.content.count("billing/dates.py") == 1
    huge = [user("Do it."), *({"role": "assistant", "content": "x " * 3000} for _ in range(5))]
    huge += [
        {"role": "tool", "tool_call_id": "c", "content": f"Error {i} " * 80} for i in range(20)
    ]
    bounded = summary_responder({"messages": [*huge, user("Summarize.")]})
    assert bounded.content is not None and tokens(bounded.content) <= 1500


def test_scripted_tool_agent_walks_its_steps(up: TestUpstream) -> None:
    agent = ScriptedToolAgent(
        [
            ("read_file", {"path": "a.py"}),
            [
                ("read_file", {"path": "b.py"}),
                ToolCallSpec(name="run_shell", arguments={"cmd": "ls"}),
            ],
            "All fixed.",
        ]
    )
    up.responder = agent
    client = client_for(up)
    messages: list[Any] = [user("Fix it.\nNOTE: keep it small")]
    seen: list[list[str]] = []
    for turn in range(5):
        result = client.chat.completions.create(
            model="m",
            messages=messages,
            tools=TOOLS,
        )
        message = result.choices[0].message
        calls = message.tool_calls or []
        names = [c.function.name for c in calls if c.type == "function"]
        seen.append(names or [message.content or ""])
        messages.append(message.model_dump(exclude_none=True))
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "result"})
        if turn == 1:  # a summary request in the middle consumes no step
            summary = client.chat.completions.create(
                model="m",
                messages=[*messages, user("Summarize.")],
                tools=TOOLS,
                tool_choice="none",
            )
            assert "NOTE: keep it small" in (summary.choices[0].message.content or "")
    assert seen == [
        ["read_file"],
        ["read_file", "run_shell"],
        ["All fixed."],
        ["done"],
        ["done"],
    ]
    assert agent.agent_requests == 5 and agent.summary_requests == 1 and agent.finished
    ids = [c["id"] for m in messages for c in m.get("tool_calls", [])]
    assert len(ids) == len(set(ids)) == 3


# --- lifecycle ----------------------------------------------------------------------------------


def test_stop_releases_the_port() -> None:
    upstream = TestUpstream().start()
    port = upstream.port
    assert upstream.base_url == f"http://127.0.0.1:{port}/v1"
    client = client_for(upstream)
    client.chat.completions.create(model="m", messages=[user("hi")])  # leaves a kept-alive conn
    upstream.stop()
    upstream.stop()  # idempotent
    assert not upstream.running
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=[user("hi")])
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))  # fails while anything still listens there
        probe.listen()
    finally:
        probe.close()
    with TestUpstream(port=port) as again:
        assert again.port == port
        assert client_for(again).chat.completions.create(model="m", messages=[user("hi")]).choices


def test_max_log_keeps_only_the_newest_requests() -> None:
    with TestUpstream(responder=lambda body: Reply(content="ok"), max_log=2) as upstream:
        client = openai.OpenAI(base_url=upstream.base_url, api_key="k")
        for word in ("one", "two", "three"):
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": word}]
            )
        logged = [record.messages[0]["content"] for record in upstream.requests]
    assert logged == ["two", "three"]


def test_summary_responder_summarizes_only_after_a_quoted_message() -> None:
    from context_summarizer.loaders.prompts import render_prompt
    from context_summarizer.testing import summary_responder

    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "Fix src/old.py first."},
        {"role": "assistant", "content": "Edited src/old.py: NOTE: old part done"},
        {"role": "user", "content": "Now also update CHANGELOG.md please."},
        {"role": "assistant", "content": "Updating. NOTE: changelog has a 2.1 section"},
    ]
    instruction = render_prompt("self_summary_since", anchor="Now also update CHANGELOG.md please.")
    reply = summary_responder({"messages": [*messages, {"role": "user", "content": instruction}]})
    assert "changelog has a 2.1 section" in reply.content
    assert "old part done" not in reply.content
    assert "Now also update CHANGELOG.md please." in reply.content.split("## Notes")[0]
