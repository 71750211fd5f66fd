"""The recall tool loop through the proxy on the Responses API, with the real openai SDK's
``client.responses`` against the test upstream (the whole input each turn): offered only once
the conversation has a compaction, recall calls answered and the model asked again (streamed or
not), recall beside the agent's calls held and put back into the turn on the next request,
tenants kept apart, the rounds bounded, and no tool for a stream the upstream stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import Reply, ScriptedToolAgent, TestUpstream, ToolCallSpec
from context_summarizer.testing.state import RecordedRequest

from .conftest import ProxyFactory

MODEL = "gpt-4o-mini"
KEY_A = "sk-test-alpha-0123456789abcdef"
KEY_B = "sk-test-bravo-0123456789abcdef"
BASH: dict[str, Any] = {
    "type": "function",
    "name": "bash",
    "description": "Run a shell command.",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    "strict": False,
}
INSTRUCTIONS = "You are a careful coding agent."
NEEDLE = "src/billing/module_2.py raised ValueError: bad total 2"


@pytest.fixture
def agent() -> ScriptedToolAgent:
    return ScriptedToolAgent([])


@pytest.fixture
def upstream(agent: ScriptedToolAgent) -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=agent) as server:
        yield server


def client(proxy: ProxyServer, key: str = KEY_A) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)


def history(turns: int = 12, size: int = 900) -> list[dict[str, Any]]:
    """A tool-using conversation of about ``turns * 2 * size`` tokens, as Responses input."""
    items: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing invoice test."}]
    for turn in range(turns):
        call_id = f"call_{turn}"
        arguments = json.dumps({"cmd": f"t {turn}"})
        items.append(
            {"type": "function_call", "call_id": call_id, "name": "bash", "arguments": arguments}
        )
        output = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        output += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        items.append({"type": "function_call_output", "call_id": call_id, "output": output})
    items.append({"role": "user", "content": "Go on."})
    return items


def ask(proxy: ProxyServer, items: list[Any], *, stream: bool, key: str = KEY_A) -> Response:
    """One turn through ``client.responses``: streamed (store off, the final response the SDK's
    stream reader builds, checking every event) or not (stored, as by default)."""
    arguments: dict[str, Any] = {
        "model": MODEL,
        "instructions": INSTRUCTIONS,
        "input": items,
        "tools": [BASH],
    }
    if stream:
        with client(proxy, key).responses.stream(**arguments, store=False) as events:
            return events.get_final_response()
    return client(proxy, key).responses.create(**arguments)


def agent_requests(upstream: TestUpstream) -> list[RecordedRequest]:
    return [
        r for r in upstream.requests if r.path.rstrip("/") == "/v1/responses" and not r.is_summary
    ]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools") or []]


def output_of(response: Response) -> list[dict[str, Any]]:
    """The response's output items as the client sends them back."""
    return [item.model_dump(exclude_none=True) for item in response.output]


def recall(query: str, call_id: str = "call_recall_1") -> ToolCallSpec:
    return ToolCallSpec(id=call_id, name="recall", arguments=json.dumps({"query": query}))


def bash(call_id: str = "call_bash_9") -> ToolCallSpec:
    return ToolCallSpec(id=call_id, name="bash", arguments=json.dumps({"cmd": "pytest"}))


def test_no_tool_before_a_compaction(start_proxy: ProxyFactory, upstream: TestUpstream) -> None:
    proxy = start_proxy()
    ask(proxy, history(turns=2), stream=False)
    (sent,) = agent_requests(upstream)
    assert tool_names(sent.body) == ["bash"]
    assert "recall" not in json.dumps(sent.body)


def test_no_tool_for_a_stream_the_upstream_stores(
    start_proxy: ProxyFactory, upstream: TestUpstream
) -> None:
    proxy = start_proxy()
    items = history()
    arguments: dict[str, Any] = {"model": MODEL, "input": items, "tools": [BASH]}
    with client(proxy).responses.stream(**arguments) as events:
        events.get_final_response()
    sent = agent_requests(upstream)[-1].body
    assert len(sent["input"]) < len(items)  # compacted, yet not offered
    assert tool_names(sent) == ["bash"] and "recall" not in json.dumps(sent)


@pytest.mark.parametrize("stream", [False, True])
def test_recall_alone_is_answered_and_the_model_asked_again(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(content="Let me check.", tool_calls=[recall("module_2.py")])]
    agent.final = "The error was bad total 2."
    proxy = start_proxy()
    if stream:
        response = ask(proxy, history(), stream=True)
        assert response.output_text == "Let me check.The error was bad total 2."
    else:
        raw = client(proxy).responses.with_raw_response.create(
            model=MODEL, instructions=INSTRUCTIONS, input=history(), tools=[BASH]
        )
        assert raw.headers["x-summarizer-compacted"] == "true"
        assert raw.headers["x-summarizer-recall-rounds"] == "1"
        response = raw.parse()
        assert response.output_text == "The error was bad total 2."
    assert response.status == "completed"
    assert not [item for item in response.output if item.type == "function_call"]
    assert "call_recall_1" not in response.model_dump_json()
    first, second = agent_requests(upstream)[-2:]
    assert tool_names(first.body) == ["bash", "recall"]
    assert "`recall` tool" in json.dumps(first.body)  # the summary lists its span under it
    assert first.body["input"] == second.body["input"][: len(first.body["input"])]
    called, answered = second.body["input"][-2:]
    assert called["type"] == "function_call" and called["name"] == "recall"
    assert answered["type"] == "function_call_output"
    assert answered["call_id"] == "call_recall_1" and NEEDLE in answered["output"]


@pytest.mark.parametrize("stream", [False, True])
def test_recall_beside_the_agents_call_waits_for_the_next_request(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(tool_calls=[recall("module_2.py"), bash()])]
    agent.final = "Fixed."
    proxy = start_proxy()
    items = history()
    response = ask(proxy, items, stream=stream)
    shown = output_of(response)
    calls = [item for item in shown if item["type"] == "function_call"]
    assert [(c["name"], c["call_id"]) for c in calls] == [("bash", "call_bash_9")]
    assert "call_recall_1" not in json.dumps(shown)
    assert len(agent_requests(upstream)) == 1  # not asked again: the client runs bash first

    result = {"type": "function_call_output", "call_id": "call_bash_9", "output": "1 failed"}
    follow = [*items, *shown, result, {"role": "user", "content": "And now?"}]
    assert ask(proxy, follow, stream=stream).output_text == "Fixed."
    sent = agent_requests(upstream)[-1].body["input"]
    put_back = [i for i, item in enumerate(sent) if item.get("call_id") == "call_recall_1"]
    assert put_back, "the held recall exchange was not put back"
    at = put_back[0]
    assert [(item["type"], item["call_id"]) for item in sent[at : at + 4]] == [
        ("function_call", "call_recall_1"),
        ("function_call", "call_bash_9"),
        ("function_call_output", "call_recall_1"),
        ("function_call_output", "call_bash_9"),
    ]
    assert NEEDLE in sent[at + 2]["output"]
    assert sent[at + 3] == result

    # Another tenant sending the same turn does not get the held result.
    ask(proxy, follow, stream=stream, key=KEY_B)
    other = agent_requests(upstream)[-1].body
    assert "call_recall_1" not in json.dumps(other)


def test_rounds_are_bounded(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent
) -> None:
    agent.steps = [Reply(tool_calls=[recall(f"module_{i}.py", f"call_r{i}")]) for i in range(9)]
    proxy = start_proxy()
    raw = client(proxy).responses.with_raw_response.create(
        model=MODEL, instructions=INSTRUCTIONS, input=history(), tools=[BASH]
    )
    response = raw.parse()
    assert raw.headers["x-summarizer-recall-rounds"] == "4"
    assert len(agent_requests(upstream)) == 5
    assert not [item for item in response.output if item.type == "function_call"]
    last = agent_requests(upstream)[-1].body["input"][-1]
    assert last["type"] == "function_call_output"
    assert "last recall this turn allows" in last["output"]
