"""Gemini's ``generateContent`` through the proxy, with the real ``google-genai`` SDK over real
HTTP, in front of the test upstream's Gemini API (Google's validation, thought signatures checked
as Gemini 3 does, implicit-cache accounting).

An agent loop on the SDK runs a long tool-using session: compactions happen, nothing is refused,
every request fits the window and keeps the system instruction, the latest turn and every
function call with its response; summary requests are the live conversation plus one text part
with function calling off; planted facts survive; the provider's usage is what the proxy
observes; each key is its own tenant.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from google.genai import types

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.gemini_request import GeminiRequest
from context_summarizer.stores.sqlite import SQLiteStore
from context_summarizer.testing import Reply, ScriptedToolAgent, TestUpstream, ToolCallSpec
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory
from .gemini_support import (
    KEY,
    MODEL,
    NO_AUTO,
    gemini_client,
    gemini_requests,
    is_summary_content,
    pairs_intact,
    part_texts,
    run_session,
    session_config,
)

WINDOW = 16_000


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=WINDOW) as server:
        yield server


def start(start_proxy: ProxyFactory, upstream: TestUpstream, **settings: object) -> ProxyServer:
    """A proxy whose upstream is the test upstream's Gemini API (a base URL ending in v1beta)."""
    return start_proxy(upstream=f"{upstream.root_url}/v1beta", **settings)


@pytest.mark.parametrize("stream", [False, True])
def test_a_long_session_on_the_google_genai_sdk_compacts_and_is_never_refused(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path, stream: bool
) -> None:
    session = CodingSession(turns=70, seed=11)
    agent = ScriptedToolAgent(session.steps)
    upstream.responder = agent
    proxy = start(start_proxy, upstream, context_window=WINDOW)
    history = run_session(gemini_client(proxy), session, steps=70, stream=stream)
    assert agent.finished and history[-1].role == "model"

    agents = gemini_requests(upstream)
    summaries = gemini_requests(upstream, summary=True)
    assert len(agents) == 71 and all(r.stream == stream for r in agents)
    assert all(r.status == 200 for r in upstream.requests)
    assert len(summaries) >= 2
    assert max(r.prompt_tokens or 0 for r in upstream.requests) <= WINDOW
    first = agents[0].body
    compacted_at = {0}
    for number, request in enumerate(agents):
        body = request.body
        assert body["systemInstruction"] == first["systemInstruction"]
        # The agent's tools, and the recall tool after them once a compaction was made.
        assert body["tools"] == first["tools"] or (
            body["tools"][:-1] == first["tools"]
            and body["tools"][-1]["functionDeclarations"][0]["name"] == "recall"
        )
        assert pairs_intact(body["contents"]), number
        # The latest turn is the client's: the task, or the results of the latest calls.
        latest = body["contents"][-1]
        assert latest["role"] == "user"
        sent = history[2 * number]
        assert [p.function_response.name for p in sent.parts or () if p.function_response] == [
            p["functionResponse"]["name"] for p in latest["parts"] if "functionResponse" in p
        ]
        # Every model turn goes upstream as the client sent it, thought and signature included.
        for content in body["contents"]:
            if content["role"] == "model" and "functionCall" in content["parts"][-1]:
                assert content["parts"][0].get("thought") is True
                assert "thoughtSignature" in content["parts"][1]
    for before, after in itertools.pairwise(agents):
        old, new = before.body["contents"], after.body["contents"]
        if new[: len(old)] != old:
            compacted_at.add(agents.index(after))
            written = [c for c in new if c["role"] == "user" and is_summary_content(c)]
            assert len(written) == 1 and len(written[0]["parts"]) == 1
    assert len(compacted_at) - 1 == len(summaries)
    # A summary request: the live conversation, plus one user text part, calls off.
    for summary in summaries:
        body = summary.body
        assert body["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}
        assert body["systemInstruction"] == first["systemInstruction"]
        seen_last = [r for r in agents if r.time <= summary.time][-1].body
        assert body["tools"] == seen_last["tools"]  # the cached prefix's, recall included
        # Thinking on: a fixed budget, within the cap; no thought text asked for.
        budget = body["generationConfig"]["thinkingConfig"]
        assert budget == {"thinkingBudget": 1024}
        assert body["generationConfig"]["maxOutputTokens"] > 1024
        seen = [r for r in agents if r.time <= summary.time][-1].body["contents"]
        *conversation, instruction = body["contents"]
        shorter = min(len(seen), len(conversation))
        assert conversation[:shorter] == seen[:shorter]
        assert instruction["role"] == "user" and list(instruction["parts"][0]) == ["text"]
    final = "\n".join(part_texts(agents[-1].body["contents"]))
    for fact in session.planted:
        assert fact.text in final, fact.text
    read = sum(r.cached_tokens or 0 for r in agents)
    assert read / sum(r.prompt_tokens or 0 for r in agents) > 0.5

    # What the proxy observed of each answer is the upstream's promptTokenCount.
    proxy.stop()
    with SQLiteStore(tmp_path / "checkpoints.db") as store:
        (row,) = store.list_sessions()
        records = store.session_requests(None, row.session)
    assert {r.api for r in records} == {"gemini"} and len(records) == len(agents)
    assert [r.reported_tokens for r in records] == [r.prompt_tokens for r in agents]
    assert [r.cached_tokens for r in records] == [r.cached_tokens for r in agents]
    assert sum(r.compacted for r in records) == len(summaries)


def test_function_calls_with_ids_round_trip(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start(start_proxy, upstream)
    client = gemini_client(proxy)
    tool = types.Tool(
        function_declarations=[types.FunctionDeclaration(name="ls", description="List files.")]
    )
    config = types.GenerateContentConfig(tools=[tool], automatic_function_calling=NO_AUTO)
    upstream.enqueue(
        Reply(
            tool_calls=[
                ToolCallSpec(name="ls", arguments={"path": "a"}, id="call-a"),
                ToolCallSpec(name="ls", arguments={"path": "b"}, id="call-b"),
            ]
        )
    )
    asked = types.Content(role="user", parts=[types.Part(text="List a and b.")])
    answer = client.models.generate_content(model=MODEL, contents=[asked], config=config)
    said = answer.candidates[0].content  # type: ignore[index]
    assert said is not None and said.parts
    assert [p.function_call.id for p in said.parts if p.function_call] == ["call-a", "call-b"]
    # Answered in the other order, by id.
    results = [
        types.Part(
            function_response=types.FunctionResponse(id=i, name="ls", response={"output": i})
        )
        for i in ("call-b", "call-a")
    ]
    upstream.enqueue("Listed both.")
    history = [asked, said, types.Content(role="user", parts=results)]
    final = client.models.generate_content(model=MODEL, contents=history, config=config)
    assert final.text == "Listed both."
    sent = upstream.requests[-1].body["contents"]
    assert [p["functionResponse"]["id"] for p in sent[2]["parts"]] == ["call-b", "call-a"]
    assert final.sdk_http_response and final.sdk_http_response.headers
    headers = final.sdk_http_response.headers
    assert headers["x-summarizer-compacted"] == "false"
    assert int(headers["x-summarizer-prompt-tokens"]) > 0 and headers["x-summarizer-session"]


def test_a_stream_observes_only_its_last_chunks_usage() -> None:
    request = GeminiRequest(b"{}", {}, MODEL, True, "ns", None, {})

    def event(body: dict[str, object]) -> bytes:
        return b"data: " + json.dumps(body).encode() + b"\r\n\r\n"

    running = {"candidates": [{"content": {"parts": [{"text": "a"}]}}]}
    usage = {"promptTokenCount": 900, "cachedContentTokenCount": 512, "totalTokenCount": 901}
    assert request.event_usage(event({**running, "usageMetadata": usage})) is None
    last = {"candidates": [{"content": {"parts": [{"text": "b"}]}, "finishReason": "STOP"}]}
    assert request.event_usage(event({**last, "usageMetadata": usage})) == {
        "prompt_tokens": 900,
        "cached_tokens": 512,
    }
    assert request.upstream_path == f"/models/{MODEL}:streamGenerateContent?alt=sse"


def test_each_key_is_its_own_tenant(upstream: TestUpstream, start_proxy: ProxyFactory) -> None:
    session = CodingSession(turns=30, seed=3)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start(start_proxy, upstream, context_window=8_000)
    client = gemini_client(proxy)
    history = run_session(client, session, steps=30, thinking=False)
    assert {r.headers["x-goog-api-key"] for r in upstream.requests} == {KEY}
    summaries = len(gemini_requests(upstream, summary=True))
    assert summaries >= 1
    # The conversation again, under the same key: its checkpoint applies, no new summary.
    config = session_config(session, thinking=False)
    mine = client.models.generate_content(model=MODEL, contents=history[:-1], config=config)
    headers = mine.sdk_http_response.headers  # type: ignore[union-attr]
    checkpoint, session_id = headers["x-summarizer-checkpoint"], headers["x-summarizer-session"]
    assert checkpoint and len(gemini_requests(upstream, summary=True)) == summaries
    url = f"{proxy.base_url}/summarizer/sessions/{session_id}"
    assert httpx2.get(url, headers={"x-goog-api-key": KEY}).status_code == 200
    assert httpx2.get(url, headers={"x-goog-api-key": KEY + "-other"}).status_code == 404
    # Under another key nothing of the first key's applies: it compacts on its own.
    stranger = gemini_client(proxy, KEY + "-other")
    theirs = stranger.models.generate_content(model=MODEL, contents=history[:-1], config=config)
    other = theirs.sdk_http_response.headers  # type: ignore[union-attr]
    assert other["x-summarizer-checkpoint"] not in ("", checkpoint)
    assert len(gemini_requests(upstream, summary=True)) > summaries
    assert upstream.requests[-1].headers["x-goog-api-key"] == KEY + "-other"
