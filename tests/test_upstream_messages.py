"""The test upstream's Anthropic Messages API, over real sockets, through the real anthropic SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from context_summarizer.loaders.tokenizers import load_encoding
from context_summarizer.testing import (
    BreakpointCache,
    Fault,
    PromptTokenCounter,
    RecordedRequest,
    Reply,
    RoutingResponder,
    ScriptedToolAgent,
    TestUpstream,
    ToolCallSpec,
    chat_body_for,
    echo_responder,
    messages_prompt,
)

MODEL = "claude-test"
TOOLS: list[Any] = [
    {
        "name": "read_file",
        "description": "Read a file from the workspace.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]
EPHEMERAL: Any = {"type": "ephemeral"}


@pytest.fixture
def up() -> Iterator[TestUpstream]:
    with TestUpstream() as upstream:
        yield upstream


def client_for(upstream: TestUpstream) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=upstream.root_url, api_key="test", max_retries=0)


def tokens(text: str) -> int:
    return len(load_encoding("o200k_base").encode_ordinary(text))


def long_text(seed: str, n_tokens: int) -> str:
    """Text of exactly ``n_tokens`` o200k_base tokens, distinct per ``seed``."""
    encoding = load_encoding("o200k_base")
    words = " ".join(f"{seed}{i} item" for i in range(n_tokens))
    return encoding.decode(encoding.encode_ordinary(words)[:n_tokens])


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def per_message(role: str) -> int:
    return 4 + tokens(role)


SYSTEM = long_text("sys", 1500)


def cached_system() -> Any:
    return [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]


def conversation(turns: int, *, mark_last: bool = False) -> list[Any]:
    """``turns`` user/assistant exchanges and a last user message (one text block each)."""
    messages: list[Any] = []
    for turn in range(turns):
        messages += [user(f"question {turn}"), {"role": "assistant", "content": f"answer {turn}"}]
    last: dict[str, Any] = {"type": "text", "text": "and now?"}
    if mark_last:
        last["cache_control"] = EPHEMERAL
    return [*messages, {"role": "user", "content": [last]}]


def check_usage_adds_up(usage: Any, record: RecordedRequest) -> None:
    """The three input fields add up to the recorded prompt, as recorded."""
    total = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    assert total == record.prompt_tokens
    assert record.cached_tokens == usage.cache_read_input_tokens
    assert record.cache_creation_tokens == usage.cache_creation_input_tokens
    assert record.api == "messages"


# --- answers ------------------------------------------------------------------------------------


def test_text_answer_parses_in_sdk(up: TestUpstream) -> None:
    client = client_for(up)
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=100, messages=[user("hello")]
    )
    assert raw.headers["request-id"].startswith("req_")
    message = raw.parse()
    assert message.id.startswith("msg_")
    assert (message.type, message.role, message.model) == ("message", "assistant", MODEL)
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "ok"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert message.stop_sequence is None
    # 4 + role per message, the text, 3 priming the reply; nothing cached without breakpoints.
    assert message.usage.input_tokens == per_message("user") + tokens("hello") + 3
    assert message.usage.output_tokens == tokens("ok")
    assert message.usage.cache_read_input_tokens == 0
    assert message.usage.cache_creation_input_tokens == 0
    record = up.requests[-1]
    assert (record.path, record.status, record.api, record.stream) == (
        "/v1/messages",
        200,
        "messages",
        False,
    )
    assert record.body["max_tokens"] == 100
    assert record.messages == [user("hello")]
    assert record.completion_tokens == tokens("ok")
    check_usage_adds_up(message.usage, record)


def test_root_url_is_base_url_without_v1(up: TestUpstream) -> None:
    assert up.root_url == f"http://127.0.0.1:{up.port}"
    assert up.base_url == f"{up.root_url}/v1"


def test_tool_use_round_trip_and_the_chat_body_the_responder_sees(up: TestUpstream) -> None:
    seen: list[dict[str, Any]] = []

    def agent(body: dict[str, Any]) -> Reply:
        seen.append(body)
        return (
            Reply.call("read_file", {"path": "src/app.py"})
            if len(seen) == 1
            else Reply.text("done")
        )

    up.responder = agent
    client = client_for(up)
    question = user("Read the app.")
    first = client.messages.create(
        model=MODEL, max_tokens=200, system="Be brief.", tools=TOOLS, messages=[question]
    )
    assert first.stop_reason == "tool_use"
    (call,) = first.content
    assert call.type == "tool_use"
    assert call.id.startswith("toolu_")
    assert (call.name, call.input) == ("read_file", {"path": "src/app.py"})

    history: list[Any] = [
        question,
        {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "print(1)"}],
        },
    ]
    second = client.messages.create(
        model=MODEL,
        max_tokens=200,
        system="Be brief.",
        tools=TOOLS,
        tool_choice={"type": "auto"},
        messages=history,
    )
    assert second.stop_reason == "end_turn"
    assert second.content[0].text == "done"  # type: ignore[union-attr]

    body = seen[-1]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file from the workspace.",
                "parameters": TOOLS[0]["input_schema"],
            },
        }
    ]
    assert body["tool_choice"] == "auto"
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assert body["messages"][0]["content"] == "Be brief."
    assistant = body["messages"][2]
    assert assistant["tool_calls"][0]["id"] == call.id
    assert assistant["tool_calls"][0]["function"]["name"] == "read_file"
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"path": "src/app.py"}'
    assert body["messages"][3] == {"role": "tool", "tool_call_id": call.id, "content": "print(1)"}


def test_translation_keeps_tool_results_in_order_and_drops_thinking() -> None:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": 10,
        "system": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "text", "text": "Two reads."},
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "read_file",
                        "input": {"path": "x"},
                    },
                    {
                        "type": "tool_use",
                        "id": "toolu_2",
                        "name": "read_file",
                        "input": {"path": "y"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "X"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "no such file"}],
                    },
                    {"type": "text", "text": "Go on."},
                ],
            },
        ],
    }
    chat = chat_body_for(body)
    assert [(m["role"], m.get("content")) for m in chat["messages"]] == [
        ("system", "one\n\ntwo"),
        ("user", "a\n\nb"),
        ("assistant", "Two reads."),
        ("tool", "X"),
        ("tool", "no such file"),
        ("user", "Go on."),
    ]
    assert [c["id"] for c in chat["messages"][2]["tool_calls"]] == ["toolu_1", "toolu_2"]
    assert [m.get("tool_call_id") for m in chat["messages"][3:5]] == ["toolu_1", "toolu_2"]
    assert chat["max_tokens"] == 10


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "none"}, "none"),
        ({"type": "auto"}, "auto"),
        ({"type": "any"}, "required"),
        (
            {"type": "tool", "name": "read_file"},
            {"type": "function", "function": {"name": "read_file"}},
        ),
    ],
)
def test_tool_choice_translation(choice: Any, expected: Any) -> None:
    body = {"model": MODEL, "tools": TOOLS, "tool_choice": choice, "messages": [user("hi")]}
    assert chat_body_for(body)["tool_choice"] == expected


def test_tool_choice_none_is_a_summary_request_for_routing_faults_and_the_log(
    up: TestUpstream,
) -> None:
    up.responder = RoutingResponder(
        agent=echo_responder, summary=lambda body: Reply.text("SUMMARY")
    )
    up.inject(Fault(kind="status", status=529, match="summary"))
    client = client_for(up)
    agent = client.messages.create(model=MODEL, max_tokens=50, tools=TOOLS, messages=[user("hi")])
    assert agent.content[0].text == "ok"  # type: ignore[union-attr]
    assert up.pending_faults == 1  # an agent request does not draw a summary fault
    kwargs: Any = {"tools": TOOLS, "tool_choice": {"type": "none"}, "messages": [user("sum up")]}
    with pytest.raises(anthropic.OverloadedError):
        client.messages.create(model=MODEL, max_tokens=50, **kwargs)
    summary = client.messages.create(model=MODEL, max_tokens=50, **kwargs)
    assert summary.content[0].text == "SUMMARY"  # type: ignore[union-attr]
    assert [r.is_summary for r in up.requests] == [False, True, True]


def test_scripted_agent_and_summary_responder_answer_messages(up: TestUpstream) -> None:
    agent = ScriptedToolAgent([("read_file", {"path": "billing/dates.py"})])
    up.responder = agent
    client = client_for(up)
    step = client.messages.create(model=MODEL, max_tokens=100, tools=TOOLS, messages=[user("go")])
    assert step.content[0].type == "tool_use"
    assert step.content[0].input == {"path": "billing/dates.py"}
    history: Any = [
        user("Fix the date parser.\nNOTE: the customer id is C-4411"),
        {"role": "assistant", "content": [step.content[0].model_dump(exclude_none=True)]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": step.content[0].id,
                    "content": "def p(): ...",
                },
                {"type": "text", "text": "Summarize the conversation so far."},
            ],
        },
    ]
    summary = client.messages.create(
        model=MODEL, max_tokens=2000, tools=TOOLS, tool_choice={"type": "none"}, messages=history
    )
    text = summary.content[0].text  # type: ignore[union-attr]
    assert "NOTE: the customer id is C-4411" in text
    assert (agent.agent_requests, agent.summary_requests) == (1, 1)


def test_max_tokens_cuts_the_answer(up: TestUpstream) -> None:
    text = long_text("word", 40)
    up.enqueue(Reply(content=text, tool_calls=[ToolCallSpec(name="read_file")]))
    message = client_for(up).messages.create(model=MODEL, max_tokens=5, messages=[user("hi")])
    assert message.stop_reason == "max_tokens"
    assert [block.type for block in message.content] == ["text"]
    assert tokens(message.content[0].text) == 5  # type: ignore[union-attr]
    assert message.usage.output_tokens == 5


def test_consecutive_messages_of_one_role_are_allowed(up: TestUpstream) -> None:
    messages: Any = [user("one"), user("two"), {"role": "assistant", "content": "x"}, user("three")]
    message = client_for(up).messages.create(model=MODEL, max_tokens=10, messages=messages)
    assert message.content[0].text == "ok"  # type: ignore[union-attr]


# --- streaming ----------------------------------------------------------------------------------


def test_stream_text_events_and_final_message(up: TestUpstream) -> None:
    scripted = "Streaming works across several pieces of text."
    up.enqueue(Reply(content=scripted, chunk_delay=0.001))
    client = client_for(up)
    kinds: list[str] = []
    with client.messages.stream(model=MODEL, max_tokens=100, messages=[user("hi")]) as stream:
        streamed = ""
        for event in stream:
            kinds.append(event.type)
            if event.type == "text":
                streamed += event.text
        final = stream.get_final_message()
    assert streamed == scripted
    assert final.content[0].text == scripted  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == tokens(scripted)
    assert final.usage.input_tokens == per_message("user") + tokens("hi") + 3
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 1
    assert kinds.count("content_block_delta") > 1
    assert up.requests[-1].stream is True


def test_stream_tool_use_assembles_its_input(up: TestUpstream) -> None:
    arguments = {"path": "src/app.py", "lines": [1, 2, 3], "note": "ünïcode"}
    up.enqueue(
        Reply(content="Reading.", tool_calls=[ToolCallSpec(name="read_file", arguments=arguments)])
    )
    client = client_for(up)
    partial = ""
    with client.messages.stream(
        model=MODEL, max_tokens=100, tools=TOOLS, messages=[user("read")]
    ) as stream:
        for event in stream:
            if event.type == "input_json":
                partial += event.partial_json
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [block.type for block in final.content] == ["text", "tool_use"]
    tool_use = final.content[1]
    assert tool_use.type == "tool_use"
    assert tool_use.id.startswith("toolu_")
    assert tool_use.input == arguments
    assert partial and json.loads(partial) == arguments


def test_async_client_create_and_stream(up: TestUpstream) -> None:
    async def run() -> tuple[str, str]:
        client = anthropic.AsyncAnthropic(base_url=up.root_url, api_key="test", max_retries=0)
        up.enqueue("first", "second")
        created = await client.messages.create(model=MODEL, max_tokens=20, messages=[user("a")])
        async with client.messages.stream(
            model=MODEL, max_tokens=20, messages=[user("b")]
        ) as stream:
            final = await stream.get_final_message()
        await client.close()
        return created.content[0].text, final.content[0].text  # type: ignore[union-attr]

    assert asyncio.run(run()) == ("first", "second")


# --- count_tokens -------------------------------------------------------------------------------


def test_count_tokens_matches_the_billed_prompt(up: TestUpstream) -> None:
    client = client_for(up)
    messages: Any = [user("hello there")]
    counted = client.messages.count_tokens(
        model=MODEL, system="Be brief.", tools=TOOLS, messages=messages
    )
    billed = client.messages.create(
        model=MODEL, max_tokens=10, system="Be brief.", tools=TOOLS, messages=messages
    )
    assert counted.input_tokens == billed.usage.input_tokens
    bare = client.messages.count_tokens(model=MODEL, messages=messages)
    assert bare.input_tokens == per_message("user") + tokens("hello there") + 3
    assert counted.input_tokens > bare.input_tokens + tokens("Be brief.")
    assert up.requests[0].path == "/v1/messages/count_tokens"
    assert up.requests[0].prompt_tokens == counted.input_tokens


# --- errors -------------------------------------------------------------------------------------

MISSING_RESULT: Any = [
    user("read it"),
    {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_x", "name": "read_file", "input": {}}],
    },
    user("what did you find?"),
]
UNEXPECTED_RESULT: Any = [
    user("hi"),
    {"role": "assistant", "content": "hello"},
    {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "toolu_y", "content": "?"}],
    },
]


def five_breakpoints() -> dict[str, Any]:
    tools = [{**TOOLS[0], "cache_control": EPHEMERAL}]
    system = [{"type": "text", "text": "s", "cache_control": EPHEMERAL}]
    content = [{"type": "text", "text": f"t{i}", "cache_control": EPHEMERAL} for i in range(3)]
    return {"tools": tools, "system": system, "messages": [{"role": "user", "content": content}]}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"messages": MISSING_RESULT},
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_x. Each `tool_use` block must have a corresponding `tool_result` block "
            "in the next message.",
        ),
        (
            {"messages": UNEXPECTED_RESULT},
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
            "toolu_y. Each `tool_result` block must have a corresponding `tool_use` block in the "
            "previous message.",
        ),
        (five_breakpoints(), "A maximum of 4 blocks with cache_control may be provided. Found 5."),
        (
            {"messages": [{"role": "bot", "content": "hi"}]},
            "messages.0.role: Input should be 'user' or 'assistant'",
        ),
        ({"messages": [user("hi")], "max_tokens": anthropic.omit}, "max_tokens: Field required"),
        ({"messages": [user("")]}, "messages.0: all messages must have non-empty content"),
        (
            {"messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages.0.content.0: Input tag 'video' found using 'type' does not match",
        ),
    ],
)
def test_invalid_requests_get_anthropic_errors(
    up: TestUpstream, kwargs: dict[str, Any], message: str
) -> None:
    arguments = {"model": MODEL, "max_tokens": 10, "timeout": 10, **kwargs}
    with pytest.raises(anthropic.BadRequestError) as raised:
        client_for(up).messages.create(**arguments)
    error = raised.value
    assert error.status_code == 400
    assert isinstance(error.body, dict)
    assert error.body["type"] == "error"
    assert error.body["error"]["type"] == "invalid_request_error"
    assert error.body["error"]["message"].startswith(message)
    assert error.request_id is not None and error.request_id == error.body["request_id"]
    assert up.requests[-1].status == 400


def test_four_breakpoints_are_accepted(up: TestUpstream) -> None:
    body = five_breakpoints()
    del body["tools"][0]["cache_control"]
    message = client_for(up).messages.create(model=MODEL, max_tokens=10, **body)
    assert message.stop_reason == "end_turn"


def test_prompt_too_long_and_prompt_plus_max_tokens_too_long() -> None:
    with TestUpstream(context_window=100) as upstream:
        client = client_for(upstream)
        text = long_text("w", 150)
        prompt = client.messages.count_tokens(model=MODEL, messages=[user(text)]).input_tokens
        with pytest.raises(
            anthropic.BadRequestError, match=f"prompt is too long: {prompt} tokens > 100 maximum"
        ):
            client.messages.create(model=MODEL, max_tokens=10, messages=[user(text)])
        short = client.messages.count_tokens(model=MODEL, messages=[user("hi")]).input_tokens
        expected = f"input length and `max_tokens` exceed context limit: {short} \\+ 99 > 100"
        with pytest.raises(anthropic.BadRequestError, match=expected):
            client.messages.create(model=MODEL, max_tokens=99, messages=[user("hi")])
        assert upstream.requests[-1].prompt_tokens == short
        fits = client.messages.create(model=MODEL, max_tokens=100 - short, messages=[user("hi")])
        assert fits.stop_reason == "end_turn"


def test_rate_limit_fault_is_anthropics_429(up: TestUpstream) -> None:
    up.inject(Fault(kind="rate_limit", retry_after=2))
    client = client_for(up)
    with pytest.raises(anthropic.RateLimitError) as raised:
        client.messages.create(model=MODEL, max_tokens=10, messages=[user("hi")])
    error = raised.value
    assert isinstance(error.body, dict)
    assert error.body["error"]["type"] == "rate_limit_error"
    assert error.response.headers["retry-after"] == "2"
    assert error.response.headers["request-id"] == error.body["request_id"]
    assert (up.requests[-1].fault, up.requests[-1].api) == ("rate_limit", "messages")
    assert client.messages.create(model=MODEL, max_tokens=10, messages=[user("hi")]).content


@pytest.mark.parametrize(
    ("status", "error_class", "kind"),
    [
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
        (401, anthropic.AuthenticationError, "authentication_error"),
    ],
)
def test_status_faults_answer_in_anthropics_shape(
    up: TestUpstream, status: int, error_class: type[anthropic.APIStatusError], kind: str
) -> None:
    up.inject(Fault(kind="status", status=status))
    with pytest.raises(error_class) as raised:
        client_for(up).messages.create(model=MODEL, max_tokens=10, messages=[user("hi")])
    assert raised.value.status_code == status
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"]["type"] == kind


def test_drop_and_reset_faults_break_the_connection(up: TestUpstream) -> None:
    client = client_for(up)
    up.inject(Fault(kind="drop"))
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model=MODEL, max_tokens=10, messages=[user("hi")])
    up.inject(Fault(kind="reset"))
    with pytest.raises(anthropic.APIConnectionError):
        client.messages.create(model=MODEL, max_tokens=10, messages=[user("hi")])
    up.inject(Fault(kind="reset", events=3))
    received: list[str] = []
    # anthropic before 2.17 lets httpx's error out of a stream; 2.17 and later wrap it in a
    # connection error. Either way the cause is the body cut off mid-stream.
    with (
        pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as broken,
        client.messages.stream(model=MODEL, max_tokens=10, messages=[user("hi")]) as stream,
    ):
        received.extend(event.type for event in stream)
    cut = (
        broken.value
        if isinstance(broken.value, httpx2.RemoteProtocolError)
        else broken.value.__cause__
    )
    assert isinstance(cut, httpx2.RemoteProtocolError)
    assert "incomplete chunked read" in str(cut)
    # message_start, (ping: skipped by the SDK), content_block_start, then the reset.
    assert received == ["message_start", "content_block_start"]
    assert [r.fault for r in up.requests] == ["drop", "reset", "reset"]


def test_a_failing_responder_is_an_api_error(up: TestUpstream) -> None:
    def broken(body: dict[str, Any]) -> Reply:
        raise RuntimeError("boom")

    up.responder = broken
    with pytest.raises(anthropic.InternalServerError, match="RuntimeError: boom"):
        client_for(up).messages.create(model=MODEL, max_tokens=10, messages=[user("hi")])


# --- prompt caching -----------------------------------------------------------------------------


def test_a_system_breakpoint_writes_then_reads(up: TestUpstream) -> None:
    client = client_for(up)
    first = client.messages.create(
        model=MODEL, max_tokens=10, system=cached_system(), messages=[user("first question")]
    )
    assert first.usage.cache_creation_input_tokens == tokens(SYSTEM)
    assert first.usage.cache_read_input_tokens == 0
    assert first.usage.input_tokens == per_message("user") + tokens("first question") + 3
    check_usage_adds_up(first.usage, up.requests[-1])

    second = client.messages.create(
        model=MODEL, max_tokens=10, system=cached_system(), messages=[user("another question")]
    )
    assert second.usage.cache_read_input_tokens == tokens(SYSTEM)
    assert second.usage.cache_creation_input_tokens == 0
    check_usage_adds_up(second.usage, up.requests[-1])


def test_a_breakpoint_moved_to_the_newest_message_reads_the_earlier_prefix(
    up: TestUpstream,
) -> None:
    client = client_for(up)
    client.messages.create(model=MODEL, max_tokens=10, system=cached_system(), messages=[user("q")])
    # The system block no longer carries the breakpoint: it sits on the newest message instead.
    messages = conversation(3, mark_last=True)
    moved = client.messages.create(model=MODEL, max_tokens=10, system=SYSTEM, messages=messages)
    assert moved.usage.cache_read_input_tokens == tokens(SYSTEM)
    record = up.requests[-1]
    assert moved.usage.input_tokens == 3  # only the reply priming follows the last breakpoint
    assert moved.usage.cache_creation_input_tokens == record.prompt_tokens - tokens(SYSTEM) - 3
    check_usage_adds_up(moved.usage, record)

    # The next turn appends two messages and moves the breakpoint to the newest one again:
    # it reads everything the previous turn wrote, and writes only the two new messages.
    appended: list[Any] = [
        *conversation(3),
        {"role": "assistant", "content": "sure"},
        {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": EPHEMERAL}]},
    ]
    later = client.messages.create(model=MODEL, max_tokens=10, system=SYSTEM, messages=appended)
    assert later.usage.cache_read_input_tokens == record.prompt_tokens - 3
    assert later.usage.cache_creation_input_tokens == (
        per_message("assistant") + tokens("sure") + per_message("user") + tokens("next")
    )
    assert later.usage.input_tokens == 3
    check_usage_adds_up(later.usage, up.requests[-1])


def test_a_top_level_cache_control_marks_the_last_block(up: TestUpstream) -> None:
    client = client_for(up)
    extra: Any = {"cache_control": EPHEMERAL}
    messages = [user(long_text("u", 1200))]
    first = client.messages.create(model=MODEL, max_tokens=10, messages=messages, extra_body=extra)
    assert first.usage.cache_creation_input_tokens == up.requests[-1].prompt_tokens - 3
    second = client.messages.create(model=MODEL, max_tokens=10, messages=messages, extra_body=extra)
    assert second.usage.cache_read_input_tokens == up.requests[-1].prompt_tokens - 3
    assert second.usage.input_tokens == 3


def test_lookback_reaches_20_blocks_and_no_further(up: TestUpstream) -> None:
    client = client_for(up)
    client.messages.create(model=MODEL, max_tokens=10, system=cached_system(), messages=[user("q")])
    # 9 exchanges + the last message: 19 message blocks after the system block, within reach.
    near = client.messages.create(
        model=MODEL, max_tokens=10, system=SYSTEM, messages=conversation(9, mark_last=True)
    )
    assert near.usage.cache_read_input_tokens == tokens(SYSTEM)
    # 10 exchanges + the last message: the breakpoint is 21 blocks after the system block.
    up.reset_cache()
    client.messages.create(model=MODEL, max_tokens=10, system=cached_system(), messages=[user("q")])
    far = client.messages.create(
        model=MODEL, max_tokens=10, system=SYSTEM, messages=conversation(10, mark_last=True)
    )
    assert far.usage.cache_read_input_tokens == 0
    assert far.usage.cache_creation_input_tokens == up.requests[-1].prompt_tokens - 3


def test_no_breakpoints_read_and_write_nothing(up: TestUpstream) -> None:
    client = client_for(up)
    client.messages.create(model=MODEL, max_tokens=10, system=cached_system(), messages=[user("q")])
    for _ in range(2):
        plain = client.messages.create(
            model=MODEL, max_tokens=10, system=SYSTEM, messages=[user("q")]
        )
        assert plain.usage.cache_read_input_tokens == 0
        assert plain.usage.cache_creation_input_tokens == 0
        assert plain.usage.input_tokens == up.requests[-1].prompt_tokens


def test_short_prefixes_are_not_cached_unless_the_minimum_is_lowered() -> None:
    short = [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    with TestUpstream() as default:
        client = client_for(default)
        for _ in range(2):
            usage = client.messages.create(
                model=MODEL, max_tokens=10, system=short, messages=[user("q")]
            ).usage
            assert usage.cache_creation_input_tokens == usage.cache_read_input_tokens == 0
    with TestUpstream(messages_cache_min_tokens=1) as lowered:
        client = client_for(lowered)
        first, second = (
            client.messages.create(model=MODEL, max_tokens=10, system=short, messages=[user("q")])
            for _ in range(2)
        )
        assert first.usage.cache_creation_input_tokens == tokens("Be brief.")
        assert second.usage.cache_read_input_tokens == tokens("Be brief.")


def test_identity_is_by_content_and_model(up: TestUpstream) -> None:
    client = client_for(up)
    client.messages.create(model=MODEL, max_tokens=10, system=cached_system(), messages=[user("q")])
    changed = [{**cached_system()[0], "text": SYSTEM + "!"}]
    other_text = client.messages.create(
        model=MODEL, max_tokens=10, system=changed, messages=[user("q")]
    )
    assert other_text.usage.cache_read_input_tokens == 0
    other_model = client.messages.create(
        model="claude-other", max_tokens=10, system=cached_system(), messages=[user("q")]
    )
    assert other_model.usage.cache_read_input_tokens == 0
    ttl_changed = [{**cached_system()[0], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
    same = client.messages.create(
        model=MODEL, max_tokens=10, system=ttl_changed, messages=[user("q")]
    )
    assert same.usage.cache_read_input_tokens == tokens(SYSTEM)


def test_entries_expire_after_their_ttl_and_reads_refresh_them() -> None:
    now = [1000.0]
    with TestUpstream(clock=lambda: now[0]) as upstream:
        client = client_for(upstream)

        def read(system: Any) -> int:
            usage = client.messages.create(
                model=MODEL, max_tokens=10, system=system, messages=[user("q")]
            ).usage
            return usage.cache_read_input_tokens

        assert read(cached_system()) == 0
        now[0] += 299
        assert read(cached_system()) == tokens(SYSTEM)  # read at 299 s: refreshed
        now[0] += 299
        assert read(cached_system()) == tokens(SYSTEM)
        now[0] += 301
        assert read(cached_system()) == 0  # expired; written again
        one_hour = [{**cached_system()[0], "cache_control": {"type": "ephemeral", "ttl": "1h"}}]
        read(one_hour)
        now[0] += 3000
        assert read(cached_system()) == tokens(SYSTEM)


def test_streamed_usage_reports_the_cache(up: TestUpstream) -> None:
    client = client_for(up)
    client.messages.create(model=MODEL, max_tokens=10, system=cached_system(), messages=[user("q")])
    with client.messages.stream(
        model=MODEL, max_tokens=10, system=cached_system(), messages=[user("q")]
    ) as stream:
        final = stream.get_final_message()
    assert final.usage.cache_read_input_tokens == tokens(SYSTEM)
    check_usage_adds_up(final.usage, up.requests[-1])


def test_breakpoint_cache_rules_directly() -> None:
    counter = PromptTokenCounter()
    cache = BreakpointCache(min_tokens=5)
    blocks = [{"type": "text", "text": long_text(f"b{i}", 10)} for i in range(4)]

    def body(*marked: int) -> dict[str, Any]:
        content = [
            {**block, "cache_control": EPHEMERAL} if index in marked else block
            for index, block in enumerate(blocks)
        ]
        return {"model": MODEL, "messages": [{"role": "user", "content": content}]}

    first = messages_prompt(counter, body(1, 3))
    assert first.breakpoints == [1, 3]
    usage = cache.use(first)
    # Nothing to read; written up to the last breakpoint (both prefixes are kept).
    assert usage.cache_read_input_tokens == 0
    assert usage.cache_creation_input_tokens == first.cumulative[3]
    assert usage.input_tokens == 3
    assert len(cache) == 2
    # Breakpoint at block 2 only: reads block 1's prefix (lookback), writes up to block 2.
    second = cache.use(messages_prompt(counter, body(2)))
    assert second.cache_read_input_tokens == first.cumulative[1]
    assert second.cache_creation_input_tokens == first.cumulative[2] - first.cumulative[1]
    assert (
        sum(
            (
                second.input_tokens,
                second.cache_read_input_tokens,
                second.cache_creation_input_tokens,
            )
        )
        == first.tokens
    )
    # Identity ignores cache_control: a request marking block 3 reads the whole prefix.
    third = cache.use(messages_prompt(counter, body(3)))
    assert third.cache_read_input_tokens == first.cumulative[3]
    assert third.cache_creation_input_tokens == 0
    # No breakpoints: nothing read, nothing written.
    assert cache.use(messages_prompt(counter, body())).input_tokens == first.tokens
