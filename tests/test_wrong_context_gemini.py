"""What goes upstream belongs to *that* conversation on the Gemini front door too, as on the
Messages and Responses ones (``test_wrong_context_apis``): a fork never gets its sibling's rewrite,
a retry gets the same bytes, and two interleaved conversations of one key never mix (the real
proxy, the real ``google-genai`` SDK over real HTTP, the test upstream's Gemini API)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from google.genai import types

from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import (
    RecordedRequest,
    RoutingResponder,
    TestUpstream,
    echo_responder,
)
from context_summarizer.testing.gemini_chat import signature_for

from .conftest import ProxyFactory
from .gemini_support import (
    MODEL,
    NO_AUTO,
    gemini_client,
    gemini_requests,
    is_summary_content,
    pairs_intact,
)
from .invariants import check_gaps_summarized, place_messages

WINDOW = 16_000
SYSTEM = "You are a careful coding agent."
READ_FILE = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="read_file",
            description="Read.",
            parameters_json_schema={"type": "object", "properties": {"n": {"type": "integer"}}},
        )
    ]
)


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=WINDOW, responder=RoutingResponder(echo_responder)) as server:
        yield server


@pytest.fixture
def proxy(start_proxy: ProxyFactory, upstream: TestUpstream) -> ProxyServer:
    return start_proxy(upstream=f"{upstream.root_url}/v1beta", context_window=WINDOW)


def said(text: str) -> dict[str, Any]:
    """A user content of one text part."""
    return {"role": "user", "parts": [{"text": text}]}


def exchanges(name: str, turns: range, *, size: int = 900) -> list[dict[str, Any]]:
    """A function call and its response per turn, each output marked ``[name]`` (about
    ``2 * size`` tokens a turn); each call signed as the test model signs it (Gemini 3), in the
    URL-safe base64 the SDK sends."""
    contents: list[dict[str, Any]] = []
    for turn in turns:
        call = {"name": "read_file", "args": {"n": turn}}
        signature = signature_for(call["name"], call["args"]).replace("+", "-").replace("/", "_")
        contents.append(
            {"role": "model", "parts": [{"functionCall": call, "thoughtSignature": signature}]}
        )
        output = f"[{name}] src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        output += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(size // 4))
        result = {"name": "read_file", "response": {"output": output}}
        contents.append({"role": "user", "parts": [{"functionResponse": result}]})
    return contents


def send(
    proxy: ProxyServer, contents: list[dict[str, Any]], *, stream: bool = False
) -> dict[str, str]:
    """``contents`` sent with the SDK (system instruction, tools, thinking on), streamed or not:
    the answer's headers."""
    client = gemini_client(proxy)
    config = types.GenerateContentConfig(
        system_instruction=SYSTEM,
        tools=[READ_FILE],
        automatic_function_calling=NO_AUTO,
        thinking_config=types.ThinkingConfig(include_thoughts=False),
        max_output_tokens=300,
    )
    models = client.models
    if stream:
        answers = list(
            models.generate_content_stream(model=MODEL, contents=contents, config=config)
        )
    else:
        answers = [models.generate_content(model=MODEL, contents=contents, config=config)]
    assert "".join(answer.text or "" for answer in answers) == "ok"
    http = answers[0].sdk_http_response
    assert http is not None and http.headers is not None
    return dict(http.headers)


def last_sent(upstream: TestUpstream) -> dict[str, Any]:
    """The body of the latest agent request the upstream received."""
    return dict(gemini_requests(upstream)[-1].body)


def wire(body: Any) -> str:
    """A received body as JSON in the order it came (so key order counts, as in the bytes)."""
    return json.dumps(body)


def summary_texts(contents: list[dict[str, Any]]) -> list[str]:
    """The text of each summary the proxy wrote into ``contents``."""
    return [c["parts"][0]["text"] for c in contents if is_summary_content(c)]


def summaries(upstream: TestUpstream) -> list[RecordedRequest]:
    return gemini_requests(upstream, summary=True)


def outputs(content: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (name, output) of each function response of a content."""
    return [
        (part["functionResponse"]["name"], str(part["functionResponse"]["response"].get("output")))
        for part in content["parts"]
        if "functionResponse" in part
    ]


def shortened_from(sent: Mapping[str, Any], own: Mapping[str, Any]) -> bool:
    """Whether ``sent`` is the client's function response content ``own`` with its outputs cut
    (each to its head and tail: the first line, which names its conversation, kept)."""
    mine, theirs = outputs(own), outputs(sent)
    return len(mine) == len(theirs) == len(own["parts"]) == len(sent["parts"]) > 0 and all(
        name == other and len(cut) < len(whole) and cut.startswith(whole.split("\n")[0])
        for (name, whole), (other, cut) in zip(mine, theirs, strict=True)
    )


def check_own_and_in_order(contents: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    """Every content sent is this conversation's own, in its order (function responses as sent
    or shortened in place); a summary stands exactly where contents were left out; the
    conversation's latest content goes last (``invariants``, on Gemini's contents)."""
    placed = place_messages(contents, sent, summary=is_summary_content, replacement=shortened_from)
    check_gaps_summarized(contents, placed)
    assert sent[-1] == contents[-1], "the conversation's latest content was not sent last"


def test_a_gemini_fork_never_gets_its_siblings_rewrite(
    upstream: TestUpstream, proxy: ProxyServer
) -> None:
    shared = [said("Fix the failing invoice test."), *exchanges("shared", range(4))]
    branch_a = [*shared, *exchanges("A-branch", range(4, 9)), said("A-branch: go on, module_8.")]
    headers = send(proxy, branch_a)
    assert headers["x-summarizer-compacted"] == "true"
    sent_a = last_sent(upstream)
    (summary_a,) = summary_texts(sent_a["contents"])
    assert "[A-branch]" in summary_a  # so that a leak of it below would show
    check_own_and_in_order(branch_a, sent_a["contents"])

    # B shares A's opening and first four exchanges (so the same derived session), then goes
    # its own way, longer than A: over the trigger, it is compacted on its own turns only.
    long_b = [*shared, *exchanges("B-branch", range(4, 10)), said("B-branch: go on, module_9.")]
    headers_b = send(proxy, long_b)
    assert headers_b["x-summarizer-compacted"] == "true"
    assert headers_b["x-summarizer-session"] == headers["x-summarizer-session"]
    sent_b = last_sent(upstream)
    check_own_and_in_order(long_b, sent_b["contents"])
    assert "A-branch" not in str(sent_b) and summary_a not in str(sent_b)
    (summary_b,) = summary_texts(sent_b["contents"])
    assert "[B-branch]" in summary_b and summary_b != summary_a
    asked = str(summaries(upstream)[-1].body)  # what the summarizer read for B
    assert "[B-branch]" in asked and "A-branch" not in asked

    # A shorter fork of the shared part fits: it goes upstream as the client sent it.
    short_b = [*shared, said("B-branch: which module?")]
    assert send(proxy, short_b)["x-summarizer-compacted"] == "false"
    assert last_sent(upstream)["contents"] == short_b

    # A again (a retry), after its sibling: its own checkpoint, no new summary, the same bytes.
    count = len(summaries(upstream))
    assert send(proxy, branch_a)["x-summarizer-compacted"] == "false"
    assert len(summaries(upstream)) == count
    assert wire(last_sent(upstream)) == wire(sent_a)
    # And B's retry gets B's.
    assert send(proxy, long_b)["x-summarizer-compacted"] == "false"
    assert wire(last_sent(upstream)) == wire(sent_b) and len(summaries(upstream)) == count


@pytest.mark.parametrize("stream", [False, True])
def test_a_gemini_retry_gets_the_same_bytes(
    upstream: TestUpstream, proxy: ProxyServer, stream: bool
) -> None:
    history = [said("Fix the failing invoice test."), *exchanges("solo", range(9))]
    send(proxy, history, stream=stream)
    assert len(summaries(upstream)) == 1
    first = gemini_requests(upstream)[-1]
    assert summary_texts(first.body["contents"]) and first.stream == stream

    retried = send(proxy, history, stream=stream)
    again = gemini_requests(upstream)[-1]
    assert wire(again.body) == wire(first.body) and again.prompt_tokens == first.prompt_tokens
    assert len(summaries(upstream)) == 1

    # The conversation moves on: the rewrite it got is its prefix (the provider's cache holds).
    grown = [*history, *exchanges("solo", range(9, 10))]
    went_on = send(proxy, grown, stream=stream)
    moved = last_sent(upstream)["contents"]
    assert moved[: len(first.body["contents"])] == first.body["contents"]
    check_own_and_in_order(grown, moved)
    assert len(summaries(upstream)) == 1

    # The earlier turn retried after that: still the same bytes as its first time.
    late = send(proxy, history, stream=stream)
    assert wire(last_sent(upstream)) == wire(first.body) and len(summaries(upstream)) == 1
    # Each time on the one checkpoint the first request wrote, none compacted again.
    assert {h["x-summarizer-compacted"] for h in (retried, went_on, late)} == {"false"}
    (checkpoint,) = {h["x-summarizer-checkpoint"] for h in (retried, went_on, late)}
    assert checkpoint


@pytest.mark.parametrize("opening", ["own", "shared"])
def test_interleaved_gemini_conversations_of_one_key_never_mix(
    upstream: TestUpstream, proxy: ProxyServer, opening: str
) -> None:
    names = {"alpha": "bravo", "bravo": "alpha"}
    sessions: dict[str, set[str]] = {name: set() for name in names}
    compacted: dict[str, int] = dict.fromkeys(names, 0)
    first: dict[str, dict[str, str]] = {}
    for turns in range(7, 15):
        for name, other in names.items():
            # "own": each opens with its own task, so each is its own derived session; "shared":
            # both open alike (one session), and only their own turns keep them apart.
            task = f"[{name}] Fix the failing {name} test." if opening == "own" else "Fix it."
            # An agent loop: each request extends the last, ending in the latest call's result.
            contents = [said(task), *exchanges(name, range(turns))]
            headers = send(proxy, contents)
            sessions[name].add(headers["x-summarizer-session"])
            compacted[name] += headers["x-summarizer-compacted"] == "true"
            request = gemini_requests(upstream)[-1]
            body = request.body
            sent = str(body)
            assert f"[{other}]" not in sent, f"{name} turn {turns} got {other}'s context"
            assert f"[{name}]" in sent
            # Its own system instruction and tools, byte for byte as the SDK first sent them
            # (once compacted, the recall tool after them).
            assert body["systemInstruction"]["parts"] == [{"text": SYSTEM}]
            tools = body["tools"]
            if tools[-1]["functionDeclarations"][0]["name"] == "recall":
                tools = tools[:-1]
            own = first.setdefault(
                name, {"systemInstruction": wire(body["systemInstruction"]), "tools": wire(tools)}
            )
            assert own == {
                "systemInstruction": wire(body["systemInstruction"]),
                "tools": wire(tools),
            }
            # Every content is this conversation's own, in order (signatures included), the
            # latest user turn as the client sent it, every call answered; it fits the window.
            check_own_and_in_order(contents, body["contents"])
            assert pairs_intact(body["contents"])
            assert request.status == 200 and (request.prompt_tokens or 0) <= WINDOW
    # The summarizer, too, only ever read one conversation at a time.
    asked = [str(r.body) for r in summaries(upstream)]
    assert len(asked) == sum(compacted.values()) and min(compacted.values()) >= 2
    for name, other in names.items():
        own_calls = [t for t in asked if f"[{name}]" in t and f"[{other}]" not in t]
        assert len(own_calls) == compacted[name]
    assert all(len(ids) == 1 for ids in sessions.values())
    assert (sessions["alpha"] == sessions["bravo"]) == (opening == "shared")
