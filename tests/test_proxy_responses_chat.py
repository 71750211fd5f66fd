"""``/v1/responses`` served by a chat-completions-only upstream (``--responses-upstream chat``):
the proxy translates each request to a chat completion and builds the Response, whole or
streamed, with the real ``openai`` SDK reading it (the Agents SDK's run on such an upstream is in
``test_proxy_responses``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from context_summarizer.cli.demo_messages import texts
from context_summarizer.testing import ScriptedToolAgent, TestUpstream
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory
from .test_proxy_responses import KEY, MODEL, openai_client, responses_requests, run_session


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000) as server:
        yield server


def chat_requests(upstream: TestUpstream, *, summary: bool = False) -> list[Any]:
    return [
        r for r in upstream.requests if r.path == "/v1/chat/completions" and r.is_summary == summary
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_session_on_a_chat_only_upstream(
    upstream: TestUpstream, start_proxy: ProxyFactory, stream: bool
) -> None:
    session = CodingSession(turns=60, seed=31)
    agent = ScriptedToolAgent(session.steps)
    upstream.responder = agent
    proxy = start_proxy(context_window=16_000, responses_upstream="chat")
    items = run_session(proxy, session, steps=60, stream=stream)
    assert agent.finished
    assert items[-1]["type"] == "message"
    assert items[-1]["content"][0]["text"] == session.steps[-1]
    assert not responses_requests(upstream)  # the upstream only ever saw chat completions
    agents = chat_requests(upstream)
    assert len(agents) == 61 and all(r.status == 200 for r in upstream.requests)
    assert len(chat_requests(upstream, summary=True)) >= 2
    assert max(r.prompt_tokens or 0 for r in upstream.requests) <= 16_000
    final = "\n".join(texts(agents[-1].body["messages"]))
    for fact in session.planted:
        assert fact.text in final, fact.text
    assert agents[0].body["messages"][0] == {"role": "system", "content": session.system["content"]}


def test_what_a_chat_upstream_cannot_take_is_left_out(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    upstream.responder = ScriptedToolAgent([], final="done")
    proxy = start_proxy(responses_upstream="chat")
    items = [
        {"role": "user", "content": "Look it up."},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "function_call", "call_id": "c1", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ]
    tools = [
        {"type": "function", "name": "run", "parameters": {"type": "object"}},
        {"type": "web_search"},
    ]
    reply = openai_client(proxy).responses.create(
        model=MODEL,
        input=items,  # type: ignore[arg-type]
        tools=tools,  # type: ignore[arg-type]
        max_output_tokens=100,
        reasoning={"effort": "low"},
    )
    assert reply.output_text == "done" and reply.usage is not None
    sent = chat_requests(upstream)[-1].body
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool"]
    assert "x_opaque" not in json.dumps(sent) and "encrypted_content" not in json.dumps(sent)
    assert [t["function"]["name"] for t in sent["tools"]] == ["run"]
    assert sent["max_tokens"] == 100 and sent["reasoning_effort"] == "low"


def test_provider_state_is_refused_with_a_chat_upstream(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(responses_upstream="chat")
    answer = httpx2.post(
        f"{proxy.base_url}/responses",
        json={"model": MODEL, "input": "hi", "previous_response_id": "resp_1"},
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "previous_response_id"
    assert not upstream.requests
