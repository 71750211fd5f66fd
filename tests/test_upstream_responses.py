"""The test upstream's Responses API, driven over real sockets by the real openai SDK."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from context_summarizer.loaders.tokenizers import load_encoding
from context_summarizer.testing import Fault, Reply, TestUpstream, ToolCallSpec

TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file from the workspace.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
        "strict": False,
    }
]


class Recorder:
    """A responder that keeps the chat bodies it was asked with, and answers ``"ok"``."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> Reply:
        self.bodies.append(body)
        return Reply(content="ok")


@pytest.fixture
def up() -> Iterator[TestUpstream]:
    with TestUpstream() as upstream:
        yield upstream


def client_for(upstream: TestUpstream) -> openai.OpenAI:
    return openai.OpenAI(base_url=upstream.base_url, api_key="test", max_retries=0)


def tokens(text: str) -> int:
    return len(load_encoding("o200k_base").encode_ordinary(text))


def long_text(seed: str, n_tokens: int) -> str:
    """Text of exactly ``n_tokens`` o200k_base tokens, distinct per ``seed``."""
    encoding = load_encoding("o200k_base")
    words = " ".join(f"{seed}{i} item" for i in range(n_tokens))
    return encoding.decode(encoding.encode_ordinary(words)[:n_tokens])


def expected_cached(prefix: int) -> int:
    return 0 if prefix < 1024 else 1024 + 128 * ((prefix - 1024) // 128)


def user(text: str) -> Any:
    return {"role": "user", "content": text}


def item(model: Any) -> Any:
    """An SDK output item as the client sends it back (a compacted user message's
    ``input_text`` parts are not what the SDK's output message model expects: no warnings)."""
    return model.model_dump(exclude_none=True, warnings=False)


def message_of(error: openai.APIStatusError) -> str:
    """The error body's message (the exception's own message prefixes the status)."""
    assert isinstance(error.body, dict)
    return str(error.body["message"])


def cached_of(response: Any) -> int:
    assert response.usage is not None
    return int(response.usage.input_tokens_details.cached_tokens)


# --- answers ------------------------------------------------------------------------------------


def test_string_input_answers_a_response_the_sdk_parses(up: TestUpstream) -> None:
    response = client_for(up).responses.create(model="gpt-test", input="hello")
    assert response.id.startswith("resp_")
    assert response.object == "response"
    assert response.status == "completed"
    assert response.model == "gpt-test"
    assert response.output_text == "ok"
    [message] = response.output
    assert message.type == "message" and message.role == "assistant"
    assert message.id.startswith("msg_") and message.status == "completed"
    assert response.usage is not None
    # The string is one user message: 4 + role + content, plus 3 priming the reply.
    assert response.usage.input_tokens == 4 + tokens("user") + tokens("hello") + 3
    assert response.usage.output_tokens == tokens("ok")
    assert response.usage.total_tokens == response.usage.input_tokens + tokens("ok")
    assert response.usage.output_tokens_details.reasoning_tokens == 0
    assert cached_of(response) == 0
    [record] = up.requests
    assert record.api == "responses" and record.path == "/v1/responses"
    assert record.body["input"] == "hello" and record.status == 200
    assert record.prompt_tokens == response.usage.input_tokens
    assert record.completion_tokens == tokens("ok") and not record.stream


def test_instructions_reach_the_responder_as_the_first_system_message(up: TestUpstream) -> None:
    recorder = Recorder()
    up.responder = recorder
    response = client_for(up).responses.create(
        model="gpt-test",
        instructions="Answer in French.",
        input=[
            {"role": "developer", "content": "Be brief."},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
        ],
    )
    [body] = recorder.bodies
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "Answer in French."},
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    assert response.instructions == "Answer in French."
    assert response.usage is not None
    assert response.usage.input_tokens == (
        (4 + tokens("system") + tokens("Answer in French."))
        + (4 + tokens("developer") + tokens("Be brief."))
        + (4 + tokens("user") + tokens("Hi"))
        + 3
    )


def test_function_call_round_trip(up: TestUpstream) -> None:
    client = client_for(up)
    up.enqueue(Reply.call("read_file", {"path": "src/app.py"}))
    first = client.responses.create(model="gpt-test", input="Read the app.", tools=TOOLS)
    [call] = first.output
    assert call.type == "function_call"
    assert call.name == "read_file" and json.loads(call.arguments) == {"path": "src/app.py"}
    assert call.call_id.startswith("call_") and call.id is not None and call.id.startswith("fc_")
    assert first.output_text == ""
    assert first.tools[0].type == "function" and first.tools[0].name == "read_file"

    recorder = Recorder()
    up.responder = recorder
    second = client.responses.create(
        model="gpt-test",
        input=[
            user("Read the app."),
            item(call),
            {"type": "function_call_output", "call_id": call.call_id, "output": "print(1)"},
        ],
        tools=TOOLS,
    )
    assert second.output_text == "ok"
    [body] = recorder.bodies
    assert body["messages"] == [
        {"role": "user", "content": "Read the app."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "read_file", "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": "print(1)"},
    ]
    [tool] = body["tools"]
    assert tool == {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the workspace.",
            "parameters": TOOLS[0]["parameters"],
            "strict": False,
        },
    }


def test_consecutive_calls_join_the_assistant_message_before_them(up: TestUpstream) -> None:
    recorder = Recorder()
    up.responder = recorder
    calls: list[Any] = [
        {"type": "function_call", "call_id": f"c{i}", "name": "read_file", "arguments": "{}"}
        for i in (1, 2)
    ]
    conversation: list[Any] = [
        user("Read both."),
        {"role": "assistant", "content": [{"type": "output_text", "text": "Reading."}]},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        *calls,
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
    ]
    choice: Any = {"type": "function", "name": "read_file"}
    client_for(up).responses.create(model="gpt-test", input=conversation, tool_choice=choice)
    [body] = recorder.bodies
    roles = [message["role"] for message in body["messages"]]
    assert roles == ["user", "assistant", "tool", "tool"]
    assistant = body["messages"][1]
    assert assistant["content"] == "Reading."
    assert [call["id"] for call in assistant["tool_calls"]] == ["c1", "c2"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}


def test_summary_requests_are_recognised(up: TestUpstream) -> None:
    recorder = Recorder()
    up.responder = recorder
    client = client_for(up)
    client.responses.create(model="gpt-test", input="Summarize.", tools=TOOLS, tool_choice="none")
    client.responses.create(model="gpt-test", input="Go on.", tools=TOOLS)
    assert recorder.bodies[0]["tool_choice"] == "none"
    assert [r.is_summary for r in up.requests] == [True, False]


# --- streaming ----------------------------------------------------------------------------------


def test_streaming_text(up: TestUpstream) -> None:
    text = "The quick brown fox jumps over the lazy dog."
    up.enqueue(Reply(content=text, chunk_delay=0.02))
    started = time.monotonic()
    events = list(client_for(up).responses.create(model="gpt-test", input="go", stream=True))
    elapsed = time.monotonic() - started
    types = [event.type for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [event.delta for event in events if event.type == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == text
    done = next(event for event in events if event.type == "response.output_text.done")
    assert done.text == text
    assert elapsed >= 0.02 * (len(events) - 1)  # chunk_delay between events
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == text
    usage = completed.response.usage
    assert usage is not None
    assert usage.input_tokens == 4 + tokens("user") + tokens("go") + 3
    assert usage.output_tokens == tokens(text)
    assert events[0].type == "response.created" and events[0].response.usage is None
    assert up.requests[-1].stream and up.requests[-1].api == "responses"


def test_streaming_function_call_and_the_stream_helper(up: TestUpstream) -> None:
    arguments = {"path": "a/b.py", "lines": [1, 20]}
    up.enqueue(Reply(tool_calls=[ToolCallSpec(name="read_file", arguments=arguments)]))
    client = client_for(up)
    with client.responses.stream(model="gpt-test", input="go", tools=TOOLS) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert len(deltas) > 1
    [done] = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert "".join(deltas) == done.arguments
    assert json.loads(done.arguments) == arguments
    [call] = final.output
    assert call.type == "function_call" and call.name == "read_file"
    assert call.arguments == done.arguments and call.status == "completed"
    assert final.usage is not None and final.usage.output_tokens > 0

    up.enqueue("Streaming, helped.")
    with client.responses.stream(model="gpt-test", input="again") as stream:
        assert stream.get_final_response().output_text == "Streaming, helped."


# --- reasoning, limits and errors ---------------------------------------------------------------


def test_included_reasoning_is_sealed_and_accepted_back(up: TestUpstream) -> None:
    client = client_for(up)
    first = client.responses.create(
        model="gpt-test", input="think", include=["reasoning.encrypted_content"], store=False
    )
    reasoning, message = first.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert reasoning.summary == [] and reasoning.encrypted_content
    assert message.type == "message" and first.output_text == "ok"

    recorder = Recorder()
    up.responder = recorder
    again = [user("think"), item(reasoning), item(message), user("more")]
    assert client.responses.create(model="gpt-test", input=again).output_text == "ok"
    assert [m["role"] for m in recorder.bodies[0]["messages"]] == ["user", "assistant", "user"]

    forged: Any = {**item(reasoning), "encrypted_content": "gAAAAABnot-ours"}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-test", input=[user("think"), forged, user("more")])
    assert "could not be verified" in message_of(caught.value)
    assert caught.value.code == "invalid_encrypted_content"


def test_max_output_tokens_cuts_the_answer_incomplete(up: TestUpstream) -> None:
    text = " ".join(f"word{i}" for i in range(60))
    up.enqueue(text)
    response = client_for(up).responses.create(
        model="gpt-test", input="count", max_output_tokens=16
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 16
    encoding = load_encoding("o200k_base")
    assert response.output_text == encoding.decode(encoding.encode_ordinary(text)[:16])


@pytest.mark.parametrize(
    ("kwargs", "message", "param", "code"),
    [
        ({}, "Missing required parameter: 'input'.", "input", "missing_required_parameter"),
        (
            {"input": [{"type": "bogus"}]},
            "Invalid value: 'bogus'. Supported values are: 'message', ",
            "input[0]",
            "invalid_value",
        ),
        (
            {"input": [{"role": "tool", "content": "x"}]},
            "Invalid value: 'tool'. Supported values are: 'assistant', 'system', 'developer', "
            "and 'user'.",
            "input[0].role",
            "invalid_value",
        ),
        (
            {"input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]},
            "Invalid value: 'input_text'. Supported values are: 'output_text' and 'refusal'.",
            "input[0].content[0].type",
            "invalid_value",
        ),
        (
            {
                "input": [
                    user("hi"),
                    {"type": "function_call_output", "call_id": "call_x", "output": "1"},
                ]
            },
            "No tool call found for function call output with call_id call_x.",
            "input",
            None,
        ),
        (
            {
                "input": [
                    {"type": "function_call", "call_id": "call_y", "name": "f", "arguments": "{}"},
                    user("and then?"),
                ]
            },
            "No tool output found for function call call_y.",
            "input",
            None,
        ),
        (
            {"input": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]},
            "Missing required parameter: 'tools[0].name'.",
            "tools[0].name",
            "missing_required_parameter",
        ),
        (
            {"input": "hi", "max_output_tokens": 5},
            "Invalid 'max_output_tokens': integer below minimum value.",
            "max_output_tokens",
            "integer_below_min_value",
        ),
    ],
)
def test_invalid_requests_are_bad_requests(
    up: TestUpstream, kwargs: dict[str, Any], message: str, param: str, code: str | None
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client_for(up).responses.create(model="gpt-test", **kwargs)
    assert caught.value.status_code == 400
    assert message_of(caught.value).startswith(message)
    assert caught.value.param == param and caught.value.code == code
    assert caught.value.type == "invalid_request_error"
    [record] = up.requests
    assert record.status == 400 and record.api == "responses" and record.prompt_tokens is None


def test_input_over_the_context_window() -> None:
    with TestUpstream(context_window=200) as upstream:
        client = client_for(upstream)
        assert client.responses.create(model="gpt-test", input="short").output_text == "ok"
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="gpt-test", input=long_text("big", 300))
        assert caught.value.code == "context_length_exceeded"
        assert caught.value.param == "input"
        assert message_of(caught.value) == (
            "Your input exceeds the context window of this model. Please adjust your input "
            "and try again."
        )
        record = upstream.requests[-1]
        assert record.status == 400 and record.prompt_tokens is not None
        assert record.prompt_tokens > 200


def test_rate_limit_fault(up: TestUpstream) -> None:
    up.inject(Fault(kind="rate_limit", retry_after=2))
    client = client_for(up)
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="gpt-test", input="hi")
    assert caught.value.code == "rate_limit_exceeded"
    assert caught.value.response.headers["retry-after"] == "2"
    assert client.responses.create(model="gpt-test", input="hi").output_text == "ok"
    first, second = up.requests
    assert (first.status, first.fault, first.api) == (429, "rate_limit", "responses")
    assert second.status == 200 and second.fault is None


# --- caching and stored conversations -----------------------------------------------------------


def test_automatic_prefix_caching_over_the_rendered_items(up: TestUpstream) -> None:
    client = client_for(up)
    conversation: list[Any] = [
        user(long_text("task", 1300)),
        {"role": "assistant", "content": "ok"},
    ]
    first = client.responses.create(model="gpt-test", instructions="Be brief.", input=conversation)
    assert first.usage is not None and first.usage.input_tokens > 1300
    assert cached_of(first) == 0  # cold cache
    extended = [*conversation, user("continue please")]
    second = client.responses.create(model="gpt-test", instructions="Be brief.", input=extended)
    assert cached_of(second) == expected_cached(first.usage.input_tokens - 3)
    assert cached_of(second) > 0 and up.requests[-1].cached_tokens == cached_of(second)

    # The same rendering spelled another way (parts, an explicit type, an id) still hits.
    respelled = [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": conversation[0]["content"]}],
        },
        {
            "type": "message",
            "id": "msg_x",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok", "annotations": []}],
        },
        user("continue please"),
    ]
    third = client.responses.create(model="gpt-test", instructions="Be brief.", input=respelled)
    assert cached_of(third) == cached_of(second) > 0

    # A changed early item (here: the instructions) breaks the prefix.
    changed = client.responses.create(model="gpt-test", instructions="Be long.", input=extended)
    assert cached_of(changed) == 0
    # So do other tools.
    tooled = client.responses.create(
        model="gpt-test", instructions="Be brief.", input=extended, tools=TOOLS
    )
    assert cached_of(tooled) == 0


def test_previous_response_id_continues_the_conversation(up: TestUpstream) -> None:
    recorder = Recorder()
    up.responder = recorder
    client = client_for(up)
    first = client.responses.create(model="gpt-test", input=long_text("ada", 1200))
    second = client.responses.create(
        model="gpt-test", previous_response_id=first.id, input="What did I say?"
    )
    assert second.previous_response_id == first.id
    seen = recorder.bodies[-1]["messages"]
    assert [m["role"] for m in seen] == ["user", "assistant", "user"]
    assert seen[0]["content"] == long_text("ada", 1200) and seen[1]["content"] == "ok"
    assert up.requests[-1].body["input"] == "What did I say?"  # the wire body, as sent
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens > first.usage.input_tokens
    assert cached_of(second) == expected_cached(first.usage.input_tokens - 3) > 0
    assert client.responses.retrieve(second.id).output_text == "ok"

    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-test", previous_response_id="resp_nope", input="hi")
    assert message_of(caught.value) == "Previous response with id 'resp_nope' not found."
    assert caught.value.param == "previous_response_id"
    assert caught.value.code == "previous_response_not_found"

    unstored = client.responses.create(model="gpt-test", input="hi", store=False)
    with pytest.raises(openai.BadRequestError):
        client.responses.create(model="gpt-test", previous_response_id=unstored.id, input="x")
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)


def test_previous_response_id_checks_tool_outputs_against_the_history(up: TestUpstream) -> None:
    client = client_for(up)
    up.enqueue(Reply.call("read_file", {"path": "x"}))
    first = client.responses.create(model="gpt-test", input="read", tools=TOOLS)
    [call] = first.output
    assert call.type == "function_call"
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-test", previous_response_id=first.id, input="hm?")
    assert message_of(caught.value) == f"No tool output found for function call {call.call_id}."
    output: Any = {"type": "function_call_output", "call_id": call.call_id, "output": "data"}
    second = client.responses.create(
        model="gpt-test", previous_response_id=first.id, input=[output], tools=TOOLS
    )
    assert second.output_text == "ok"


def test_compact_keeps_user_messages_and_one_compaction_item(up: TestUpstream) -> None:
    client = client_for(up)
    conversation: list[Any] = [
        user("First question."),
        {"role": "assistant", "content": long_text("answer", 400)},
        user("Second question."),
        {"role": "assistant", "content": long_text("again", 400)},
    ]
    compacted = client.responses.compact(model="gpt-test", input=conversation)
    assert compacted.object == "response.compaction" and compacted.id.startswith("resp_")
    *kept, compaction = compacted.output
    assert [m.role for m in kept if m.type == "message"] == ["user", "user"] and len(kept) == 2
    assert compaction.type == "compaction" and compaction.encrypted_content
    assert compacted.usage.input_tokens > 800 and compacted.usage.output_tokens > 0
    assert compacted.usage.total_tokens == (
        compacted.usage.input_tokens + compacted.usage.output_tokens
    )
    full = client.responses.create(model="gpt-test", input=[*conversation, user("Third.")])
    after = client.responses.create(
        model="gpt-test", input=[*(item(i) for i in compacted.output), user("Third.")]
    )
    assert after.output_text == "ok"
    assert after.usage is not None and full.usage is not None
    assert after.usage.input_tokens < full.usage.input_tokens - 700
    assert {r.path for r in up.requests} == {"/v1/responses/compact", "/v1/responses"}


def test_stream_wire_format_names_each_event(up: TestUpstream) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", up.port, timeout=5)
    body = json.dumps({"model": "gpt-test", "input": "hi", "stream": True})
    connection.request("POST", "/v1/responses", body, {"Content-Type": "application/json"})
    answer = connection.getresponse()
    assert answer.status == 200
    assert answer.getheader("Content-Type", "").startswith("text/event-stream")
    frames = answer.read().decode("utf-8").split("\n\n")
    connection.close()
    assert frames[-1] == "" and "[DONE]" not in "".join(frames)
    for frame in frames[:-1]:
        event_line, data_line = frame.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
    assert json.loads(frames[-2].split("\n")[1].removeprefix("data: "))["type"] == (
        "response.completed"
    )
