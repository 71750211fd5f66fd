"""The recall tool loop through the proxy on Anthropic's Messages API, with the real anthropic
SDK against the test upstream: offered only once the conversation has a compaction, recall
calls answered and the model asked again (streamed or not: the client reads one message),
recall beside the agent's ``tool_use`` held for the next request and put back into it, tenants
kept apart, and the rounds bounded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import Reply, ScriptedToolAgent, TestUpstream, ToolCallSpec
from context_summarizer.testing.state import RecordedRequest

from .conftest import ProxyFactory

MODEL = "claude-sonnet-4-5"
KEY_A = "sk-ant-test-alpha-0123456789abcdef"
KEY_B = "sk-ant-test-bravo-0123456789abcdef"
BASH = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}},
}
SYSTEM = "You are a careful coding agent."
NEEDLE = "src/billing/module_2.py raised ValueError: bad total 2"


@pytest.fixture
def agent() -> ScriptedToolAgent:
    return ScriptedToolAgent([])


@pytest.fixture
def upstream(agent: ScriptedToolAgent) -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=agent) as server:
        yield server


def client(proxy: ProxyServer, key: str = KEY_A) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key=key, max_retries=0
    )


def history(turns: int = 12, size: int = 900) -> list[dict[str, Any]]:
    """A tool-using conversation of about ``turns * 2 * size`` tokens, ending on a user turn
    (the last tool result and a request to go on)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing invoice test."}]
    for turn in range(turns):
        use_id = f"toolu_{turn:02d}"
        use = {"type": "tool_use", "id": use_id, "name": "bash", "input": {"cmd": f"t {turn}"}}
        messages.append({"role": "assistant", "content": [use]})
        output = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        output += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        result = {"type": "tool_result", "tool_use_id": use_id, "content": output}
        messages.append({"role": "user", "content": [result]})
    messages[-1]["content"].append({"type": "text", "text": "Go on."})
    return messages


def arguments(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 500,
        "system": SYSTEM,
        "tools": [BASH],
        "messages": messages,
    }


def ask(proxy: ProxyServer, messages: list[dict[str, Any]], *, stream: bool) -> dict[str, Any]:
    """The message the client gets (its final message, when streamed), as a dict."""
    if stream:
        with client(proxy).messages.stream(**arguments(messages)) as events:
            answer = events.get_final_message()
    else:
        answer = client(proxy).messages.create(**arguments(messages))
    return answer.model_dump(exclude_none=True)


def agent_requests(upstream: TestUpstream) -> list[RecordedRequest]:
    return [
        r
        for r in upstream.requests
        if r.path.rstrip("/").endswith("/v1/messages") and not r.is_summary
    ]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in body.get("tools") or []]


def uses(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks = [] if isinstance(content, str) else content
    return [block for block in blocks if block["type"] == "tool_use"]


def recall(query: str, use_id: str = "toolu_recall_1") -> ToolCallSpec:
    return ToolCallSpec(id=use_id, name="recall", arguments=json.dumps({"query": query}))


def bash(use_id: str = "toolu_bash_9") -> ToolCallSpec:
    return ToolCallSpec(id=use_id, name="bash", arguments=json.dumps({"cmd": "pytest"}))


def test_no_tool_before_a_compaction(start_proxy: ProxyFactory, upstream: TestUpstream) -> None:
    proxy = start_proxy()
    ask(proxy, history(turns=2), stream=False)
    (sent,) = agent_requests(upstream)
    assert tool_names(sent.body) == ["bash"]
    assert "recall" not in json.dumps(sent.body)


@pytest.mark.parametrize("stream", [False, True])
def test_recall_alone_is_answered_and_the_model_asked_again(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(content="Let me check.", tool_calls=[recall("module_2.py")])]
    agent.final = "The error was bad total 2."
    proxy = start_proxy()
    if stream:
        message = ask(proxy, history(), stream=True)
        # One message: the first round's text as it came, then the second round's.
        assert [block["text"] for block in message["content"]] == [
            "Let me check.",
            "The error was bad total 2.",
        ]
    else:
        raw = client(proxy).messages.with_raw_response.create(**arguments(history()))
        assert raw.headers["x-summarizer-compacted"] == "true"
        assert raw.headers["x-summarizer-recall-rounds"] == "1"
        assert raw.headers["x-summarizer-recall-calls"] == "1"
        message = raw.parse().model_dump(exclude_none=True)
        assert message["content"] == [{"type": "text", "text": "The error was bad total 2."}]
    assert not uses(message["content"]) and "recall" not in json.dumps(message)
    assert message["stop_reason"] == "end_turn"
    first, second = agent_requests(upstream)[-2:]
    assert tool_names(first.body) == ["bash", "recall"]
    assert tool_names(second.body) == ["bash", "recall"]
    assert "span-" in json.dumps(first.body["messages"])  # the summary names its spans
    before = len(first.body["messages"])
    assert second.body["messages"][:before] == first.body["messages"]
    assistant, user = second.body["messages"][before:]
    assert [(b["type"], b.get("name")) for b in assistant["content"]] == [
        ("text", None),
        ("tool_use", "recall"),
    ]
    assert assistant["content"][1]["input"] == {"query": "module_2.py"}
    (answered,) = user["content"]
    assert answered["type"] == "tool_result" and answered["tool_use_id"] == "toolu_recall_1"
    assert NEEDLE in answered["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_recall_beside_the_agents_tool_use_waits_for_the_next_request(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(content="Two things.", tool_calls=[recall("module_2.py"), bash()])]
    agent.final = "Fixed."
    proxy = start_proxy()
    messages = history()
    message = ask(proxy, messages, stream=stream)
    assert [(b["type"], b.get("id")) for b in message["content"]] == [
        ("text", None),
        ("tool_use", "toolu_bash_9"),
    ]
    assert message["stop_reason"] == "tool_use"
    assert len(agent_requests(upstream)) == 1  # not asked again: the client runs bash first

    result = {"type": "tool_result", "tool_use_id": "toolu_bash_9", "content": "1 failed"}
    turn = {"role": "assistant", "content": message["content"]}
    reply = {"role": "user", "content": [result, {"type": "text", "text": "And now?"}]}
    follow = [*messages, turn, reply]
    answer = client(proxy).messages.create(**arguments(follow))
    assert [block.model_dump(exclude_none=True) for block in answer.content] == [
        {"type": "text", "text": "Fixed."}
    ]
    sent = agent_requests(upstream)[-1].body["messages"]
    at = next(i for i, m in enumerate(sent) if len(uses(m["content"])) == 2)
    assert [b["id"] for b in uses(sent[at]["content"])] == ["toolu_recall_1", "toolu_bash_9"]
    assert sent[at]["content"][0]["text"] == "Two things."
    recalled, own, asked = sent[at + 1]["content"]
    assert recalled["type"] == "tool_result" and recalled["tool_use_id"] == "toolu_recall_1"
    assert NEEDLE in recalled["content"]
    assert {k: v for k, v in own.items() if k != "cache_control"} == result
    assert asked["text"] == "And now?"

    # Again: put back the same way (the conversation reads the same from request to request).
    client(proxy).messages.create(**arguments(follow))
    assert agent_requests(upstream)[-1].body["messages"][at : at + 2] == sent[at : at + 2]

    # Another tenant sending the same turn does not get the held result.
    client(proxy, KEY_B).messages.create(**arguments(follow))
    other = agent_requests(upstream)[-1].body
    assert "toolu_recall_1" not in json.dumps(other)
    assert NEEDLE not in json.dumps(other["messages"][-2:])


@pytest.mark.parametrize("stream", [False, True])
def test_rounds_are_bounded(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(tool_calls=[recall(f"module_{i}.py", f"toolu_r{i}")]) for i in range(9)]
    proxy = start_proxy()
    if stream:
        message = ask(proxy, history(), stream=True)
    else:
        raw = client(proxy).messages.with_raw_response.create(**arguments(history()))
        assert raw.headers["x-summarizer-recall-rounds"] == "4"
        message = raw.parse().model_dump(exclude_none=True)
    assert len(agent_requests(upstream)) == 5
    assert message["stop_reason"] == "end_turn"
    # No block is left once recall is out: one text block says so (an empty assistant
    # message would be refused when the client sends it back).
    assert [block["type"] for block in message["content"]] == ["text"]
    assert message["content"][0]["text"].startswith("(No answer:")
    last = agent_requests(upstream)[-1].body["messages"][-1]["content"][-1]
    assert last["tool_use_id"] == "toolu_r3"
    assert "last recall this turn allows" in last["content"]
    said = {"role": "assistant", "content": message["content"]}
    later = [*history(), said, {"role": "user", "content": "Go on."}]
    client(proxy).messages.create(**arguments(later))
    assert upstream.requests[-1].status == 200
