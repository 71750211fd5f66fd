"""The controls a client has over compaction, through the proxy with the real SDKs against the
test upstream: compact now (a request header, with instructions), off for one request or for a
model, a model's own summary instructions, a trigger in tokens, and the header that says why a
request was not compacted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest

from context_summarizer.loaders.prompts import load_prompt
from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder
from context_summarizer.testing.state import RecordedRequest

from .conftest import ProxyFactory, tool_turn

MODEL = "gpt-4o-mini"
OTHER = "gpt-4o"
KEY = "sk-test-controls-0123456789abcdef"
NOW = {"x-summarizer-compact": "now"}


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    # Agent requests get "ok", summary requests a summary of what they were sent.
    responder = RoutingResponder(echo_responder)
    with TestUpstream(context_window=128_000, responder=responder) as server:
        yield server


def chat_client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)


def history(turns: int, size: int = 300) -> list[dict[str, Any]]:
    """A tool-using conversation of about ``turns * size`` tokens."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the failing invoice test in src/billing/invoice.py."},
    ]
    for turn in range(turns):
        output = f"src/billing/module_{turn}.py:{turn + 10}: ValueError bad total {turn}\n"
        output += " ".join(f"w{turn}_{i}" for i in range(size))
        messages += tool_turn(
            f"call_{turn}", "bash", json.dumps({"cmd": f"pytest -k t{turn}"}), output
        )
    messages.append({"role": "user", "content": "Go on."})
    return messages


SUMMARY_OPENING = load_prompt("self_summary").split("\n")[0]
OPENINGS = tuple(
    load_prompt(name).split("\n")[0] for name in ("self_summary", "self_summary_strict")
)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of a chat or Messages body (the summary instruction
    in a summary request)."""
    message = [m for m in body.get("messages", []) if m["role"] == "user"][-1]
    content = message["content"]
    return content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)


def is_summary_request(body: Any) -> bool:
    """Whether ``body`` (chat or Messages) is one of the proxy's summary requests: its last
    user message opens with the summary instruction."""
    return bool(body.get("messages")) and last_user_text(body).startswith(OPENINGS)


def summary_requests(upstream: TestUpstream) -> list[RecordedRequest]:
    return [r for r in upstream.requests if r.status == 200 and is_summary_request(r.body)]


def agent_requests(upstream: TestUpstream) -> list[RecordedRequest]:
    return [r for r in upstream.requests if r.status == 200 and not is_summary_request(r.body)]


def test_compact_now_compacts_a_request_far_below_the_trigger_with_its_instructions(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    messages = history(6)
    raw = chat_client(proxy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,
        extra_headers={**NOW, "x-summarizer-instructions": "Keep every ticket number: TKT-4411."},
    )
    assert raw.headers["x-summarizer-compacted"] == "true"
    assert raw.headers["x-summarizer-checkpoint"]
    assert "x-summarizer-not-compacted" not in raw.headers
    summaries = summary_requests(upstream)
    assert summaries, "no summary request was made"
    # The first ask ends with the client's instructions (a stricter retry, if any, adds its own
    # demands after them).
    assert last_user_text(summaries[0].body).rstrip().endswith("ticket number: TKT-4411.")
    assert all("TKT-4411" in last_user_text(s.body) for s in summaries)
    # What went upstream is shorter than what was sent, and still ends with the latest ask.
    [sent] = agent_requests(upstream)
    assert len(sent.body["messages"]) < len(messages)
    assert sent.body["messages"][-1] == messages[-1]
    assert sent.body["messages"][0] == messages[0]
    # The control headers never travel upstream.
    assert not any(h.startswith("x-summarizer") for r in upstream.requests for h in r.headers)


def test_compact_now_with_nothing_to_compact_sends_the_request_and_says_so(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    messages = [{"role": "user", "content": "hi"}]
    raw = chat_client(proxy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        extra_headers=NOW,
    )
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert raw.headers["x-summarizer-not-compacted"].startswith(
        "asked to compact now (header), but nothing could be compacted"
    )
    assert agent_requests(upstream)[-1].body["messages"] == messages


def test_without_the_header_the_same_request_is_not_compacted_and_says_why(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    raw = chat_client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=history(6)
    )
    assert raw.headers["x-summarizer-compacted"] == "false"
    reason = raw.headers["x-summarizer-not-compacted"]
    assert reason.startswith("below the trigger: ")
    tokens, trigger = (int(n) for n in reason.split(": ")[1].split(" tokens")[0].split(" of "))
    assert 0 < tokens < trigger
    assert summary_requests(upstream) == []


def test_off_for_one_request_forwards_it_byte_for_byte(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(context_window=4_000)
    messages = history(14)  # far over a 4k window's trigger
    raw = chat_client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers={"x-summarizer-compact": "off"}
    )
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert raw.headers["x-summarizer-not-compacted"] == "off for this request (header)"
    assert summary_requests(upstream) == []
    [sent] = agent_requests(upstream)
    assert sent.body["messages"] == messages


def test_instructions_in_utf8_reach_the_summary_request_as_written(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    body = {"model": MODEL, "messages": history(6)}
    answer = httpx2.post(
        f"{proxy.base_url}/chat/completions",
        headers=[
            (b"authorization", f"Bearer {KEY}".encode()),
            (b"content-type", b"application/json"),
            (b"x-summarizer-compact", b"now"),
            (b"x-summarizer-instructions", "Garde les numéros de ticket: TKT-ü".encode()),
        ],
        content=json.dumps(body).encode(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    assert "Garde les numéros de ticket: TKT-ü" in last_user_text(
        summary_requests(upstream)[0].body
    )


def test_a_bad_control_value_is_a_400_in_the_apis_shape(start_proxy: ProxyFactory) -> None:
    proxy = start_proxy()
    with pytest.raises(openai.BadRequestError) as info:
        chat_client(proxy).chat.completions.create(
            model=MODEL, messages=history(1), extra_headers={"x-summarizer-compact": "sometimes"}
        )
    assert "x-summarizer-compact must be one of auto, now, off" in str(info.value)
    with pytest.raises(openai.BadRequestError, match="at most 4000"):
        chat_client(proxy).chat.completions.create(
            model=MODEL,
            messages=history(1),
            extra_headers={"x-summarizer-instructions": "x" * 4001},
        )


def test_compaction_off_for_one_model_leaves_the_others_managed(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(context_window=4_000, models=[{"name": OTHER, "compact": False}])
    messages = history(14)
    client = chat_client(proxy)
    off = client.chat.completions.with_raw_response.create(model=OTHER, messages=messages)
    assert off.headers["x-summarizer-not-compacted"] == f"compaction is off for model {OTHER}"
    assert summary_requests(upstream) == []
    assert agent_requests(upstream)[-1].body["messages"] == messages
    on = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    assert on.headers["x-summarizer-compacted"] == "true"
    assert len(summary_requests(upstream)) >= 1
    # Now is refused nothing either way: off wins for the model that has it off.
    again = client.chat.completions.with_raw_response.create(
        model=OTHER, messages=messages, extra_headers=NOW
    )
    assert again.headers["x-summarizer-compacted"] == "false"


def test_a_models_summary_instructions_reach_its_summary_requests(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(
        models=[{"name": MODEL, "summary_instructions": "Write the summary in English."}]
    )
    chat_client(proxy).chat.completions.create(
        model=MODEL,
        messages=history(6),
        extra_headers={**NOW, "x-summarizer-instructions": "List the failing tests first."},
    )
    instruction = last_user_text(summary_requests(upstream)[0].body)
    model_at = instruction.index("Write the summary in English.")
    request_at = instruction.index("List the failing tests first.")
    assert model_at < request_at  # the model's own first, the request's after


def test_a_trigger_in_tokens_compacts_where_the_ratio_would_not(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    messages = history(16)
    proxy = start_proxy(context_window=64_000)
    ratio_only = chat_client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages
    )
    assert ratio_only.headers["x-summarizer-compacted"] == "false"
    size = int(ratio_only.headers["x-summarizer-prompt-tokens"])
    tokens = start_proxy(context_window=64_000, trigger_tokens=size * 2 // 3)
    raw = chat_client(tokens).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages
    )
    assert raw.headers["x-summarizer-compacted"] == "true", raw.headers.get(
        "x-summarizer-not-compacted"
    )
    # The target comes down with the trigger, in proportion (0.4 / 0.8 of it).
    assert int(raw.headers["x-summarizer-prompt-tokens"]) <= size // 3


def test_trigger_and_target_in_tokens_are_checked(start_proxy: ProxyFactory) -> None:
    from context_summarizer.core.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match=r"target_tokens .* must be below trigger_tokens"):
        start_proxy(trigger_tokens=1_000, target_tokens=1_000)


def test_compact_now_through_the_messages_api(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    client = anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"), api_key=KEY, max_retries=0
    )
    messages: list[dict[str, Any]] = []
    for turn in range(6):
        messages.append(
            {
                "role": "assistant" if messages and messages[-1]["role"] == "user" else "user",
                "content": f"step {turn}: " + " ".join(f"w{turn}_{i}" for i in range(300)),
            }
        )
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "Go on."})
    raw = client.messages.with_raw_response.create(
        model="claude-sonnet-4-5",
        max_tokens=256,
        system="You are a careful agent.",
        messages=messages,  # type: ignore[arg-type]
        extra_headers={**NOW, "x-summarizer-instructions": "Name step 3 explicitly."},
    )
    assert raw.headers["x-summarizer-compacted"] == "true"
    summaries = [r for r in upstream.requests if r.api == "messages" and is_summary_request(r.body)]
    assert summaries
    last = summaries[0].body["messages"][-1]
    text = last["content"] if isinstance(last["content"], str) else last["content"][-1]["text"]
    assert "Name step 3 explicitly." in text
    off = client.messages.with_raw_response.create(
        model="claude-sonnet-4-5",
        max_tokens=256,
        messages=messages,  # type: ignore[arg-type]
        extra_headers={"x-summarizer-compact": "off"},
    )
    assert off.headers["x-summarizer-not-compacted"] == "off for this request (header)"


def test_compact_now_through_the_responses_api(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    items: list[dict[str, Any]] = [
        {"role": "user", "content": "Fix the failing invoice test."},
    ]
    for turn in range(6):
        items.append(
            {
                "type": "function_call",
                "call_id": f"c{turn}",
                "name": "bash",
                "arguments": json.dumps({"cmd": f"pytest -k t{turn}"}),
            }
        )
        items.append(
            {
                "type": "function_call_output",
                "call_id": f"c{turn}",
                "output": " ".join(f"w{turn}_{i}" for i in range(300)),
            }
        )
    items.append({"role": "user", "content": "Go on."})
    raw = chat_client(proxy).responses.with_raw_response.create(
        model=MODEL,
        input=items,
        instructions="You are a careful agent.",
        extra_headers=NOW,  # type: ignore[arg-type]
    )
    assert raw.headers["x-summarizer-compacted"] == "true"
    summaries = [
        r for r in upstream.requests if r.api == "responses" and r.path.endswith("/responses")
    ]
    assert any(
        isinstance(r.body.get("input"), list) and SUMMARY_OPENING in json.dumps(r.body["input"][-1])
        for r in summaries
    )


def ask(proxy: ProxyServer, session: str, body: Any = None, key: str = KEY) -> httpx2.Response:
    return httpx2.post(
        f"{proxy.base_url}/summarizer/sessions/{session}/compact",
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        content=b"" if body is None else json.dumps(body).encode(),
        timeout=10,
    )


def test_a_sessions_compact_endpoint_compacts_its_next_request_once(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    session = {"x-summarizer-session": "task-42"}
    client = chat_client(proxy)
    messages = history(6)
    first = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers=session
    )
    assert first.headers["x-summarizer-compacted"] == "false"
    answer = ask(proxy, "task-42", {"instructions": "Keep the ticket TKT-77."})
    assert answer.status_code == 202
    assert answer.json()["status"] == "pending"
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Next."}]
    second = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers=session
    )
    assert second.headers["x-summarizer-compacted"] == "true"
    summaries = summary_requests(upstream)
    assert summaries and "TKT-77" in last_user_text(summaries[0].body)
    # Taken up once: the next request stands on that compaction and is not compacted again.
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "More."}]
    third = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers=session
    )
    assert third.headers["x-summarizer-compacted"] == "false"
    assert third.headers["x-summarizer-not-compacted"].endswith(
        "(it stands on an earlier compaction)"
    )


def test_an_ask_is_the_askers_own_and_bad_asks_are_refused(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy()
    other = "sk-test-someone-else-0123456789ab"
    assert ask(proxy, "task-7", key=other).status_code == 202  # asks for its own task-7 only
    raw = chat_client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=history(6), extra_headers={"x-summarizer-session": "task-7"}
    )
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert summary_requests(upstream) == []
    assert ask(proxy, "task-7", {"instructions": "x" * 4001}).status_code == 400
    assert ask(proxy, "task-7", {"instruction": "typo"}).status_code == 400
    assert ask(proxy, "task-7", [1, 2]).status_code == 400
    for bad in ("", "x" * 129, "t%20ask"):  # empty, too long, a character names never hold
        refused_name = ask(proxy, bad)
        assert refused_name.status_code == 400, bad
        assert refused_name.json()["error"]["message"].startswith("The session in the path")
    refused = httpx2.post(f"{proxy.base_url}/summarizer/sessions/task-7/compact", timeout=10)
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"


def test_compact_now_and_off_through_the_gemini_api(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    from google.genai import types

    from .gemini_support import gemini_client, gemini_requests

    proxy = start_proxy(upstream=f"{upstream.root_url}/v1beta")
    contents = [types.Content(role="user", parts=[types.Part(text="Fix the invoice test.")])]
    for turn in range(6):
        said = " ".join(f"w{turn}_{i}" for i in range(300))
        contents.append(types.Content(role="model", parts=[types.Part(text=f"step {turn}")]))
        contents.append(types.Content(role="user", parts=[types.Part(text=said)]))
    client = gemini_client(proxy)

    def headers_of(extra: dict[str, str]) -> dict[str, str]:
        answer = client.models.generate_content(
            model="gemini-2.5-pro",
            contents=contents,
            config=types.GenerateContentConfig(http_options=types.HttpOptions(headers=extra)),
        )
        assert answer.sdk_http_response is not None
        return dict(answer.sdk_http_response.headers or {})

    now = headers_of({**NOW, "x-summarizer-instructions": "Name step 4."})
    assert now["x-summarizer-compacted"] == "true"
    [summary] = gemini_requests(upstream, summary=True)[:1]
    last = summary.body["contents"][-1]
    assert "Name step 4." in "".join(p.get("text", "") for p in last["parts"])
    off = headers_of({"x-summarizer-compact": "off"})
    assert off["x-summarizer-not-compacted"] == "off for this request (header)"
    assert gemini_requests(upstream)[-1].body["contents"][1]["parts"][0]["text"] == "step 0"


@pytest.mark.parametrize("summary_model", [None, "gpt-4.1-nano"])
def test_a_summary_model_writes_the_summaries_and_pays_its_prompt_uncached(
    upstream: TestUpstream, start_proxy: ProxyFactory, summary_model: str | None
) -> None:
    proxy = start_proxy(models=[{"name": MODEL, "summary_model": summary_model}])
    client = chat_client(proxy)
    messages = history(6)
    client.chat.completions.create(model=MODEL, messages=messages)  # warms the agent's cache
    messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Next."}]
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, extra_headers=NOW
    )
    assert raw.headers["x-summarizer-compacted"] == "true"
    summaries = summary_requests(upstream)
    assert summaries and {s.body["model"] for s in summaries} == {summary_model or MODEL}
    assert {r.body["model"] for r in agent_requests(upstream)} == {MODEL}
    cached = summaries[0].cached_tokens or 0
    if summary_model is None:  # the live conversation's prefix, cached by the agent's request
        assert cached >= 0.8 * (summaries[0].prompt_tokens or 0)
    else:  # the provider's cache is per model: none of the agent's warm prefix serves it
        assert cached == 0


def test_compact_now_on_forked_and_interleaved_branches_keeps_each_conversation_whole(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    from .invariants import check_request, check_summaries_exclude

    proxy = start_proxy()
    client = chat_client(proxy)
    session = {"x-summarizer-session": "forked"}
    trunk = history(6)
    left = [*trunk[:-1], {"role": "user", "content": "Left branch: fix module_1 first."}]
    right = [*trunk[:-1], {"role": "user", "content": "Right branch: fix module_4 first."}]
    for raw in (left, right, left):  # interleaved, one retried
        client.chat.completions.create(model=MODEL, messages=raw, extra_headers=session)
    assert ask(proxy, "forked").status_code == 202
    compacted = []
    for raw, headers in ((right, session), (left, {**session, **NOW}), (right, session)):
        answer = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=raw, extra_headers=headers
        )
        sent = agent_requests(upstream)[-1].body["messages"]
        check_request(raw, sent)  # raw order, instructions, latest user, tool pairs
        other = left if raw is right else right
        check_summaries_exclude(sent, [other[-1]["content"]])  # never the other branch's ask
        assert answer.headers["x-summarizer-session"] == "forked"
        compacted.append(answer.headers["x-summarizer-compacted"])
    # The ask is taken once, by the right branch's next request; the header compacts the left
    # one; the right branch's next request stands on its compaction and is not compacted again.
    assert compacted == ["true", "true", "false"]
