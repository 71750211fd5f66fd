"""The recall tool loop through the proxy on chat completions, with the real openai SDK against
the test upstream: offered only once the conversation has a compaction, recall calls answered
and the model asked again (streamed or not), recall beside the agent's calls held for the next
request, bounds, a per-model switch, and tenants kept apart."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import openai
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import Reply, ScriptedToolAgent, TestUpstream, ToolCallSpec
from context_summarizer.testing.state import RecordedRequest

from .conftest import ProxyFactory, message_from_stream

MODEL = "gpt-4o-mini"
KEY_A = "sk-test-alpha-0123456789abcdef"
KEY_B = "sk-test-bravo-0123456789abcdef"
BASH = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
    },
}
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
    """A tool-using conversation of about ``turns * 2 * size`` tokens."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the failing invoice test."},
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
                        "function": {"name": "bash", "arguments": json.dumps({"cmd": f"t {turn}"})},
                    }
                ],
            }
        )
        body = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        body += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": body})
    messages.append({"role": "user", "content": "Go on."})
    return messages


def agent_requests(upstream: TestUpstream) -> list[RecordedRequest]:
    return [
        r
        for r in upstream.requests
        if r.path.endswith("/chat/completions") and r.body.get("tool_choice") != "none"
    ]


def tool_names(body: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def recall(query: str, call_id: str = "call_recall_1") -> ToolCallSpec:
    return ToolCallSpec(id=call_id, name="recall", arguments=json.dumps({"query": query}))


def test_no_tool_before_a_compaction(start_proxy: ProxyFactory, upstream: TestUpstream) -> None:
    proxy = start_proxy()
    messages = history(turns=2)
    client(proxy).chat.completions.create(model=MODEL, messages=messages, tools=[BASH])
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
        chunks = client(proxy).chat.completions.create(
            model=MODEL, messages=history(), tools=[BASH], stream=True
        )
        message = message_from_stream(chunks)
    else:
        raw = client(proxy).chat.completions.with_raw_response.create(
            model=MODEL, messages=history(), tools=[BASH]
        )
        assert raw.headers["x-summarizer-compacted"] == "true"
        assert raw.headers["x-summarizer-recall-rounds"] == "1"
        completion = raw.parse()
        message = completion.choices[0].message.model_dump()
        assert completion.choices[0].finish_reason == "stop"
    assert not message.get("tool_calls")
    assert message["content"].endswith("The error was bad total 2.")
    first, second = agent_requests(upstream)[-2:]
    assert tool_names(first.body) == ["bash", "recall"]
    (summary,) = [m for m in first.body["messages"] if "span-" in str(m.get("content"))]
    assert "`recall` tool" in summary["content"]  # the summary lists its span under the tool
    assert first.body["messages"] == second.body["messages"][: len(first.body["messages"])]
    answered = second.body["messages"][-2:]
    assert answered[0]["tool_calls"][0]["function"]["name"] == "recall"
    assert answered[1]["role"] == "tool" and NEEDLE in answered[1]["content"]


def bash(call_id: str = "call_bash_9") -> ToolCallSpec:
    return ToolCallSpec(id=call_id, name="bash", arguments=json.dumps({"cmd": "pytest"}))


@pytest.mark.parametrize("stream", [False, True])
def test_recall_beside_the_agents_calls_waits_for_the_next_request(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool
) -> None:
    agent.steps = [Reply(tool_calls=[recall("module_2.py"), bash()])]
    agent.final = "Fixed."
    proxy = start_proxy()
    messages = history()
    if stream:
        chunks = client(proxy).chat.completions.create(
            model=MODEL, messages=messages, tools=[BASH], stream=True
        )
        message = message_from_stream(chunks)
    else:
        completion = client(proxy).chat.completions.create(
            model=MODEL, messages=messages, tools=[BASH]
        )
        assert completion.choices[0].finish_reason == "tool_calls"
        message = completion.choices[0].message.model_dump(exclude_none=True)
    calls = message["tool_calls"]
    assert [c["function"]["name"] for c in calls] == ["bash"]
    assert calls[0]["id"] == "call_bash_9"
    assert len(agent_requests(upstream)) == 1  # not asked again: the client runs bash first

    message = {"role": "assistant", "content": message.get("content"), "tool_calls": calls}
    result = {"role": "tool", "tool_call_id": "call_bash_9", "content": "1 failed"}
    follow = [*messages, message, result, {"role": "user", "content": "And now?"}]
    answer = client(proxy).chat.completions.create(model=MODEL, messages=follow, tools=[BASH])
    assert answer.choices[0].message.content == "Fixed."
    sent = agent_requests(upstream)[-1].body["messages"]
    at = next(i for i, m in enumerate(sent) if m.get("tool_calls") and len(m["tool_calls"]) == 2)
    assert [c["id"] for c in sent[at]["tool_calls"]] == ["call_recall_1", "call_bash_9"]
    assert sent[at + 1]["tool_call_id"] == "call_recall_1" and NEEDLE in sent[at + 1]["content"]
    assert sent[at + 2] == result

    # Another tenant sending the same turn does not get the held result.
    client(proxy, KEY_B).chat.completions.create(model=MODEL, messages=follow, tools=[BASH])
    other = agent_requests(upstream)[-1].body["messages"]
    assert all(m.get("tool_call_id") != "call_recall_1" for m in other)

    # A request sent with compaction off goes as the client wrote it, nothing put back (and,
    # over the window uncompacted, the upstream's refusal comes back as it said it).
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client(proxy).chat.completions.create(
            model=MODEL,
            messages=follow,
            tools=[BASH],
            extra_headers={"x-summarizer-compact": "off"},
        )
    assert upstream.requests[-1].body["messages"] == follow


def test_rounds_are_bounded(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent
) -> None:
    agent.steps = [Reply(tool_calls=[recall(f"module_{i}.py", f"call_r{i}")]) for i in range(9)]
    proxy = start_proxy()
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=history(), tools=[BASH]
    )
    completion = raw.parse()
    assert raw.headers["x-summarizer-recall-rounds"] == "4"
    assert len(agent_requests(upstream)) == 5
    assert completion.choices[0].finish_reason == "stop"
    assert not completion.choices[0].message.tool_calls
    last = agent_requests(upstream)[-1].body["messages"][-1]
    assert "last recall this turn allows" in last["content"]


def test_a_hostile_query_is_bounded(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent
) -> None:
    catastrophic = ToolCallSpec(
        id="call_evil",
        name="recall",
        arguments=json.dumps({"query": "(a+)+$|(x*)*y|line", "regex": True}),
    )
    agent.steps = [Reply(tool_calls=[catastrophic])]
    proxy = start_proxy()
    client(proxy).chat.completions.create(model=MODEL, messages=history(), tools=[BASH])
    answered = agent_requests(upstream)[-1].body["messages"][-1]
    assert answered["tool_call_id"] == "call_evil"
    assert len(answered["content"]) < 9_000  # bounded, whatever matched


def test_another_tenants_span_cannot_be_read(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent
) -> None:
    proxy = start_proxy()
    client(proxy).chat.completions.create(model=MODEL, messages=history(), tools=[BASH])
    summary = next(
        m["content"] for m in agent_requests(upstream)[-1].body["messages"] if "span-" in str(m)
    )
    span = summary[summary.index("span-") : summary.index("span-") + 17]
    other = history(turns=12, size=700)
    read = ToolCallSpec(id="call_read", name="recall", arguments=json.dumps({"span": span}))
    agent.steps = [Reply(content="first"), Reply(tool_calls=[read])]
    client(proxy, KEY_B).chat.completions.create(model=MODEL, messages=other, tools=[BASH])
    answered = agent_requests(upstream)[-1].body["messages"][-1]
    assert answered["tool_call_id"] == "call_read"
    assert answered["content"].startswith("recall failed")
    assert NEEDLE not in answered["content"]


def test_off_per_model_and_for_a_forced_tool_choice(
    start_proxy: ProxyFactory, upstream: TestUpstream, tmp_path: Any
) -> None:
    proxy = start_proxy(models=[{"name": MODEL, "recall": False}])
    client(proxy).chat.completions.create(model=MODEL, messages=history(), tools=[BASH])
    sent = agent_requests(upstream)[-1].body
    assert tool_names(sent) == ["bash"] and "span-" not in json.dumps(sent)

    other = start_proxy(db=tmp_path / "other.db")
    client(other).chat.completions.create(
        model=MODEL, messages=history(), tools=[BASH], tool_choice="required"
    )
    sent = agent_requests(upstream)[-1].body
    assert tool_names(sent) == ["bash"] and "span-" not in json.dumps(sent)


def test_metrics_and_show_say_what_was_recalled(
    start_proxy: ProxyFactory, upstream: TestUpstream, agent: ScriptedToolAgent, tmp_path: Any
) -> None:
    agent.steps = [Reply(tool_calls=[recall("module_2.py")])]
    proxy = start_proxy(ui=True)
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=history(), tools=[BASH]
    )
    raw.parse()
    metrics = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert 'summarizer_recall_calls_total{api="chat",outcome="asked_again"} 1.0' in metrics
    assert 'summarizer_recall_rounds_total{api="chat"} 1.0' in metrics
    chars = next(
        line for line in metrics.splitlines() if line.startswith("summarizer_recall_chars_total")
    )
    assert float(chars.split()[-1]) > len(NEEDLE)

    session = raw.headers["x-summarizer-session"]
    sent = agent_requests(upstream)[-1].body["messages"][-1]["content"]
    span = sent[1 : sent.index(",")]  # "[span-..., message N, tool]"
    assert span.startswith("span-")
    store = str(tmp_path / "checkpoints.db")
    deadline = time.monotonic() + 10
    while True:  # the activity log is written off the answer's path
        shown = CliRunner().invoke(app, ["show", session, "--store", store])
        if "recall:" in shown.output or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert f"recall: 1 calls answered; spans read back (requests): {span} (1)" in shown.output
    page = f"{proxy.base_url.removesuffix('/v1')}/ui/api/sessions/{session}"
    view = httpx2.get(page, headers={"authorization": f"Bearer {KEY_A}"}).json()
    assert view["recall_calls"] == 1 and view["recalled"] == {span: 1}
    other = httpx2.get(page, headers={"authorization": f"Bearer {KEY_B}"})
    assert other.status_code == 404  # another tenant does not see what was recalled


def test_the_tool_is_counted_when_it_is_offered_and_only_then(
    start_proxy: ProxyFactory, upstream: TestUpstream, tmp_path: Any
) -> None:
    on, off = start_proxy(), start_proxy(db=tmp_path / "off.db", recall=False)
    small = history(turns=2)
    estimates = [
        client(proxy)
        .chat.completions.with_raw_response.create(model=MODEL, messages=small, tools=[BASH])
        .headers["x-summarizer-prompt-tokens"]
        for proxy in (on, off)
    ]
    # Not offered yet: the estimate is what goes upstream, as with recall off (a definition
    # counted but not sent would teach the calibration to estimate short).
    assert estimates[0] == estimates[1]
    raw = client(on).chat.completions.with_raw_response.create(
        model=MODEL, messages=history(), tools=[BASH]
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "true"
    sent = agent_requests(upstream)[-1]
    assert tool_names(sent.body) == ["bash", "recall"]
    estimate = int(raw.headers["x-summarizer-prompt-tokens"])
    assert sent.prompt_tokens is not None
    assert abs(estimate - sent.prompt_tokens) <= 0.03 * sent.prompt_tokens
