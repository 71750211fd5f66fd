"""The token counters of ``/metrics``, over real HTTP with the real SDKs in front of the test
upstream: what each front door's answers reported (prompt, cached, completion; the agent's calls
and the summary calls apart) adds up to exactly what the upstream reported, streamed or not,
on the lane or the full path; and what compaction saved, 0 before any compaction, then counted
on every request that stands on one, the same figure the activity log (and ``/ui``) keeps."""

from __future__ import annotations

import copy
import itertools
import time
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import quote

import anthropic
import httpx2
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import RecordedRequest, ScriptedToolAgent, TestUpstream
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory, message_from_stream
from .gemini_support import gemini_client, gemini_requests
from .gemini_support import run_session as run_gemini_session

CHAT_MODEL = "gpt-4o-mini"
MESSAGES_MODEL = "claude-sonnet-4-5"
KEY = "sk-test-metrics-tokens-0123456789"
WINDOW = 16_000
TOKENS = ("prompt", "cached_prompt", "completion")
"""The counters the provider's usage feeds: ``summarizer_{name}_tokens_total``."""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=WINDOW) as server:
        yield server


def scrape(proxy: ProxyServer) -> Samples:
    """Every sample of the proxy's ``/metrics``, parsed by the Prometheus client's parser."""
    text = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """A sample's value (0 when the series does not exist)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def tokens(samples: Samples, route: str, call: str) -> dict[str, float]:
    """The three usage counters of ``route`` and ``call``."""
    return {
        name: value(samples, f"summarizer_{name}_tokens_total", route=route, call=call)
        for name in TOKENS
    }


def reported(requests: Iterable[RecordedRequest]) -> dict[str, float]:
    """What the upstream reported for ``requests``, summed as the counters sum it."""
    requests = list(requests)
    assert requests and all(r.status == 200 for r in requests)
    return {
        "prompt": sum(r.prompt_tokens or 0 for r in requests),
        "cached_prompt": sum(r.cached_tokens or 0 for r in requests),
        "completion": sum(r.completion_tokens or 0 for r in requests),
    }


def of_path(upstream: TestUpstream, path: str, *, summary: bool) -> list[RecordedRequest]:
    """The upstream's answered requests to ``path``, the agent's or the summary calls."""
    return [r for r in upstream.requests if r.path.rstrip("/") == path and r.is_summary == summary]


def session_records(proxy: ProxyServer, session: str, count: int) -> list[dict[str, Any]]:
    """The session's activity records as ``/ui`` serves them, once all ``count`` are written
    (the activity writer writes them just after each answer)."""
    url = f"{proxy.base_url.removesuffix('/v1')}/ui/api/sessions/{quote(session, safe='')}"
    deadline = time.monotonic() + 10
    while True:
        answer = httpx2.get(url, headers={"Authorization": f"Bearer {KEY}"})
        if answer.status_code == 200 and len(answer.json()["requests"]) >= count:
            return list(answer.json()["requests"])
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.05)


# ------------------------------------------------------------------------------ chat, openai SDK


def test_a_compacting_chat_session_counts_the_usage_reported_and_the_tokens_saved(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    coding = CodingSession(turns=30, seed=7)
    agent = ScriptedToolAgent(coding.steps)
    upstream.responder = agent
    proxy = start_proxy(ui=True)
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    messages: list[dict[str, Any]] = [coding.system, coding.task]
    compacted: list[bool] = []
    session = ""
    for turn in range(31):
        arguments: dict[str, Any] = {
            "model": CHAT_MODEL,
            "messages": messages,
            "tools": coding.tools,
            "max_completion_tokens": 500,
        }
        if turn % 2:  # every other request streamed
            raw = sdk.chat.completions.with_raw_response.create(stream=True, **arguments)
            reply = message_from_stream(raw.parse())
        else:
            raw = sdk.chat.completions.with_raw_response.create(**arguments)
            reply = raw.parse().choices[0].message.model_dump(exclude_none=True)
        session = raw.headers["x-summarizer-session"]
        compacted.append(raw.headers["x-summarizer-compacted"] == "true")
        if turn == 0:  # before any compaction: nothing saved, the usage counted
            first = scrape(proxy)
            assert value(first, "summarizer_tokens_saved_total", route="chat") == 0
            assert ("summarizer_tokens_saved_total", frozenset({("route", "chat")})) in first
            assert tokens(first, "chat", "agent") == reported(upstream.requests)
        messages.append(reply)
        if not reply.get("tool_calls"):
            break
        for call in reply["tool_calls"]:
            function = call["function"]
            output = coding.execute(turn, function["name"], function["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    sdk.close()
    assert agent.finished and sum(compacted) >= 2

    samples = scrape(proxy)
    agents = of_path(upstream, "/v1/chat/completions", summary=False)
    summaries = of_path(upstream, "/v1/chat/completions", summary=True)
    assert len(agents) == len(compacted) and len(summaries) >= 2
    assert tokens(samples, "chat", "agent") == reported(agents)
    assert tokens(samples, "chat", "summary") == reported(summaries)
    # The upstream's prefix cache served part of the prompts: the share is there to graph.
    assert 0 < tokens(samples, "chat", "agent")["cached_prompt"] < reported(agents)["prompt"]
    # Some of these requests went on the lane, the rest by the full path: both counted.
    assert value(samples, "summarizer_lane_requests_total", outcome="taken") > 0

    # Tokens saved: each request's, in the activity log, adds up to the counter.
    records = session_records(proxy, session, len(agents))
    saved = [r["tokens_saved"] for r in records]
    assert value(samples, "summarizer_tokens_saved_total", route="chat") == sum(saved) > 0
    first_compaction = compacted.index(True)
    assert saved[:first_compaction] == [0] * first_compaction
    # From the first compaction on, every request saves, not only those that compacted...
    assert all(s > 0 for s in saved[first_compaction:])
    # ...and the compacting request saves what its compaction dropped (before -> after), but
    # for rounding: each figure is calibrated on its own.
    at = records[first_compaction]
    dropped = at["tokens_before"] - at["tokens_sent"]
    assert at["compacted"] and abs(saved[first_compaction] - dropped) <= 0.001 * dropped
    # Requests on the same checkpoint save the same (give or take calibration's drift).
    for before, after in itertools.pairwise(records):
        same = after["checkpoint_id"] == before["checkpoint_id"]
        if same and before["tokens_saved"]:
            drift = abs(after["tokens_saved"] - before["tokens_saved"])
            assert drift <= 0.03 * before["tokens_saved"]


# ------------------------------------------------------------------ Messages, anthropic SDK


@pytest.mark.parametrize("stream", [False, True])
def test_a_compacting_messages_session_counts_the_whole_prompt_and_the_final_output(
    upstream: TestUpstream, start_proxy: ProxyFactory, stream: bool
) -> None:
    coding = CodingSession(turns=40, seed=5)
    agent = ScriptedToolAgent(coding.steps)
    upstream.responder = agent
    proxy = start_proxy(context_window=8_000)
    client = anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key=KEY, max_retries=0
    )
    tools = [
        {
            "name": tool["function"]["name"],
            "description": tool["function"]["description"],
            "input_schema": tool["function"]["parameters"],
        }
        for tool in coding.tools
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": coding.task["content"]}]
    for turn in range(41):
        arguments: dict[str, Any] = {
            "model": MESSAGES_MODEL,
            "max_tokens": 500,
            "system": coding.system["content"],
            "tools": tools,
            "messages": copy.deepcopy(messages),
        }
        if stream:
            with client.messages.stream(**arguments) as events:
                reply = events.get_final_message()
        else:
            reply = client.messages.create(**arguments)
        if turn == 0:
            first = scrape(proxy)
            assert value(first, "summarizer_tokens_saved_total", route="messages") == 0
            assert tokens(first, "messages", "agent") == reported(upstream.requests)
        content = [block.model_dump(exclude_none=True) for block in reply.content]
        messages.append({"role": "assistant", "content": content})
        calls = [block for block in content if block["type"] == "tool_use"]
        if not calls:
            break
        results = [
            {
                "type": "tool_result",
                "tool_use_id": call["id"],
                "content": coding.execute(turn, call["name"], call["input"]),
            }
            for call in calls
        ]
        messages.append({"role": "user", "content": results})
    client.close()
    assert agent.finished

    samples = scrape(proxy)
    agents = of_path(upstream, "/v1/messages", summary=False)
    summaries = of_path(upstream, "/v1/messages", summary=True)
    assert len(summaries) >= 2 and all(r.stream == stream for r in agents)
    counted = tokens(samples, "messages", "agent")
    # The whole prompt (input + cache read + cache written), the reads, the final output count
    # (a stream's message_start reports 1 output token, its message_delta the answer's).
    assert counted == reported(agents)
    assert counted["completion"] > len(agents)
    assert sum(r.cache_creation_tokens or 0 for r in agents) > 0  # part of the prompt counted
    assert tokens(samples, "messages", "summary") == reported(summaries)
    assert value(samples, "summarizer_tokens_saved_total", route="messages") > 0
    assert tokens(samples, "chat", "agent") == dict.fromkeys(TOKENS, 0.0)


# -------------------------------------------------------- Responses and Gemini, one figure each


@pytest.mark.parametrize("stream", [False, True])
def test_responses_and_gemini_answers_count_their_usage(
    upstream: TestUpstream, start_proxy: ProxyFactory, stream: bool
) -> None:
    coding = CodingSession(turns=4, seed=3)
    upstream.responder = ScriptedToolAgent(coding.steps)
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    for text in ("Say hello.", "Say hello again, at more length."):
        if stream:
            with sdk.responses.stream(model=CHAT_MODEL, input=text, store=False) as events:
                events.get_final_response()
        else:
            sdk.responses.create(model=CHAT_MODEL, input=text, store=False)
    sdk.close()
    samples = scrape(proxy)
    answered = [r for r in upstream.requests if r.api == "responses"]
    assert len(answered) == 2 and all(r.stream == stream for r in answered)
    assert tokens(samples, "responses", "agent") == reported(answered)
    assert tokens(samples, "responses", "agent")["completion"] > 0

    gemini_proxy = start_proxy(upstream=f"{upstream.root_url}/v1beta", db=":memory:")
    upstream.responder = ScriptedToolAgent(coding.steps)
    run_gemini_session(gemini_client(gemini_proxy), coding, steps=4, stream=stream)
    samples = scrape(gemini_proxy)
    answered = gemini_requests(upstream)
    assert len(answered) == 5 and all(r.stream == stream for r in answered)
    # promptTokenCount, cachedContentTokenCount, candidatesTokenCount (thoughts left out).
    assert tokens(samples, "gemini", "agent") == reported(answered)
    assert tokens(samples, "gemini", "agent")["completion"] > 0
