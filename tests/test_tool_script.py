"""The test model's tool-using script (``serve --test-upstream --test-script``): the file's
checks, which requests take a step, and each API's tool call through the proxy, with the real
``openai`` and ``anthropic`` SDKs, streamed and not."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from context_summarizer.cli.test_upstream_serve import describe_request
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import (
    Reply,
    RoutingResponder,
    TestUpstream,
    ToolScript,
    ToolScriptError,
    load_tool_script,
)
from context_summarizer.testing.tool_script import parse_tool_script

GPT = "gpt-4o-mini"
CLAUDE = "claude-sonnet-4-5"
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}}
CHAT_TOOLS: list[Any] = [
    {"type": "function", "function": {"name": name, "parameters": SCHEMA}}
    for name in ("read_file", "grep")
]
RESPONSES_TOOLS: list[Any] = [
    {"type": "function", "name": name, "parameters": SCHEMA, "strict": False}
    for name in ("read_file", "grep")
]
MESSAGES_TOOLS: list[Any] = [
    {"name": name, "input_schema": SCHEMA} for name in ("read_file", "grep")
]
READ = {"tool": "read_file", "arguments": {"path": "a.py"}}
PARALLEL = {"calls": [READ, {"tool": "grep", "arguments": {"path": "b.py"}}]}


# --- the file -----------------------------------------------------------------------------------


def test_a_valid_script_reads_as_its_steps(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(
        json.dumps([READ, PARALLEL, {"tool": "apply_patch", "input": "x"}, {"text": "ok"}])
    )
    steps = load_tool_script(path)
    assert [len(step.calls) for step in steps] == [1, 2, 1, 0]
    assert steps[0].calls[0].arguments == {"path": "a.py"}
    assert steps[2].calls[0].input == "x" and steps[3].text == "ok"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ({"tool": "x"}, "a test script must be a JSON list of steps, not an object"),
        ([], "the test script has no steps"),
        ([READ, "read_file"], "step 1: a step must be a JSON object, not a string"),
        ([{"tool": "x", "text": "y"}], "step 0: a step has exactly one of"),
        (
            [{"arguments": {}}],
            "step 0: a step has exactly one of 'tool', 'calls', 'text' (found none)",
        ),
        ([{"tool": ""}], "step 0: 'tool' must be a non-empty string"),
        (
            [{"tool": "x", "arguments": [1]}],
            "step 0: 'arguments' must be a JSON object, not a list",
        ),
        ([{"tool": "x", "input": 3}], "step 0: 'input' must be a string, not a number"),
        ([{"tool": "x", "input": "a", "arguments": {}}], "give 'arguments' or 'input', not both"),
        ([{"tool": "x", "args": {}}], "step 0: unknown key(s) 'args' in a tool call"),
        ([READ, {"calls": []}], "step 1: 'calls' must be a non-empty list"),
        ([{"calls": [READ, {"tool": 1}]}], "step 0, call 1: 'tool' must be a non-empty string"),
        ([{"text": None}], "step 0: 'text' must be a string, not null"),
        ([{"text": "a", "final": True}], "step 0: unknown key(s) 'final' beside 'text'"),
    ],
)
def test_a_wrong_script_is_refused_naming_the_file_the_step_and_the_fault(
    tmp_path: Path, script: Any, expected: str
) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    with pytest.raises(ToolScriptError) as caught:
        load_tool_script(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert expected in str(caught.value)


def test_an_unreadable_or_malformed_file_is_refused_with_its_path(tmp_path: Path) -> None:
    with pytest.raises(ToolScriptError, match="cannot read the test script"):
        load_tool_script(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('[{"tool": "x"},\n  {"tool": }]')
    with pytest.raises(ToolScriptError, match=r"broken\.json: not JSON: .*line 2, column"):
        load_tool_script(broken)


# --- which requests take a step -----------------------------------------------------------------


def chat(tools: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": GPT, "messages": [{"role": "user", "content": "go"}]}
    if tools is not None:
        body["tools"] = [
            {"type": "function", "function": {"name": name, "parameters": SCHEMA}} for name in tools
        ]
    return {**body, **extra}


def test_only_agent_requests_offering_the_steps_tools_take_steps() -> None:
    script = ToolScript(parse_tool_script([READ, PARALLEL, {"text": "all done"}]), describe_request)
    # No tools (a title generator), other tools (a router), a summary request: nothing taken.
    for body in (chat(), chat(["classify"]), chat(["read_file"], tool_choice="none")):
        reply = script(body)
        assert reply.tool_calls == [] and (reply.content or "").startswith("(summarizer test")
    assert script.taken == 0
    assert [c.name for c in script(chat(["read_file", "grep"])).tool_calls] == ["read_file"]
    # The parallel step needs grep too: a request offering only read_file leaves it waiting.
    assert script(chat(["read_file"])).tool_calls == [] and script.taken == 1
    assert [c.name for c in script(chat(["grep", "read_file"])).tool_calls] == ["read_file", "grep"]
    assert script(chat(["grep"])).content == "all done" and script.finished
    after = script(chat(["read_file"]))
    assert after.tool_calls == [] and "received 1 messages" in (after.content or "")


def test_steps_are_taken_once_each_by_concurrent_requests() -> None:
    script = ToolScript(parse_tool_script([READ] * 50), describe_request)
    calls: list[int] = []
    lock = threading.Lock()

    def agent() -> None:
        for _ in range(20):
            reply = script(chat(["read_file"]))
            with lock:
                calls.append(len(reply.tool_calls))

    threads = [threading.Thread(target=agent) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(calls) == 50 and script.taken == 50


def test_a_custom_tool_gets_its_raw_input_and_a_function_tool_gets_it_as_arguments() -> None:
    script = ToolScript(
        parse_tool_script([{"tool": "apply_patch", "input": "*** Begin Patch"}] * 2),
        describe_request,
    )
    custom = chat(tools=[])
    custom["tools"] = [{"type": "custom", "custom": {"name": "apply_patch"}}]
    [call] = script(custom).tool_calls
    assert (call.type, call.arguments) == ("custom", "*** Begin Patch")
    [call] = script(chat(["apply_patch"])).tool_calls
    assert (call.type, call.arguments) == ("function", {"input": "*** Begin Patch"})


# --- through the proxy, each API in its own shape ------------------------------------------------


@contextmanager
def scripted(tmp_path: Path, steps: list[Any]) -> Iterator[tuple[TestUpstream, ProxyServer]]:
    script = ToolScript(parse_tool_script(steps), describe_request)
    with TestUpstream(responder=RoutingResponder(script)) as upstream:
        settings = Settings(
            upstream=upstream.base_url, port=0, db=tmp_path / "c.db", context_window=16_000
        )
        with ProxyServer(settings) as proxy:
            yield upstream, proxy


def sdk(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)


def claude(proxy: ProxyServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key="k", max_retries=0
    )


@pytest.mark.parametrize("stream", [False, True])
def test_chat_completions_carry_the_scripted_calls(tmp_path: Path, stream: bool) -> None:
    with scripted(tmp_path, [PARALLEL, {"text": "finished"}]) as (_, proxy):
        messages: list[Any] = [{"role": "user", "content": "look"}]
        if stream:
            chunks = sdk(proxy).chat.completions.create(
                model=GPT, messages=messages, tools=CHAT_TOOLS, stream=True
            )
            calls: dict[int, dict[str, Any]] = {}
            finish = None
            for chunk in chunks:
                for delta in chunk.choices[0].delta.tool_calls or ():
                    entry = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                    entry["id"] = entry["id"] or delta.id
                    assert delta.function is not None
                    entry["name"] += delta.function.name or ""
                    entry["arguments"] += delta.function.arguments or ""
                finish = chunk.choices[0].finish_reason or finish
            got = [(c["id"], c["name"], json.loads(c["arguments"])) for c in calls.values()]
        else:
            reply = sdk(proxy).chat.completions.create(
                model=GPT, messages=messages, tools=CHAT_TOOLS
            )
            finish = reply.choices[0].finish_reason
            got = [
                (c.id, c.function.name, json.loads(c.function.arguments))
                for c in reply.choices[0].message.tool_calls or ()
                if c.type == "function"
            ]
        assert finish == "tool_calls"
        assert [(name, args) for _, name, args in got] == [
            ("read_file", {"path": "a.py"}),
            ("grep", {"path": "b.py"}),
        ]
        assert len({call_id for call_id, _, _ in got}) == 2
        outputs: list[Any] = [
            {"role": "tool", "tool_call_id": i, "content": "1"} for i, _, _ in got
        ]
        calls_message: Any = {
            "role": "assistant",
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for i, n, a in got
            ],
        }
        done = sdk(proxy).chat.completions.create(
            model=GPT, messages=[*messages, calls_message, *outputs], tools=CHAT_TOOLS
        )
        assert done.choices[0].message.content == "finished"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_carry_function_and_custom_calls_as_items(tmp_path: Path, stream: bool) -> None:
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
    steps = [PARALLEL, {"tool": "apply_patch", "input": patch}]
    tools = [*RESPONSES_TOOLS, {"type": "custom", "name": "apply_patch"}]
    with scripted(tmp_path, steps) as (_, proxy):
        outputs: list[Any] = []
        for _ in steps:
            if stream:
                with sdk(proxy).responses.stream(model=GPT, input="go", tools=tools) as events:
                    kinds = {event.type for event in events}
                    outputs.append(events.get_final_response().output)
                assert kinds & {
                    "response.function_call_arguments.done",
                    "response.custom_tool_call_input.done",
                }
            else:
                outputs.append(
                    sdk(proxy).responses.create(model=GPT, input="go", tools=tools).output
                )
    first, second = outputs
    assert [(item.type, getattr(item, "name", None)) for item in first] == [
        ("function_call", "read_file"),
        ("function_call", "grep"),
    ]
    assert [json.loads(getattr(item, "arguments", "")) for item in first] == [
        {"path": "a.py"},
        {"path": "b.py"},
    ]
    [custom] = second
    assert custom.type == "custom_tool_call" and custom.name == "apply_patch"
    assert custom.input == patch
    call_ids = [getattr(item, "call_id", None) for item in (*first, custom)]
    assert None not in call_ids and len(set(call_ids)) == 3


@pytest.mark.parametrize("stream", [False, True])
def test_messages_carry_the_scripted_calls_as_tool_use_blocks(tmp_path: Path, stream: bool) -> None:
    with scripted(tmp_path, [PARALLEL, READ]) as (_, proxy):
        blocks = []
        for _ in range(2):
            kwargs: dict[str, Any] = {
                "model": CLAUDE,
                "max_tokens": 1_000,
                "messages": [{"role": "user", "content": "look"}],
                "tools": MESSAGES_TOOLS,
            }
            if stream:
                with claude(proxy).messages.stream(**kwargs) as events:
                    message = events.get_final_message()
            else:
                message = claude(proxy).messages.create(**kwargs)
            assert message.stop_reason == "tool_use"
            blocks.extend(message.content)
    uses = [block for block in blocks if block.type == "tool_use"]
    assert [(u.name, u.input) for u in uses] == [
        ("read_file", {"path": "a.py"}),
        ("grep", {"path": "b.py"}),
        ("read_file", {"path": "a.py"}),
    ]
    assert len({u.id for u in uses}) == 3


def test_a_call_id_tag_keeps_ids_apart_across_servers() -> None:
    ids = []
    for tag in ("aa11_", "bb22_"):
        with TestUpstream(responder=lambda body: Reply.call("read_file", {"path": "a"})) as up:
            up.call_id_tag = tag
            client = openai.OpenAI(base_url=up.base_url, api_key="k", max_retries=0)
            reply = client.chat.completions.create(
                model=GPT, messages=[{"role": "user", "content": "go"}], tools=CHAT_TOOLS
            )
            [call] = reply.choices[0].message.tool_calls or []
            ids.append(call.id)
            message = anthropic.Anthropic(base_url=up.root_url, api_key="k", max_retries=0)
            block = message.messages.create(
                model=CLAUDE,
                max_tokens=100,
                messages=[{"role": "user", "content": "go"}],
                tools=MESSAGES_TOOLS,
            ).content[0]
            assert block.type == "tool_use" and tag in block.id
    assert ids == ["call_aa11_1", "call_bb22_1"]
