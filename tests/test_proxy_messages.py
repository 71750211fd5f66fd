"""``POST /v1/messages`` through the proxy, with the real ``anthropic`` SDK over real HTTP.

An agent loop on the SDK runs a long tool-using session through ``summarizer serve``'s app in
front of the test upstream's Messages route (Anthropic's validation, explicit-breakpoint cache
accounting): compactions happen, nothing is refused, every request fits the window, the
conversation is append-only between compactions, summary requests are the live conversation plus
one block, planted facts survive, and the managed breakpoints make the upstream's cache work.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from context_summarizer.cli.demo_messages import texts
from context_summarizer.core.config import CompactionConfig
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import Fault, RecordedRequest, ScriptedToolAgent, TestUpstream
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory

MODEL = "claude-sonnet-4-5"
KEY = "sk-ant-test-0123456789abcdef"


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000) as server:
        yield server


def anthropic_client(proxy: ProxyServer, key: str = KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key=key, max_retries=0
    )


def anthropic_tools(session: CodingSession) -> list[dict[str, Any]]:
    return [
        {
            "name": tool["function"]["name"],
            "description": tool["function"]["description"],
            "input_schema": tool["function"]["parameters"],
        }
        for tool in session.tools
    ]


def messages_requests(upstream: TestUpstream, *, summary: bool = False) -> list[RecordedRequest]:
    return [
        r
        for r in upstream.requests
        if r.path.rstrip("/").endswith("/v1/messages") and r.is_summary == summary
    ]


def without_cache_control(value: Any) -> Any:
    """``value`` with every ``cache_control`` key removed (breakpoints move between requests),
    and string content as the one text block the API reads it as (a breakpoint needs a block)."""
    if isinstance(value, dict):
        if isinstance(value.get("content"), str) and value.get("role") in ("user", "assistant"):
            value = {**value, "content": [{"type": "text", "text": value["content"]}]}
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def run_session(
    proxy: ProxyServer,
    session: CodingSession,
    *,
    steps: int,
    stream: bool = False,
    breakpoint_on_newest: bool = False,
) -> list[dict[str, Any]]:
    """An agent loop on the anthropic SDK: ``steps`` tool-using turns; the final history."""
    client = anthropic_client(proxy)
    messages: list[dict[str, Any]] = [{"role": "user", "content": session.task["content"]}]
    for turn in range(steps + 1):
        sent = copy.deepcopy(messages)
        if breakpoint_on_newest:  # a client managing its own cache, as Claude Code does
            last = sent[-1]
            if isinstance(last["content"], str):
                last["content"] = [{"type": "text", "text": last["content"]}]
            last["content"][-1]["cache_control"] = {"type": "ephemeral"}
        arguments: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 500,
            "system": session.system["content"],
            "tools": anthropic_tools(session),
            "messages": sent,
        }
        if stream:
            with client.messages.stream(**arguments) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**arguments)
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        messages.append({"role": "assistant", "content": content})
        calls = [block for block in content if block["type"] == "tool_use"]
        if not calls:
            break
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call["id"],
                        "content": session.execute(turn, call["name"], call["input"]),
                    }
                    for call in calls
                ],
            }
        )
    return messages


def test_a_long_session_on_the_anthropic_sdk_is_compacted_and_never_refused(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=120, seed=11)
    agent = ScriptedToolAgent(session.steps)
    upstream.responder = agent
    proxy = start_proxy(context_window=16_000)
    history = run_session(proxy, session, steps=120)
    assert agent.finished and history[-1]["role"] == "assistant"

    agents = messages_requests(upstream)
    summaries = messages_requests(upstream, summary=True)
    assert len(agents) == 121
    assert all(r.status == 200 for r in upstream.requests)
    assert len(summaries) >= 2
    assert max(r.prompt_tokens or 0 for r in upstream.requests) <= 16_000
    # Between compactions each request extends the one before (append-only, byte for byte
    # once the moving breakpoints are set aside), and its system and tools never change, but
    # for the recall tool, added after the agent's own at the first compaction.
    compacted_at = {0}
    recall_from = []
    for before, after in itertools.pairwise(agents):
        assert after.body["system"] == before.body["system"]
        if after.body["tools"] != before.body["tools"]:
            assert after.body["tools"][:-1] == before.body["tools"]
            assert after.body["tools"][-1]["name"] == "recall"
            recall_from.append(agents.index(after))
        old = without_cache_control(before.body["messages"])
        new = without_cache_control(after.body["messages"])
        if new[: len(old)] != old:
            compacted_at.add(agents.index(after))
    assert len(compacted_at) - 1 == len(summaries)
    assert len(recall_from) == 1 and recall_from[0] == sorted(compacted_at)[1]
    # A summary request is the live conversation plus one user text block, tools off.
    for summary in summaries:
        body = summary.body
        assert body["tool_choice"] == {"type": "none"}
        earlier = [r for r in agents if r.time <= summary.time]
        # The live requests' tools, the recall tool included once they are offered it.
        assert body["system"] == agents[0].body["system"]
        assert body["tools"] == earlier[-1].body["tools"]
        seen = without_cache_control(earlier[-1].body["messages"])
        asked = without_cache_control(body["messages"])
        *conversation, instruction = asked
        # The conversation the model saw last, extended, or the part of it being summarized.
        shorter = min(len(seen), len(conversation))
        assert conversation[:shorter] == seen[:shorter]
        assert instruction["role"] == "user" and instruction["content"][0]["type"] == "text"
    # Every planted fact is still in what the model sees at the end.
    final = "\n".join(texts(agents[-1].body["messages"]))
    for fact in session.planted:
        assert fact.text in final, fact.text
    # The proxy's breakpoints let the upstream serve most of each prompt from its cache.
    read = sum(r.cached_tokens or 0 for r in agents)
    total = sum(r.prompt_tokens or 0 for r in agents)
    assert read / total > 0.5


def test_streaming_relays_anthropic_events_and_compacts(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=40, seed=5)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=8_000)
    history = run_session(proxy, session, steps=40, stream=True)
    assert history[-1]["role"] == "assistant"
    assert messages_requests(upstream, summary=True)
    assert all(r.status == 200 for r in upstream.requests)
    assert max(r.prompt_tokens or 0 for r in upstream.requests) <= 8_000


def test_client_breakpoints_are_kept_and_none_added(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=6, seed=2)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy()
    run_session(proxy, session, steps=6, breakpoint_on_newest=True)
    for request in messages_requests(upstream):
        body = request.body
        marked = [
            block
            for message in body["messages"]
            if isinstance(message["content"], list)
            for block in message["content"]
            if "cache_control" in block
        ]
        assert len(marked) == 1 and marked[0] is not None
        assert isinstance(body["system"], str)  # the client's own, unmarked
        assert body["messages"][-1]["content"][-1].get("cache_control") == {"type": "ephemeral"}


def test_managed_breakpoints_sit_on_system_and_newest_message(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    session = CodingSession(turns=3, seed=2)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy()
    run_session(proxy, session, steps=3)
    first, *rest = messages_requests(upstream)
    assert first.body["system"] == [
        {"type": "text", "text": session.system["content"], "cache_control": {"type": "ephemeral"}}
    ]
    for request in (first, *rest):
        assert request.body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # Once the earlier prefix is long enough to cache, each request reads it.
    requests = (first, *rest)
    cacheable = [
        after
        for before, after in itertools.pairwise(requests)
        if (before.prompt_tokens or 0) > 1100
    ]
    assert cacheable and all((r.cached_tokens or 0) > 0 for r in cacheable)


def test_bad_requests_get_anthropics_error_shape(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    url = f"{proxy.base_url}/messages"
    headers = {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
    }
    cases = [
        b"{not json",
        json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode(),
        json.dumps({"model": MODEL, "max_tokens": 10, "messages": []}).encode(),
        json.dumps(
            {"model": MODEL, "max_tokens": 10, "messages": [{"role": "robot", "content": "x"}]}
        ).encode(),
    ]
    for raw in cases:
        answer = httpx2.post(url, content=raw, headers=headers)
        assert answer.status_code == 400, raw
        body = answer.json()
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["message"]
    assert not messages_requests(upstream)  # nothing malformed went upstream
    with pytest.raises(anthropic.BadRequestError) as raised:
        anthropic_client(proxy).messages.create(
            model=MODEL,
            max_tokens=10,
            messages=[{"role": "robot", "content": "x"}],  # type: ignore[typeddict-item]
        )
    assert "role" in str(raised.value)


def test_the_api_key_keys_the_tenant_and_reaches_the_upstream(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    upstream.responder = ScriptedToolAgent([], final="hello")
    proxy = start_proxy()
    body = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    answers = [
        httpx2.post(
            f"{proxy.base_url}/messages",
            json=body,
            headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
        )
        for key in (KEY, KEY + "-other")
    ]
    assert [a.status_code for a in answers] == [200, 200]
    sent = messages_requests(upstream)
    assert [r.headers["x-api-key"] for r in sent] == [KEY, KEY + "-other"]
    assert all(r.headers["anthropic-version"] == "2023-06-01" for r in sent)
    # The same conversation under two keys is two sessions; each key sees only its own.
    session = answers[0].headers["x-summarizer-session"]
    root = f"{proxy.base_url}/summarizer/sessions/{session}"
    assert answers[1].headers["x-summarizer-session"] == session  # derived from the messages
    mine = httpx2.get(root, headers={"x-api-key": KEY})
    theirs = httpx2.get(root, headers={"x-api-key": KEY + "-other"})
    assert mine.status_code in (200, 404) and theirs.status_code in (200, 404)
    # The SDK's own way of sending the key (it uses Authorization) reaches the upstream too.
    anthropic_client(proxy).messages.create(**body)
    last = messages_requests(upstream)[-1].headers
    assert last.get("x-api-key") == KEY or last.get("authorization") == f"Bearer {KEY}"


def test_count_tokens_passes_through(upstream: TestUpstream, start_proxy: ProxyFactory) -> None:
    proxy = start_proxy()
    counted = anthropic_client(proxy).messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "hello there"}]
    )
    direct = anthropic.Anthropic(base_url=upstream.root_url, api_key=KEY).messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "hello there"}]
    )
    assert counted.input_tokens == direct.input_tokens > 0


@pytest.mark.parametrize(("mode", "least", "most"), [("managed", 0.5, 1.0), ("client", 0.0, 0.0)])
def test_cached_share_with_and_without_managed_breakpoints(
    upstream: TestUpstream, start_proxy: ProxyFactory, mode: str, least: float, most: float
) -> None:
    session = CodingSession(turns=40, seed=9)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=16_000, cache_breakpoints=mode)
    run_session(proxy, session, steps=40)
    agents = messages_requests(upstream)
    assert messages_requests(upstream, summary=True)  # compactions happened in both
    share = sum(r.cached_tokens or 0 for r in agents) / sum(r.prompt_tokens or 0 for r in agents)
    assert least <= share <= most


def long_messages(turns: int, *, size: int = 900) -> list[dict[str, Any]]:
    """A Messages conversation of ``turns`` tool exchanges of about ``2 * size`` tokens each."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing invoice test."}]
    for turn in range(turns):
        call_id = f"toolu_{turn:04d}"
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": call_id, "name": "read_file", "input": {"n": turn}}
                ],
            }
        )
        output = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        output += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": call_id, "content": output}],
            }
        )
    messages.append({"role": "user", "content": "Go on."})
    return messages


READ_FILE = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
    }
]


def test_a_stream_held_by_a_compaction_gets_keepalives_the_sdk_ignores(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    upstream.responder = ScriptedToolAgent([], final="Carrying on with the fix.")
    proxy = start_proxy(keepalive_interval=0.2)
    upstream.inject(Fault(kind="delay", seconds=1.2, match="summary"))
    body = {
        "model": MODEL,
        "max_tokens": 200,
        "tools": READ_FILE,
        "messages": long_messages(9),
        "stream": True,
    }
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    with httpx2.stream(
        "POST", f"{proxy.base_url}/messages", json=body, headers=headers, timeout=30
    ) as answer:
        assert answer.status_code == 200
        assert answer.headers["x-summarizer-compacted"] == "pending"
        text = b"".join(answer.iter_raw())
    assert text.count(b": summarizer: compacting") >= 3
    assert b": summarizer: compacted=true checkpoint=" in text
    assert text.index(b": summarizer: compacting") < text.index(b"event: message_start")
    assert b"event: message_stop" in text
    # The anthropic SDK reads such a stream as any other.
    upstream.inject(Fault(kind="delay", seconds=0.6, match="summary"))
    other = long_messages(9)
    other[0]["content"] = "Another task entirely."
    with anthropic_client(proxy).messages.stream(
        model=MODEL, max_tokens=200, tools=READ_FILE, messages=other
    ) as events:
        final = events.get_final_message()
    assert final.content[0].type == "text" and final.content[0].text
    assert len(messages_requests(upstream, summary=True)) == 2


def test_prompt_too_long_compacts_harder_and_retries_once(tmp_path: Any) -> None:
    # The proxy believes the window is 32k; the upstream enforces 12k.
    with TestUpstream(context_window=12_000, responder=ScriptedToolAgent([], final="ok")) as small:
        settings = Settings(
            upstream=small.base_url, port=0, db=tmp_path / "c.db", context_window=32_000
        )
        with ProxyServer(settings) as proxy:
            reply = anthropic_client(proxy).messages.create(
                model=MODEL, max_tokens=200, tools=READ_FILE, messages=long_messages(8)
            )
        assert reply.content[0].type == "text"
        sent = messages_requests(small)
        assert [r.status for r in sent] == [400, 200]
        assert (sent[1].prompt_tokens or 0) + 200 <= 12_000
        assert messages_requests(small, summary=True)


def test_an_estimate_near_the_trigger_is_checked_with_the_upstreams_count(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Any
) -> None:
    upstream.responder = ScriptedToolAgent([], final="ok")
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
    body = {"model": MODEL, "max_tokens": 200, "tools": READ_FILE, "messages": long_messages(4)}
    roomy = start_proxy(context_window=200_000, db=tmp_path / "roomy.db")
    first = httpx2.post(f"{roomy.base_url}/messages", json=body, headers=headers)
    estimate = int(first.headers["x-summarizer-prompt-tokens"])
    counts = [r for r in upstream.requests if r.path.endswith("/count_tokens")]
    assert first.status_code == 200 and not counts  # far from the trigger: no count asked
    # A window whose trigger sits at this conversation's estimate.
    ratio = CompactionConfig().trigger_ratio
    tight = start_proxy(context_window=int(estimate / ratio) + 200, db=tmp_path / "tight.db")
    second = httpx2.post(f"{tight.base_url}/messages", json=body, headers=headers)
    assert second.status_code == 200
    counts = [r for r in upstream.requests if r.path.endswith("/count_tokens")]
    assert len(counts) == 1
    asked = counts[0].body
    assert asked["model"] == MODEL and without_cache_control(asked["tools"]) == READ_FILE
    assert len(asked["messages"]) == len(body["messages"]) and "max_tokens" not in asked
    metrics = httpx2.get(tight.base_url.removesuffix("/v1") + "/metrics").text
    assert "summarizer_upstream_token_counts_total 1.0" in metrics
    # The decision was taken on the calibrated figure: the upstream's own count.
    counted = counts[0].prompt_tokens or 0
    assert abs(int(second.headers["x-summarizer-prompt-tokens"]) - counted) <= 0.02 * counted
