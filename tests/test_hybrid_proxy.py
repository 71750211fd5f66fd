"""The ``hybrid`` policy where users turn it on: ``summarizer serve --policy hybrid`` (flag and
``SUMMARIZER_POLICY``), the proxy in front of the test upstream with the real openai SDK, and
``wrap(client, policy="hybrid")``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.demo import run_coding_session
from context_summarizer.cli.main import app
from context_summarizer.loaders.prompts import load_prompt
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .conftest import ProxyFactory
from .test_proxy import MODEL, TOOLS, chat_requests, client, long_history

MASK = re.compile(re.sub(r"\\\{\w+\\\}", r"\\d+", re.escape(load_prompt("masked_output"))))


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=RoutingResponder(echo_responder)) as server:
        yield server


def is_masked(message: dict[str, Any]) -> bool:
    return message.get("role") == "tool" and bool(MASK.fullmatch(str(message.get("content"))))


def test_the_proxy_masks_with_no_summary_call_and_stays_append_only(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(policy="hybrid")
    messages = long_history(9, size=600)  # over the trigger (9,600 of a 12,000-token budget)
    raw = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    raw.parse()
    assert raw.headers["x-summarizer-compacted"] == "true"
    assert chat_requests(upstream, summary=True) == [], "masking was enough: no summary call"
    (first,) = chat_requests(upstream, summary=False)
    sent = first.body["messages"]
    assert len(sent) == len(messages)
    masked = [i for i, m in enumerate(sent) if is_masked(m)]
    assert masked, "old outputs were masked"
    for i in masked:
        assert sent[i]["tool_call_id"] == messages[i]["tool_call_id"]
    assert [m for i, m in enumerate(sent) if i not in masked] == [
        m for i, m in enumerate(messages) if i not in masked
    ]
    assert first.prompt_tokens <= 16_000 * 0.4, "at or under the target"

    # The next turn is rewritten from the same checkpoint: append-only, nothing compacted.
    messages = [*messages, {"role": "assistant", "content": "Looking."}]
    messages.append({"role": "user", "content": "And the tests?"})
    again = client(proxy).chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, tools=TOOLS
    )
    again.parse()
    assert again.headers["x-summarizer-compacted"] == "false"
    second = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert second[: len(sent)] == sent

    session = raw.headers["x-summarizer-session"]
    found = client(proxy).get(f"/summarizer/sessions/{session}", cast_to=object)
    assert isinstance(found, dict)
    (checkpoint,) = found["checkpoints"]
    assert checkpoint["summary"] == "" and checkpoint["failure"] is None
    metrics = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    assert 'summarizer_compactions_total{outcome="masked",trigger="threshold"} 1.0' in metrics
    assert "summarizer_summaries_total{" not in metrics, "no summary was written"


@pytest.mark.parametrize("via", ["proxy", "library"])
def test_a_long_session_with_the_hybrid_policy_saves_summary_calls(via: str) -> None:
    """120 scripted turns through ``summarizer serve`` (``policy`` in ``Settings``) or through
    ``wrap(client, policy="hybrid")``, against the same session with ``self-summary``."""
    hybrid = run_coding_session(
        turns=120, context_window=16_000, model=MODEL, via=via, policy="hybrid"
    )
    assert hybrid.largest_prompt_tokens <= 16_000
    assert hybrid.append_only_pairs == hybrid.consecutive_pairs - hybrid.compaction_boundaries
    assert all(e.policy == "hybrid" for e in hybrid.events)
    masked_only = [e for e in hybrid.events if not e.verdicts]
    assert masked_only and all(e.masked > 0 and e.summary == "" for e in masked_only)
    summarized = [e for e in hybrid.events if e.verdicts]
    assert summarized, "masking alone stops being enough as placeholders pile up"
    assert len(summarized) < hybrid.compactions
    # One summary request per summarized compaction; a draft begun ahead of time near the end
    # may have sent its request before the session ended, its compaction never due.
    assert len(summarized) <= hybrid.summary_requests <= len(summarized) + 1
    # Each summary request is the live conversation plus the instruction (cache-friendly).
    assert hybrid.summary_prefix_shared == hybrid.summary_requests
    if via == "proxy":
        assert hybrid.stored_checkpoints == hybrid.compactions
    baseline = run_coding_session(turns=120, context_window=16_000, model=MODEL, via=via)
    assert hybrid.summary_requests < baseline.summary_requests
    assert hybrid.prompt_tokens < baseline.prompt_tokens


def test_policy_comes_from_the_flag_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env({}).compaction.policy == "self-summary"
    assert Settings.from_env({"SUMMARIZER_POLICY": "hybrid"}).compaction.policy == "hybrid"
    assert Settings(policy="hybrid").compaction.policy == "hybrid"
    started: list[Settings] = []
    monkeypatch.setattr("context_summarizer.proxy.server.serve", started.append)
    monkeypatch.delenv("SUMMARIZER_POLICY", raising=False)
    result = CliRunner().invoke(app, ["serve", "--policy", "hybrid", "--db", ":memory:"])
    assert result.exit_code == 0, result.output
    assert started[-1].compaction.policy == "hybrid"
    result = CliRunner().invoke(app, ["serve", "--policy", "summarize"])
    assert result.exit_code == 2
    assert "policy" in result.output
