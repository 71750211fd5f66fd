"""The recall tool loop of ``wrap``: the real openai SDK (sync and async) against the test
upstream, a conversation compacted, the model calling recall alone (asked again, streamed or
not) or beside the caller's own tool (held, put back on the next call)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

import context_summarizer
from context_summarizer.testing import Reply, ScriptedToolAgent, TestUpstream

from .conftest import message_from_stream
from .test_recall_proxy import BASH, NEEDLE, bash, history, recall, tool_names

MODEL = "gpt-4o-mini"


@pytest.fixture
def agent() -> ScriptedToolAgent:
    return ScriptedToolAgent([])


@pytest.fixture
def upstream(agent: ScriptedToolAgent) -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=agent) as server:
        yield server


def agent_bodies(upstream: TestUpstream) -> list[dict[str, Any]]:
    return [
        r.body
        for r in upstream.requests
        if r.path.endswith("/chat/completions") and r.body.get("tool_choice") != "none"
    ]


def wrapped(upstream: TestUpstream, *, asynchronous: bool = False, **config: Any) -> Any:
    kind = openai.AsyncOpenAI if asynchronous else openai.OpenAI
    client = kind(base_url=upstream.base_url, api_key="sk-test", max_retries=0)
    return context_summarizer.wrap(client, context_window=16_000, **config)


def check_second_round(upstream: TestUpstream) -> None:
    first, second = agent_bodies(upstream)[-2:]
    assert tool_names(first) == ["bash", "recall"]
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][-1]["role"] == "tool" and NEEDLE in second["messages"][-1]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_recall_alone_sync(upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool) -> None:
    agent.steps = [Reply(content="Checking. ", tool_calls=[recall("module_2.py")])]
    agent.final = "bad total 2."
    client = wrapped(upstream)
    answer = client.chat.completions.create(
        model=MODEL, messages=history(), tools=[BASH], stream=stream
    )
    if stream:
        message = message_from_stream(answer)
    else:
        assert isinstance(answer, openai.types.chat.ChatCompletion)
        assert answer.choices[0].finish_reason == "stop"
        message = answer.choices[0].message.model_dump()
    assert not message.get("tool_calls")
    # A stream relays the first round's text as it comes; a whole answer is the last round's.
    assert message["content"] == ("Checking. bad total 2." if stream else "bad total 2.")
    check_second_round(upstream)


@pytest.mark.parametrize("stream", [False, True])
def test_recall_alone_async(upstream: TestUpstream, agent: ScriptedToolAgent, stream: bool) -> None:
    agent.steps = [Reply(tool_calls=[recall("module_2.py")])]
    agent.final = "bad total 2."
    client = wrapped(upstream, asynchronous=True)

    async def run() -> dict[str, Any]:
        answer = await client.chat.completions.create(
            model=MODEL, messages=history(), tools=[BASH], stream=stream
        )
        if not stream:
            return dict(answer.choices[0].message.model_dump())
        chunks = [chunk async for chunk in answer]
        return message_from_stream(chunks)

    message = asyncio.run(run())
    assert not message.get("tool_calls") and message["content"] == "bad total 2."
    check_second_round(upstream)


def test_recall_beside_the_callers_tool_is_held_for_the_next_call(
    upstream: TestUpstream, agent: ScriptedToolAgent
) -> None:
    agent.steps = [Reply(tool_calls=[recall("module_2.py"), bash()])]
    client = wrapped(upstream)
    messages = history()
    answer = client.chat.completions.create(model=MODEL, messages=messages, tools=[BASH])
    calls = answer.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["bash"]
    turn = answer.choices[0].message.model_dump(exclude_none=True)
    result = {"role": "tool", "tool_call_id": calls[0].id, "content": "1 failed"}
    client.chat.completions.create(model=MODEL, messages=[*messages, turn, result], tools=[BASH])
    sent = agent_bodies(upstream)[-1]["messages"]
    at = next(i for i, m in enumerate(sent) if len(m.get("tool_calls") or ()) == 2)
    assert sent[at + 1]["tool_call_id"] == "call_recall_1" and NEEDLE in sent[at + 1]["content"]
    assert sent[at + 2] == result


def test_off(upstream: TestUpstream) -> None:
    client = wrapped(upstream, recall=False)
    client.chat.completions.create(model=MODEL, messages=history(), tools=[BASH])
    body = agent_bodies(upstream)[-1]
    assert tool_names(body) == ["bash"] and "span-" not in json.dumps(body)
