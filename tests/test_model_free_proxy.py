"""The model-free policies where users turn them on: ``summarizer serve --policy masking`` or
``ledger-only`` (flag, ``SUMMARIZER_POLICY``, the config file, per ``[[models]]`` entry), the
proxy in front of the test upstream with the real openai SDK, and ``wrap(client, policy=...)``.
No summary request ever reaches the upstream."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.demo import run_coding_session
from context_summarizer.cli.main import app
from context_summarizer.core.facts import LEDGER_HEADER
from context_summarizer.core.results import Policy
from context_summarizer.loaders.prompts import load_prompt
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.banner import banner_lines
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .conftest import ProxyFactory
from .invariants import check_request
from .test_proxy import MODEL, TOOLS, chat_requests, client, long_history

MASK = re.compile(re.sub(r"\\\{\w+\\\}", r"\\d+", re.escape(load_prompt("masked_output"))))
MECHANICAL_OPENING = load_prompt("mechanical_frame").split("{", 1)[0].strip()
WINDOW = 16_000


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=WINDOW, responder=RoutingResponder(echo_responder)) as server:
        yield server


def history(turns: int, *, thought: int = 300, output: int = 300) -> list[dict[str, Any]]:
    """System, task, ``turns`` tool turns whose assistant message reasons at length (which no
    masking can clear) before calling a tool, then a user message."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the failing invoice test."},
    ]
    for turn in range(turns):
        call_id = f"call_{turn}"
        reasoning = " ".join(f"thought{turn}_{i}" for i in range(thought // 2))
        messages.append(
            {
                "role": "assistant",
                "content": reasoning,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"n": {turn}}}'},
                    }
                ],
            }
        )
        body = f"src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        body += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(output // 4))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": body})
    messages.append({"role": "user", "content": "Go on."})
    return messages


def metrics(proxy: ProxyServer) -> str:
    return httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text


def is_slot(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and str(message.get("content")).startswith(
        "[Context summary]"
    )


@pytest.mark.parametrize("policy", ["masking", "ledger-only"])
def test_the_proxy_compacts_with_no_summary_call_keeping_tools_and_the_system_prompt(
    upstream: TestUpstream, start_proxy: ProxyFactory, policy: Policy
) -> None:
    proxy = start_proxy(policy=policy)
    messages = history(14)  # over the trigger; masking every old output is not enough
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "true"
    assert chat_requests(upstream, summary=True) == [], "no summary call reached the upstream"
    (first,) = chat_requests(upstream, summary=False)
    sent = first.body["messages"]
    assert sent[0] == messages[0], "the system prompt, verbatim"
    assert sent[-1] == messages[-1], "the latest user message, verbatim"
    check_request(messages, sent)  # every tool call right before its results, in raw order
    assert first.prompt_tokens <= WINDOW * 0.4, "at or under the target"
    (slot,) = [m for m in sent if is_slot(m)]
    assert slot["content"].startswith(MECHANICAL_OPENING)
    assert "with no model summary" in slot["content"] and LEDGER_HEADER in slot["content"]
    assert "written by you" not in slot["content"]
    if policy == "ledger-only":
        assert not any(m["role"] == "tool" and MASK.fullmatch(m["content"]) for m in sent)

    # The next turn is rewritten from the same checkpoint: append-only, nothing compacted.
    messages = [*messages, {"role": "assistant", "content": "Looking."}]
    messages.append({"role": "user", "content": "And the tests?"})
    again = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    again.parse()
    assert again.headers["x-summarizer-compacted"] == "false"
    assert chat_requests(upstream, summary=False)[-1].body["messages"][: len(sent)] == sent
    assert chat_requests(upstream, summary=True) == []

    session = raw.headers["x-summarizer-session"]
    found = client(proxy).get(f"/summarizer/sessions/{session}", cast_to=object)
    assert isinstance(found, dict)
    (checkpoint,) = found["checkpoints"]
    assert checkpoint["failure"] is None
    assert "compacted mechanically, with no model summary" in checkpoint["summary"]
    text = metrics(proxy)
    assert 'summarizer_compactions_total{outcome="ledger",trigger="threshold"} 1.0' in text
    assert "summarizer_summaries_total{" not in text, "no summary was written"
    assert not re.search(r'summarizer_upstream_errors_total\{[^}]*call="summary"', text)


def test_masking_alone_when_it_is_enough(upstream: TestUpstream, start_proxy: ProxyFactory) -> None:
    proxy = start_proxy(policy="masking")
    messages = long_history(9, size=600)  # tool outputs are the bulk: masking is enough
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "true"
    assert chat_requests(upstream, summary=True) == []
    (first,) = chat_requests(upstream, summary=False)
    sent = first.body["messages"]
    check_request(messages, sent)
    assert len(sent) == len(messages) and not any(is_slot(m) for m in sent)
    assert any(m["role"] == "tool" and MASK.fullmatch(m["content"]) for m in sent)
    assert first.prompt_tokens <= WINDOW * 0.4
    text = metrics(proxy)
    assert 'summarizer_compactions_total{outcome="masked",trigger="threshold"} 1.0' in text


def test_a_streamed_request_is_compacted_the_same_way(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(policy="ledger-only")
    messages = history(14)
    stream = client(proxy).chat.completions.create(
        model=MODEL, messages=messages, tools=TOOLS, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text
    assert chat_requests(upstream, summary=True) == []
    (first,) = chat_requests(upstream, summary=False)
    check_request(messages, first.body["messages"])
    assert any(is_slot(m) for m in first.body["messages"])


@pytest.mark.parametrize("policy", ["masking", "ledger-only"])
@pytest.mark.parametrize("via", ["proxy", "library"])
def test_a_long_session_never_asks_a_model(via: str, policy: Policy) -> None:
    """120 scripted turns through ``summarizer serve`` (``policy`` in ``Settings``, drafts left
    off by the proxy's default for these policies) or ``wrap(client, policy=...)``."""
    stats = run_coding_session(
        turns=120, context_window=WINDOW, model=MODEL, via=via, policy=policy
    )
    assert stats.summary_requests == 0
    assert stats.compactions >= 3 and all(e.policy == policy for e in stats.events)
    assert all(e.verdicts == [] and e.failure is None for e in stats.events)
    assert any(e.ledger_only for e in stats.events)
    assert not any(e.ahead_of_time for e in stats.events), "no drafts by default"
    assert stats.largest_prompt_tokens <= WINDOW
    assert stats.append_only_pairs == stats.consecutive_pairs - stats.compaction_boundaries
    if via == "proxy":
        assert stats.stored_checkpoints == stats.compactions


# -- settings: the flag, the variable, the config file ---------------------------------------


def test_the_proxy_leaves_drafts_off_for_the_model_free_policies_unless_asked() -> None:
    assert Settings().compaction.prepare_ratio == 0.6
    assert Settings(policy="hybrid").compaction.prepare_ratio == 0.6
    for policy in ("masking", "ledger-only"):
        assert Settings(policy=policy).compaction.prepare_ratio is None
        assert Settings.from_env({"SUMMARIZER_POLICY": policy}).compaction.prepare_ratio is None
        assert Settings(policy=policy, prepare_ratio=0.5).compaction.prepare_ratio == 0.5


def test_a_config_file_sets_the_policy_per_model(upstream: TestUpstream, tmp_path: Path) -> None:
    config = tmp_path / "summarizer.toml"
    config.write_text(
        f'upstream = "{upstream.base_url}"\n'
        f"context_window = {WINDOW}\n"
        'prepare_ratio = "off"\n'  # the self-summary model's one summary call, not a draft's
        "\n[[models]]\n"
        'name = "gpt-4o-mini"\n'
        'policy = "ledger-only"\n'
        "\n[[models]]\n"
        'name = "gpt-4.1-*"\n'
        'policy = "masking"\n'
        "prepare_ratio = 0.6\n",
        encoding="utf-8",
    )
    settings = Settings.from_env({}, config_file=config, port=0, db=tmp_path / "c.db")
    assert settings.compaction.policy == "self-summary"
    by_name = {entry.name: entry.compaction(settings.compaction) for entry in settings.models}
    assert by_name["gpt-4o-mini"].policy == "ledger-only"
    assert by_name["gpt-4o-mini"].prepare_ratio is None
    assert by_name["gpt-4.1-*"].policy == "masking" and by_name["gpt-4.1-*"].prepare_ratio == 0.6
    lines = "\n".join(banner_lines(settings))
    assert (
        "gpt-4o-mini -> the top-level upstream (the client's key, 16,000-token window, "
        "policy ledger-only)" in lines
    )
    assert "policy masking)" in lines and "policy self-summary" in lines

    proxy = ProxyServer(settings).start()
    try:
        for model in ("gpt-4o-mini", "gpt-4o"):
            messages = history(14)
            messages[1] = {"role": "user", "content": f"Fix the failing test ({model})."}
            raw = client(proxy).chat.completions.with_raw_response.create(
                model=model, messages=messages, tools=TOOLS
            )
            raw.parse()
            assert raw.headers["x-summarizer-compacted"] == "true", model
    finally:
        proxy.stop()
    summaries = chat_requests(upstream, summary=True)
    assert [r.body["model"] for r in summaries] == ["gpt-4o"], "only the self-summary model's"
    sent = {r.body["model"]: r.body["messages"] for r in chat_requests(upstream, summary=False)}
    ledger = [m for m in sent["gpt-4o-mini"] if is_slot(m)]
    assert ledger and ledger[0]["content"].startswith(MECHANICAL_OPENING)
    summary = [m for m in sent["gpt-4o"] if is_slot(m)]
    assert summary and not summary[0]["content"].startswith(MECHANICAL_OPENING)


def test_a_config_file_with_a_bad_policy_names_the_entry(tmp_path: Path) -> None:
    config = tmp_path / "summarizer.toml"
    config.write_text('[[models]]\nname = "gpt-4o"\npolicy = "summarize"\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["serve", "--config", str(config)])
    assert result.exit_code == 2
    assert "models[0].policy" in result.output and str(config) in result.output


def test_the_policy_flag_takes_the_four_policies_and_refuses_others_clearly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[Settings] = []
    monkeypatch.setattr("context_summarizer.proxy.server.serve", started.append)
    monkeypatch.delenv("SUMMARIZER_POLICY", raising=False)
    for policy in ("self-summary", "hybrid", "masking", "ledger-only"):
        result = CliRunner().invoke(app, ["serve", "--policy", policy, "--db", ":memory:"])
        assert result.exit_code == 0, result.output
        assert started[-1].compaction.policy == policy
        assert f"policy {policy}" in "\n".join(banner_lines(started[-1]))
    assert "(no drafts ahead: this policy calls no model)" in "\n".join(banner_lines(started[-1]))
    result = CliRunner().invoke(app, ["serve", "--policy", "summarize", "--db", ":memory:"])
    assert result.exit_code == 2
    error = " ".join(result.output.split())
    assert error.startswith("error: invalid settings: policy:"), error
    for policy in ("'self-summary'", "'hybrid'", "'masking'", "'ledger-only'"):
        assert policy in error
    monkeypatch.setenv("SUMMARIZER_POLICY", "ledger-only")
    result = CliRunner().invoke(app, ["serve", "--db", ":memory:"])
    assert result.exit_code == 0, result.output
    assert started[-1].compaction.policy == "ledger-only"


@pytest.mark.parametrize("policy", ["masking", "ledger-only"])
def test_context_length_exceeded_compacts_harder_with_no_model_call(
    tmp_path: Path, policy: Policy
) -> None:
    # The proxy believes the window is 32k; the upstream enforces 12k.
    with TestUpstream(context_window=12_000) as small:
        settings = Settings(
            upstream=small.base_url,
            port=0,
            db=tmp_path / "c.db",
            context_window=32_000,
            policy=policy,
        )
        with ProxyServer(settings) as proxy:
            messages = long_history(9)
            raw = client(proxy).chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, tools=TOOLS
            )
            assert raw.parse().choices[0].message.content
            assert raw.headers["x-summarizer-compacted"] == "true"
        agent = chat_requests(small, summary=False)
        assert [r.status for r in agent] == [400, 200]
        assert chat_requests(small, summary=True) == []
        check_request(messages, agent[-1].body["messages"])


@pytest.mark.parametrize("policy", ["masking", "ledger-only"])
def test_an_explicit_prepare_ratio_drafts_with_no_model_call(
    upstream: TestUpstream, start_proxy: ProxyFactory, policy: Policy
) -> None:
    """Asked for, drafts ahead of time work under a model-free policy: drafted with no call,
    adopted by the request over the trigger; every request a valid conversation in the window."""
    proxy = start_proxy(policy=policy, prepare_ratio=0.6)
    messages = history(0)[:-1]
    for turn in range(30):
        messages += history(turn + 1)[-3:-1]  # the next tool turn
        client(proxy).chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        check_request(messages, chat_requests(upstream, summary=False)[-1].body["messages"])
    assert chat_requests(upstream, summary=True) == []
    assert all(r.prompt_tokens <= WINDOW for r in chat_requests(upstream, summary=False))
    found = dict(
        re.findall(r'summarizer_ahead_compactions_total\{outcome="(\w+)"\} (\S+)', metrics(proxy))
    )
    assert float(found.get("started", 0)) >= 1 and float(found.get("adopted", 0)) >= 1, found
