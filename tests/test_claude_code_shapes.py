"""What Claude Code sends, through the proxy with the real ``anthropic`` SDK over real HTTP.

Captured from Claude Code 2.1 pointed at ``summarizer serve --test-upstream``:

- its newest user turn goes as a list of text blocks carrying its cache breakpoint, and the same
  turn comes back on the next request as a plain string (its breakpoint moved to the new turn);
- with its default model it puts a ``{"role": "system"}`` message inside ``messages``, right
  after a user turn (a mid-conversation system message);
- a system prompt of 3 text blocks, the last one marked, and the beta fields ``thinking``,
  ``context_management`` and ``output_config``, on ``/v1/messages?beta=true``.

Before the identity fix, the form change made every request after the first compaction look
like a new conversation: it compacted again on every turn, each time from the raw size.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from context_summarizer.core.messages import message_text
from context_summarizer.proxy import ProxyServer
from context_summarizer.testing import RecordedRequest, Reply, RoutingResponder, TestUpstream

from .conftest import ProxyFactory

MODEL = "claude-opus-4-8"
KEY = "sk-ant-test-claude-code-0123"
SYSTEM = [
    {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328;"},
    {"type": "text", "text": "You are a Claude agent, built on Anthropic's Claude Agent SDK."},
    {
        "type": "text",
        "text": "You are an interactive agent that helps users with software engineering tasks. "
        * 20,
        "cache_control": {"type": "ephemeral"},
    },
]
ENVIRONMENT = "# Environment\nPrimary working directory: /work/project\nPlatform: linux\n" * 30
EXTRAS: dict[str, Any] = {
    "thinking": {"type": "adaptive", "display": "omitted"},
    "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    "output_config": {"effort": "medium"},
    "metadata": {"user_id": '{"device_id":"abc","session_id":"s-1"}'},
}
TASK = "Review each log I paste and tell me which module needs its value changed."
BETAS = (
    "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,"
    "per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,"
    "thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24"
)


def review(body: dict[str, Any]) -> Reply:
    """The agent's answer: what it found in the newest turn (so a summary has work to tell)."""
    said = message_text(body["messages"][-1])
    found = said.split(". ", 1)[-1][:120]
    return Reply(content=f"Reviewed {said[:8]}: {found}; src/mod3.py needs its value raised.")


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    agent = RoutingResponder(review)
    with TestUpstream(context_window=40_000, responder=agent) as server:
        yield server


def client(proxy: ProxyServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=proxy.base_url.removesuffix("/v1"),
        api_key=KEY,
        max_retries=0,
        default_headers={"anthropic-beta": BETAS},
        default_query={"beta": "true"},
    )


def turn_text(number: int) -> str:
    """A user turn of about 1,500 tokens, different each time."""
    return f"Turn {number}: please review this log. " + " ".join(
        f"line{j} value={(number * 7919 + j * 104729) % 1000} path=src/mod{j}.py"
        for j in range(120)
    )


def as_claude_code_sends(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``history`` as Claude Code sends it: the newest user turn a list of text blocks with the
    breakpoint on its last block, every earlier single-text user turn a plain string."""
    sent = copy.deepcopy(history)
    last = sent[-1]
    last["content"] = [
        {"type": "text", "text": last["content"], "cache_control": {"type": "ephemeral"}}
    ]
    return sent


def run_claude_code_like_session(
    proxy: ProxyServer, *, turns: int, mid_system: bool
) -> list[tuple[bool, int]]:
    """A Claude Code-like conversation of ``turns`` user turns through the proxy; for each
    request, (compacted, the proxy's estimate of the prompt it sent)."""
    api = client(proxy)
    first: dict[str, Any] = {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>\nAs you answer...\n</system-reminder>"},
            {"type": "text", "text": TASK},
        ],
    }
    history: list[dict[str, Any]] = [first]
    if mid_system:
        history.append({"role": "system", "content": [{"type": "text", "text": ENVIRONMENT}]})
    outcomes: list[tuple[bool, int]] = []
    for number in range(1, turns + 1):
        if number > 1:
            history.append({"role": "user", "content": turn_text(number)})
        sent = as_claude_code_sends(history) if number > 1 else copy.deepcopy(history)
        raw = api.messages.with_raw_response.create(
            model=MODEL, max_tokens=8_000, system=SYSTEM, messages=sent, extra_body=EXTRAS
        )
        reply = raw.parse()
        outcomes.append(
            (
                raw.headers["x-summarizer-compacted"] == "true",
                int(raw.headers["x-summarizer-prompt-tokens"]),
            )
        )
        history.append(
            {
                "role": "assistant",
                "content": [b.model_dump(exclude_none=True) for b in reply.content],
            }
        )
    return outcomes


def sent_upstream(upstream: TestUpstream) -> tuple[list[RecordedRequest], list[RecordedRequest]]:
    """The summary requests and the agent's requests the upstream answered (all with 200);
    token counts the proxy asked for aside."""
    sent = [r for r in upstream.requests if r.path.endswith("/v1/messages")]
    assert all(r.status == 200 for r in sent)
    return [r for r in sent if r.is_summary], [r for r in sent if not r.is_summary]


@pytest.mark.parametrize("mid_system", [False, True], ids=["plain", "mid-conversation-system"])
def test_a_turn_resent_in_another_form_does_not_compact_again(
    upstream: TestUpstream, start_proxy: ProxyFactory, mid_system: bool
) -> None:
    proxy = start_proxy(context_window=40_000)
    outcomes = run_claude_code_like_session(proxy, turns=36, mid_system=mid_system)
    compacted = [number for number, (done, _) in enumerate(outcomes) if done]
    summaries, agents = sent_upstream(upstream)
    assert len(agents) == len(outcomes)
    # A turn adds about 1.5k tokens; from the target (40% of the usable window) back to the
    # trigger (80%) takes several turns, so two compactions in a row mean the checkpoint was
    # not recognised on the request after one.
    assert len(compacted) >= 2, outcomes
    assert all(b - a > 3 for a, b in itertools.pairwise(compacted)), compacted
    assert len(summaries) == len(compacted)  # one summary call per compaction
    # What went upstream fit the usable window (the window less the 8,000-token reply reserve).
    assert all(sent <= 40_000 - 8_000 for _, sent in outcomes)


def test_a_mid_conversation_system_message_is_kept_verbatim_in_place(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(context_window=40_000)
    run_claude_code_like_session(proxy, turns=24, mid_system=True)
    summaries, agents = sent_upstream(upstream)
    assert summaries
    expected = {"role": "system", "content": [{"type": "text", "text": ENVIRONMENT}]}
    for request in agents + summaries:
        messages = request.body["messages"]
        systems = [n for n, m in enumerate(messages) if m["role"] == "system"]
        assert [messages[n] for n in systems] == [expected]
        # Where the client put it: right after the first user turn, the task, which the proxy
        # keeps verbatim.
        assert systems == [1]
        assert messages[0]["content"][1]["text"] == TASK


def test_the_test_upstream_places_mid_conversation_system_messages_as_the_api_does(
    upstream: TestUpstream,
) -> None:
    api = anthropic.Anthropic(base_url=upstream.base_url.removesuffix("/v1"), api_key=KEY)
    system = {"role": "system", "content": "Updated instructions."}
    accepted = [
        [{"role": "user", "content": "hi"}, system],
        [{"role": "user", "content": "hi"}, system, {"role": "assistant", "content": "ok"}],
    ]
    for messages in accepted:
        api.messages.create(model=MODEL, max_tokens=50, messages=messages)  # type: ignore[arg-type]
    refused = {
        "messages.0: a system message must immediately follow a user turn": [system],
        "messages.2: a system message must immediately follow a user turn": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "ok"},
            system,
        ],
        "messages.1.content.0.type: Input should be 'text'": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": [{"type": "image", "source": {}}]},
        ],
    }
    for message, messages in refused.items():
        with pytest.raises(anthropic.BadRequestError) as raised:
            api.messages.create(model=MODEL, max_tokens=50, messages=messages)  # type: ignore[arg-type]
        assert message in str(raised.value)


def test_a_window_the_agent_cannot_use_names_the_fix(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(context_window=40_000)
    api = client(proxy)
    history = [{"role": "user", "content": TASK}]
    # Claude Code's default reply cap is the whole window: forwarded unmanaged (the upstream,
    # with the same window, refuses it), and the proxy says why and what to change.
    with pytest.raises(anthropic.BadRequestError) as refused:
        api.messages.create(
            model=MODEL, max_tokens=64_000, system=SYSTEM, messages=history, timeout=60
        )
    assert "exceed context limit" in str(refused.value)  # the upstream's own words
    warning = refused.value.response.headers["x-summarizer-warning"]
    assert "64,000" in warning and "CLAUDE_CODE_MAX_OUTPUT_TOKENS" in warning
    assert "--context-window" in warning
    # A cap that leaves too little for the prompt (32,000 of 40,000, under a 12k-token load):
    # refused before anything goes upstream, saying which settings fix it.
    sent = len(upstream.requests)
    pasted = "\n".join(turn_text(n) for n in range(1, 7))  # about 9,000 tokens, kept whole
    with pytest.raises(anthropic.BadRequestError) as raised:
        api.messages.create(
            model=MODEL,
            max_tokens=32_000,
            system=SYSTEM,
            messages=[{"role": "user", "content": f"{TASK}\n{pasted}"}],
            timeout=60,
        )
    message = str(raised.value)
    assert "32,000" in message and "CLAUDE_CODE_MAX_OUTPUT_TOKENS=8000" in message
    assert "--context-window" in message
    assert len(upstream.requests) == sent
