"""What ``serve --test-upstream``'s model answers an agent (``describe_request``): how many
messages it received, and how many of them are the proxy's summaries: never its own replies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai

from context_summarizer.cli.test_upstream_serve import describe_request, is_proxy_summary
from context_summarizer.core.summary_request import summary_message
from context_summarizer.loaders.prompts import load_prompt
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import RoutingResponder, TestUpstream

OWN_REPLY = "(summarizer test model) received 3 messages; the last one says: fix the summarizer"


def answer(messages: list[dict[str, Any]]) -> str:
    return describe_request({"model": "m", "messages": messages}).content or ""


def test_the_models_own_replies_and_talk_of_summarizer_are_not_summaries() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "the summarizer repo has a failing test"},
        {"role": "assistant", "content": OWN_REPLY},
        {"role": "user", "content": [{"type": "text", "text": "(summarizer test model) said"}]},
    ]
    said = "(summarizer test model) said"
    assert (
        answer(messages)
        == f"(summarizer test model) received 3 messages; the last one says: {said}"
    )


def test_the_proxys_summary_message_is_counted_in_every_prompt_version() -> None:
    for version in ("v1", "v2"):
        frame = load_prompt("summary_frame", version)
        summary = summary_message("Fixed the parser; tests pass.", "", frame)
        assert is_proxy_summary(summary)
        messages = [{"role": "system", "content": "be brief"}, summary]
        messages += [{"role": "assistant", "content": OWN_REPLY}, {"role": "user", "content": "go"}]
        assert ", 1 of them summaries;" in answer(messages)
    said = {"role": "assistant", "content": "[Context summary] quoted by the model"}
    assert not is_proxy_summary(said)


def test_a_compacted_conversation_through_the_proxy_counts_one_summary(tmp_path: Path) -> None:
    words = " ".join(f"word{i}" for i in range(200))
    messages: list[Any] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(40):  # about 500 tokens a turn: over a 16k window
        messages.append({"role": "user", "content": f"turn {turn}: {words}"})
        messages.append({"role": "assistant", "content": OWN_REPLY})
    messages.append({"role": "user", "content": "what now?"})
    with TestUpstream(responder=RoutingResponder(describe_request)) as upstream:
        settings = Settings(
            upstream=upstream.base_url,
            port=0,
            db=tmp_path / "c.db",
            context_window=16_000,
            keep_recent_tokens=4_000,  # several of the model's replies stay
        )
        with ProxyServer(settings) as proxy:
            client = openai.OpenAI(base_url=proxy.base_url, api_key="k", max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=messages
            )
        assert raw.headers["x-summarizer-compacted"] == "true"
        sent = [r for r in upstream.requests if not r.is_summary][-1].messages
    kept_replies = [m for m in sent if m.get("role") == "assistant"]
    assert len(kept_replies) >= 3, "the compacted conversation kept the model's replies"
    text = raw.parse().choices[0].message.content or ""
    assert f"received {len(sent)} messages, 1 of them summaries;" in text
