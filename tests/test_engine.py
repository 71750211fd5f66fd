"""The engine end to end on random conversations, through its sans-I/O seam.

Summary calls are answered in-process by a function (the engine only *yields* the call it needs),
so hypothesis can run hundreds of conversations quickly; real-socket runs are in test_wrap.py.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_summarizer import BudgetExceeded, ContextManager
from context_summarizer.core.messages import group_units, tool_call_ids, validate_messages
from context_summarizer.core.results import PrepareResult, SummarizeCall, SummaryOutcome

from .test_planner import conversations


def summarize(call: SummarizeCall) -> SummaryOutcome:
    body = call.body
    assert body["messages"][-1]["role"] == "user"
    return SummaryOutcome(text="## Task and constraints\nthe task\n## Current state\nworking")


def small_context(window: int) -> ContextManager:
    """A manager for ``window`` with small reply, summary and ledger allowances."""
    return ContextManager(
        summarizer=summarize,
        context_window=window,
        reserve_output_tokens=200,
        max_summary_tokens=200,
        ledger_max_tokens=100,
    )


def prepared(context: ContextManager, messages: list[dict[str, Any]]) -> PrepareResult | None:
    """``context.prepare(messages)``, or None when no request of it fits the window."""
    try:
        return context.prepare(messages, model="gpt-4o")
    except BudgetExceeded:
        return None


def assert_valid_conversation(messages: list[dict[str, Any]]) -> None:
    validate_messages(messages)
    for unit in group_units(messages):
        assert unit.kind != "tool", "a tool result lost its call"
        if unit.kind == "tool_exchange":
            call = messages[unit.start]
            answered = {messages[i]["tool_call_id"] for i in unit.indices[1:]}
            assert answered == set(tool_call_ids(call)), "a tool call lost its result"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.integers(1_500, 6_000))
def test_compacted_requests_are_valid_and_within_budget(
    messages: list[dict[str, Any]], window: int
) -> None:
    context = small_context(window)
    result = prepared(context, messages)
    if result is None:
        return
    sent = result.messages
    assert_valid_conversation(sent)
    # The window is the limit (the trigger is not: a final turn too large for it stays whole).
    assert result.report.estimated_tokens <= window - 200
    if messages[0]["role"] == "system":
        assert sent[0] is messages[0]
    users = [m for m in messages if m["role"] == "user"]
    assert any(m is users[0] for m in sent), "the task was dropped"
    assert any(m is users[-1] for m in sent), "the latest user message was dropped"
    # The same raw conversation is rewritten identically on the next call.
    again = context.prepare(messages, model="gpt-4o")
    assert again.messages == sent and not again.compacted


def test_growing_conversation_is_append_only_between_compactions() -> None:
    context = ContextManager(summarizer=summarize, context_window=4_000, max_summary_tokens=300)
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "task"},
    ]
    previous: list[dict[str, Any]] | None = None
    compactions = 0
    for turn in range(60):
        result = context.prepare(history, model="gpt-4o")
        if result.compacted:
            compactions += 1
        elif previous is not None:
            assert result.messages[: len(previous)] == previous
        previous = result.messages
        history.append({"role": "assistant", "content": f"step {turn} " * 40})
        history.append({"role": "user", "content": f"continue {turn}"})
    assert compactions >= 3


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), st.integers(1_500, 6_000))
def test_replaced_names_every_raw_message_not_sent_as_it_is(
    messages: list[dict[str, Any]], window: int
) -> None:
    context = small_context(window)
    result = prepared(context, messages)
    if result is None:
        return
    replaced = {i for start, end in result.replaced for i in range(start, end)}
    sent = {id(m) for m in result.messages}
    # What recall may read back is exactly what the request does not carry as it is.
    assert replaced == {i for i, m in enumerate(messages) if id(m) not in sent}
    assert result.replaced == sorted(result.replaced)
    assert (result.replaced != []) == result.rewritten
    # The next request of the same conversation stands on the same checkpoint: same ranges.
    assert context.prepare(messages, model="gpt-4o").replaced == result.replaced
