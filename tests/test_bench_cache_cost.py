"""The cache-cost benchmark's replay and accounting, on small hand-made sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.cache_accounting import (
    Shapes,
    bill_requests,
    lower_bound_bills,
    session_cost,
)
from benchmarks.cache_cost import run
from benchmarks.cache_cost_measure import cache_models
from benchmarks.cache_replay import replay_all, replay_raw
from benchmarks.cache_replay_engine import replay_engine, stand_in_summary
from benchmarks.cache_replay_masking import replay_masking_rolling, replay_masking_stepped
from benchmarks.cache_replay_session import (
    FROM_SCRATCH,
    MASKING_ROLLING,
    MASKING_STEPPED,
    NO_COMPACTION,
    SELF_SUMMARY,
    SUMMARY_TOKENS,
    SentRequest,
    Session,
    replay_counter,
)
from context_summarizer.evaluation.pricing import Price, price_for

GPT5 = price_for("gpt-5", {m.model: m.price for m in cache_models()})
SONNET = price_for("claude-sonnet-4", {m.model: m.price for m in cache_models()})
assert GPT5 is not None and SONNET is not None
OPENAI: Price = GPT5
ANTHROPIC: Price = SONNET


def text(label: str, words: int) -> str:
    """Distinct words, about two tokens each."""
    return " ".join(f"{label}{k}" for k in range(words))


def tool_session(turns: int, *, words: int = 150, name: str = "tiny") -> Session:
    """A system prompt, a task, then ``turns`` tool calls with outputs of ``words`` words, and a
    final answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " + text("sys", 40)},
        {"role": "user", "content": "Fix the failing test in src/app.py. " + text("task", 40)},
    ]
    for turn in range(turns):
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "src/f{turn}.py"}}'},
        }
        messages.append({"role": "assistant", "content": f"Reading f{turn}.", "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": text(f"o{turn}x", words)}
        )
    messages.append({"role": "assistant", "content": "Done: the test passes."})
    return Session(name, messages, None)


def request(messages: list[dict[str, Any]], *, ends: tuple[int, ...] | None = None) -> SentRequest:
    return SentRequest("agent", messages, None, 10, (len(messages),) if ends is None else ends)


def prefix_tokens(shapes: Shapes, messages: list[dict[str, Any]], count: int) -> int:
    return shapes.measure(request(messages)).cumulative[count]


# --- accounting --------------------------------------------------------------------------------


@pytest.mark.parametrize("price", [OPENAI, ANTHROPIC], ids=["automatic", "explicit"])
def test_append_only_session_reuses_the_previous_request(price: Price) -> None:
    session = tool_session(12)
    replay = replay_raw(session)
    shapes = Shapes(replay_counter())
    bills = bill_requests(replay.requests, price, shapes)
    assert bills[0].reusable_prefix_tokens == 0
    for before, after, bill in zip(replay.requests, replay.requests[1:], bills[1:], strict=False):
        previous = shapes.measure(before).cumulative[-1]
        # An explicit breakpoint only caches a prefix that reaches the minimum.
        cached = price.cache == "automatic" or previous >= price.min_cache_tokens
        assert bill.reusable_prefix_tokens == (previous if cached else 0)
        assert bill.prompt_tokens == shapes.measure(after).prompt_tokens
    # Once the previous request reaches the minimum, the cache serves it (OpenAI: rounded down).
    late = bills[-1]
    assert late.cost.cached_tokens > 0
    assert late.reusable_prefix_tokens - late.cost.cached_tokens < price.cache_step


def test_self_summary_request_reuses_all_but_the_instruction() -> None:
    session = tool_session(10)
    history = session.messages[:-1]
    instruction = {"role": "user", "content": "Summarize your work so far. " + text("i", 50)}
    agent = request(history)
    summary = SentRequest("summary", [*history, instruction], None, 1500, (len(history) + 1,))
    shapes = Shapes(replay_counter())
    for price in (OPENAI, ANTHROPIC):
        bills = bill_requests([agent, summary], price, shapes)
        counted = replay_counter().count_message(instruction)
        assert bills[1].reusable_prefix_tokens == bills[1].prompt_tokens - counted - 3
        assert bills[1].cost.cached_tokens >= bills[1].reusable_prefix_tokens - 127


def test_from_scratch_request_reuses_nothing_and_is_plain_input() -> None:
    session = tool_session(10)
    agent = request(session.messages[:-1])
    scratch = SentRequest(
        "summary",
        [
            {"role": "system", "content": "You summarize transcripts."},
            {"role": "user", "content": "Transcript: " + text("t", 800)},
        ],
        None,
        1500,
        (),
    )
    shapes = Shapes(replay_counter())
    openai_bill = bill_requests([agent, scratch], OPENAI, shapes)[1]
    assert openai_bill.reusable_prefix_tokens == 0
    assert openai_bill.cost.cached_tokens == 0
    anthropic_bill = bill_requests([agent, scratch], ANTHROPIC, shapes)[1]
    assert anthropic_bill.cost.cached_tokens == anthropic_bill.cost.cache_write_tokens == 0
    expected = (anthropic_bill.prompt_tokens * 3.0 + 1500 * 15.0) / 1_000_000
    assert anthropic_bill.cost.usd == pytest.approx(expected)


def test_explicit_cache_reads_only_at_earlier_breakpoints() -> None:
    messages = tool_session(6, words=400).messages
    first = request(messages[:6])  # breakpoint at its end only
    rewritten = [*messages[:2], {"role": "user", "content": "Summary. " + text("s", 300)}]
    after = request(rewritten)
    shapes = Shapes(replay_counter())
    openai = bill_requests([first, after], OPENAI, shapes)[1]
    anthropic = bill_requests([first, after], ANTHROPIC, shapes)[1]
    # The automatic cache serves the shared system prompt and task; no breakpoint sat there.
    assert openai.reusable_prefix_tokens == prefix_tokens(shapes, messages, 2)
    assert anthropic.reusable_prefix_tokens == 0
    # With a breakpoint after the task in the first request, the explicit cache serves it too
    # (when it reaches the minimum), and nothing longer.
    first_marked = request(messages[:6], ends=(2, 6))
    marked = bill_requests([first_marked, after], ANTHROPIC, shapes)[1]
    shared = prefix_tokens(shapes, messages, 2)
    assert marked.reusable_prefix_tokens == (shared if shared >= 1024 else 0)
    # A later request that extends the first one reads the first one's end.
    longer = bill_requests([first, request(messages[:8])], ANTHROPIC, shapes)[1]
    assert longer.reusable_prefix_tokens == prefix_tokens(shapes, messages, 6)
    assert longer.cost.cache_write_tokens == longer.prompt_tokens - longer.reusable_prefix_tokens


def test_explicit_cache_lookback_is_limited() -> None:
    messages = tool_session(20, words=400).messages
    first = request(messages[:6])  # over the 1,024-token minimum
    far = request(messages[:40])  # 34 messages (51 blocks) later: beyond the lookback
    near = request(messages[:18])  # 12 messages (18 blocks) later: within it
    shapes = Shapes(replay_counter())
    limited = bill_requests([first, far], ANTHROPIC, shapes)[1]
    unlimited = bill_requests([first, far], ANTHROPIC, shapes, lookback_blocks=10**6)[1]
    assert limited.reusable_prefix_tokens == 0
    assert unlimited.reusable_prefix_tokens == prefix_tokens(shapes, messages, 6)
    within = bill_requests([first, near], ANTHROPIC, shapes)[1]
    assert within.reusable_prefix_tokens == prefix_tokens(shapes, messages, 6)


def test_input_equivalent_tokens_weigh_each_billing_class() -> None:
    messages = tool_session(8, words=300).messages
    shapes = Shapes(replay_counter())
    alone = request(messages[:10])
    prompt = shapes.measure(alone).prompt_tokens
    gpt = session_cost(bill_requests([alone], OPENAI, shapes), OPENAI, compactions=0)
    assert gpt.input_equivalent == pytest.approx(prompt + 10 * 8)
    claude = session_cost(bill_requests([alone], ANTHROPIC, shapes), ANTHROPIC, compactions=0)
    assert claude.input_equivalent == pytest.approx(prompt * 1.25 + 10 * 5)
    assert claude.cache_share == 0.0


# --- replays -----------------------------------------------------------------------------------


def test_stand_in_summary_has_the_asked_length() -> None:
    summary = stand_in_summary(SUMMARY_TOKENS, "summary 1 of x")
    assert abs(replay_counter().count_text(summary) - SUMMARY_TOKENS) <= 2
    assert stand_in_summary(SUMMARY_TOKENS, "summary 1 of x") == summary


def test_self_summary_replay_is_production_and_from_scratch_differs_only_in_summaries() -> None:
    session = tool_session(40)
    own, scratch = replay_engine(session, window=8_000)
    assert own.compactions >= 2
    own_agents = [r for r in own.requests if r.purpose == "agent"]
    scratch_agents = [r for r in scratch.requests if r.purpose == "agent"]
    assert own_agents == scratch_agents
    assert len(own_agents) == 41
    shapes = Shapes(replay_counter())
    bills = bill_requests(own.requests, OPENAI, shapes)
    summaries = [k for k, r in enumerate(own.requests) if r.purpose == "summary"]
    assert len(summaries) == own.compactions
    for k in summaries:
        previous, summary, following = own.requests[k - 1 : k + 2]
        # The live prefix: the summary request starts with the previous request, byte for byte.
        assert list(summary.messages[: len(previous.messages)]) == list(previous.messages)
        assert bills[k].reusable_prefix_tokens == shapes.measure(previous).cumulative[-1]
        # The next agent request is rewritten: a breakpoint right after the summary message.
        assert following.rewritten
        position = following.breakpoints[0]
        assert following.messages[position - 1]["content"].startswith("[Context summary]")
    scratch_summaries = [r for r in scratch.requests if r.purpose == "summary"]
    assert len(scratch_summaries) == own.compactions
    first = scratch_summaries[0]
    assert first.breakpoints == () and first.tools is None
    transcript = first.messages[1]["content"]
    assert "o0x0" in transcript and "Reading f0." in transcript


def test_masking_replays_mask_old_outputs() -> None:
    session = tool_session(30)
    rolling = replay_masking_rolling(session, window=64_000)
    last = rolling.requests[-1].messages
    masked = [m for m in last if "old tool output omitted" in str(m.get("content"))]
    assert len(masked) == 30 - 10
    assert rolling.compactions == 0 and rolling.narrowed == 0
    stepped = replay_masking_stepped(session, window=8_000)
    assert stepped.compactions >= 1
    for before, after in zip(stepped.requests, stepped.requests[1:], strict=False):
        if not after.rewritten:  # append-only between steps
            assert list(after.messages[: len(before.messages)]) == list(before.messages)


@pytest.mark.parametrize("price", [OPENAI, ANTHROPIC], ids=["automatic", "explicit"])
def test_lower_bound_is_below_every_strategy_when_nothing_is_dropped(price: Price) -> None:
    session = tool_session(25)
    shapes = Shapes(replay_counter())
    replays = replay_all(session, window=128_000)  # nothing compacts, nothing is masked...
    replays.pop(MASKING_ROLLING)  # ...except by rolling masking, which masks at any size
    bound = session_cost(
        lower_bound_bills(replays[NO_COMPACTION].requests, price, shapes), price, compactions=0
    )
    for replay in replays.values():
        assert replay.compactions == 0
        cost = session_cost(bill_requests(replay.requests, price, shapes), price, compactions=0)
        assert bound.input_equivalent <= cost.input_equivalent + 1e-9
    # In a small window the compacting strategies send less, and may cost less than the bound;
    # keeping the whole history never does.
    small = replay_all(session, window=8_000)
    raw = session_cost(
        bill_requests(small[NO_COMPACTION].requests, price, shapes), price, compactions=0
    )
    assert bound.input_equivalent <= raw.input_equivalent
    assert small[SELF_SUMMARY].compactions >= 1 and small[FROM_SCRATCH].compactions >= 1
    assert small[MASKING_STEPPED].compactions >= 1


def test_quick_run_reports_tables_and_floors(tmp_path: Path) -> None:
    section = run(quick=True, out_dir=tmp_path)
    assert section.command == "python -m benchmarks.cache_cost"
    assert len(section.floors) == 8
    assert "| self-summary |" in section.body and "| lower bound |" in section.body
    assert (tmp_path / section.files[0]).exists()
