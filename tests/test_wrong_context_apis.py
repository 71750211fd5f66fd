"""What goes upstream belongs to *that* conversation on the Messages and Responses front doors
too: a fork never gets its sibling's rewrite, a retry gets the same bytes, and two interleaved
conversations of one key never mix (the real proxy, the real anthropic and openai SDKs). The
Gemini front door's are in ``test_wrong_context_gemini``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from context_summarizer.testing import (
    RecordedRequest,
    RoutingResponder,
    TestUpstream,
    echo_responder,
)

from .conftest import ProxyFactory
from .test_proxy_messages import long_messages, without_cache_control

CLAUDE = "claude-sonnet-4-5"
GPT = "gpt-4o-mini"
KEY = "sk-test-forks-0123456789abcdef"
READ_FILE = {"type": "object", "properties": {"n": {"type": "integer"}}}


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=RoutingResponder(echo_responder)) as server:
        yield server


def agent_requests(upstream: TestUpstream, path: str) -> list[RecordedRequest]:
    return [r for r in upstream.requests if r.path.rstrip("/") == path and not r.is_summary]


def summary_count(upstream: TestUpstream) -> int:
    return sum(1 for r in upstream.requests if r.is_summary)


# -- Messages -------------------------------------------------------------------------------------


def send_messages(proxy: Any, messages: list[dict[str, Any]]) -> Any:
    client = anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key=KEY, max_retries=0
    )
    raw = client.messages.with_raw_response.create(
        model=CLAUDE,
        max_tokens=300,
        system="You are a careful coding agent.",
        tools=[{"name": "read_file", "description": "Read.", "input_schema": READ_FILE}],
        messages=messages,
    )
    raw.parse()
    return raw


def test_a_messages_fork_never_gets_its_siblings_rewrite(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    branch_a = long_messages(8)
    branch_a[-1] = {"role": "user", "content": "A-branch: go on with module_7."}
    assert send_messages(proxy, branch_a).headers["x-summarizer-compacted"] == "true"
    sent_a = agent_requests(upstream, "/v1/messages")[-1].body

    # B shares A's first four tool exchanges, then asks something else: short enough to fit.
    branch_b = [*long_messages(4)[:-1], {"role": "user", "content": "B-branch: which module?"}]
    assert send_messages(proxy, branch_b).headers["x-summarizer-compacted"] == "false"
    sent_b = agent_requests(upstream, "/v1/messages")[-1].body["messages"]
    assert without_cache_control(sent_b) == without_cache_control(branch_b)
    assert "A-branch" not in str(sent_b) and "module_7" not in str(sent_b)

    # A again (a retry): its checkpoint applies, no new summary, the same bytes upstream.
    summaries = summary_count(upstream)
    assert send_messages(proxy, branch_a).headers["x-summarizer-compacted"] == "false"
    assert summary_count(upstream) == summaries
    assert agent_requests(upstream, "/v1/messages")[-1].body == sent_a


def test_interleaved_messages_conversations_of_one_key_never_mix(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    sessions: dict[str, set[str]] = {"alpha": set(), "bravo": set()}
    for turns in (7, 8, 9, 10):
        for name in sessions:
            messages = long_messages(turns)
            # Each conversation's every message carries its own name.
            messages[0] = {"role": "user", "content": f"[{name}] Fix the failing {name} test."}
            messages[-1] = {"role": "user", "content": f"[{name}] go on."}
            for message in messages[1:-1]:
                for block in message["content"]:
                    if block["type"] == "tool_result":
                        block["content"] = f"[{name}] " + block["content"]
            raw = send_messages(proxy, messages)
            sessions[name].add(raw.headers["x-summarizer-session"])
            sent = str(agent_requests(upstream, "/v1/messages")[-1].body)
            other = "bravo" if name == "alpha" else "alpha"
            assert f"[{other}]" not in sent, f"{name} turn {turns} got {other}'s context"
            assert f"[{name}] go on." in sent
    assert all(len(ids) == 1 for ids in sessions.values())
    assert sessions["alpha"] != sessions["bravo"]
    assert summary_count(upstream) >= 2


# -- Responses ------------------------------------------------------------------------------------


def responses_input(turns: int, name: str, size: int = 900) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"role": "user", "content": f"[{name}] Fix the {name} test."}]
    for turn in range(turns):
        call_id = f"call_{turn:04d}"
        items.append(
            {
                "type": "function_call",
                "call_id": call_id,
                "name": "read_file",
                "arguments": f'{{"n": {turn}}}',
            }
        )
        output = f"[{name}] src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        output += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        items.append({"type": "function_call_output", "call_id": call_id, "output": output})
    items.append({"role": "user", "content": f"[{name}] go on."})
    return items


def send_responses(proxy: Any, items: list[dict[str, Any]]) -> Any:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    raw = client.responses.with_raw_response.create(
        model=GPT,
        instructions="You are a careful coding agent.",
        tools=[{"type": "function", "name": "read_file", "parameters": READ_FILE}],
        input=items,  # type: ignore[arg-type]
        max_output_tokens=300,
        store=False,
    )
    raw.parse()
    return raw


def test_a_responses_fork_never_gets_its_siblings_rewrite(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    branch_a = responses_input(8, "shared")
    branch_a[-1] = {"role": "user", "content": "A-branch: go on with module_7."}
    assert send_responses(proxy, branch_a).headers["x-summarizer-compacted"] == "true"
    sent_a = agent_requests(upstream, "/v1/responses")[-1].body

    branch_b = [*responses_input(4, "shared")[:-1], {"role": "user", "content": "B-branch?"}]
    assert send_responses(proxy, branch_b).headers["x-summarizer-compacted"] == "false"
    sent_b = agent_requests(upstream, "/v1/responses")[-1].body["input"]
    assert sent_b == branch_b
    assert "A-branch" not in str(sent_b) and "module_7" not in str(sent_b)

    summaries = summary_count(upstream)
    assert send_responses(proxy, branch_a).headers["x-summarizer-compacted"] == "false"
    assert summary_count(upstream) == summaries
    assert agent_requests(upstream, "/v1/responses")[-1].body == sent_a


def test_interleaved_responses_conversations_of_one_key_never_mix(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    for turns in (7, 8, 9, 10):
        for name, other in (("alpha", "bravo"), ("bravo", "alpha")):
            send_responses(proxy, responses_input(turns, name))
            sent = str(agent_requests(upstream, "/v1/responses")[-1].body)
            assert f"[{other}]" not in sent, f"{name} turn {turns} got {other}'s context"
            assert f"[{name}] go on." in sent
    assert summary_count(upstream) >= 2
