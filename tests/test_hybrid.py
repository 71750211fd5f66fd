"""The ``hybrid`` policy through the library: observation masking first, a summary only when
masking is not enough (issue 13, item 5).

Summary calls go to an in-process function that records them, so each test can say exactly
how many the engine made; the proxy and ``wrap()`` over real sockets are in
``test_hybrid_proxy.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from context_summarizer import CompactionConfig, ConfigurationError, ContextManager, PinRule
from context_summarizer.core.messages import content_text
from context_summarizer.core.results import PrepareResult, SummarizeCall, SummaryOutcome
from context_summarizer.loaders.prompts import load_prompt

from .invariants import check_request

MODEL = "gpt-4o"
MASK = re.compile(re.sub(r"\\\{\w+\\\}", r"(\\d+)", re.escape(load_prompt("masked_output"))))
"""The placeholder of ``prompts/v2/masked_output.md``, its token count captured."""

Message = dict[str, Any]


class Summaries:
    """Answers the engine's summary calls with a fixed summary and keeps every request."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        self.bodies.append(call.body)
        return SummaryOutcome(
            text="## Task and constraints\nFix the invoice totals in src/billing/invoice.py.\n\n"
            "## Current state\nThe agent read the billing modules one by one.",
            finish_reason="stop",
        )


def output(turn: int, words: int) -> str:
    """A tool output of about ``words`` tokens, naming its turn."""
    return f"src/billing/module_{turn}.py\n" + " ".join(
        f"value{turn}_{i} = {i * 7}" for i in range(words // 4)
    )


def tool_turn(turn: int, *, words: int, text: str | None = None, calls: int = 1) -> list[Message]:
    """An assistant message calling ``calls`` tools, and their outputs."""
    ids = [f"call_{turn}_{n}" for n in range(calls)]
    assistant: Message = {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"turn": {turn}}}'},
            }
            for call_id in ids
        ],
    }
    return [assistant] + [
        {"role": "tool", "tool_call_id": call_id, "content": output(turn, words)} for call_id in ids
    ]


def conversation(
    turns: int, *, words: int, text_words: int = 0, end: str = "user"
) -> list[Message]:
    """System, task, ``turns`` tool turns, then a user message (or nothing: ``end="tool"``)."""
    messages: list[Message] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the invoice totals in src/billing/invoice.py."},
    ]
    for turn in range(turns):
        text = " ".join(f"thought{turn}_{i}" for i in range(text_words)) if text_words else None
        messages.extend(tool_turn(turn, words=words, text=text))
    if end == "user":
        messages.append({"role": "user", "content": "Go on."})
    return messages


def manager(summaries: Summaries, **config: Any) -> ContextManager:
    values: dict[str, Any] = {
        "context_window": 8_000,
        "reserve_output_tokens": 0,
        "policy": "hybrid",
        "max_summary_tokens": 400,
    }
    values.update(config)
    return ContextManager(summarizer=summaries, **values)


def masked_positions(raw: list[Message], sent: list[Message]) -> list[int]:
    """Raw indices sent as a placeholder (the request must have no summary: one for one)."""
    assert len(sent) == len(raw)
    return [i for i, (r, s) in enumerate(zip(raw, sent, strict=True)) if s is not r]


def assert_masked(original: Message, sent: Message, tokens: int) -> None:
    """``sent`` is ``original`` masked: a tool message answering the same call, every field but
    the content unchanged, the content the placeholder naming the original's size."""
    assert sent["role"] == "tool" and sent["tool_call_id"] == original["tool_call_id"]
    assert {k: v for k, v in sent.items() if k != "content"} == {
        k: v for k, v in original.items() if k != "content"
    }
    found = MASK.fullmatch(sent["content"])
    assert found is not None, sent["content"]
    assert int(found[1]) == tokens


def count(context: ContextManager, message: Message) -> int:
    return context.engine.counter_for(MODEL).count_message(message)


# -- masking alone --------------------------------------------------------------------------


def test_masking_alone_lands_under_the_target_with_no_summary_call() -> None:
    summaries = Summaries()
    context = manager(summaries)
    raw = conversation(12, words=300)
    result = context.prepare(raw, model=MODEL)
    event = result.event
    assert result.compacted and event is not None
    assert summaries.bodies == [], "masking was enough: no summary call"
    assert event.policy == "hybrid" and event.verdicts == [] and event.summary == ""
    assert event.replaced == [] and event.failure is None
    assert result.report.estimated_tokens <= result.report.target_tokens
    assert event.tokens_after == result.report.estimated_tokens
    sent = result.messages
    check_request(raw, sent)
    masked = masked_positions(raw, sent)
    assert len(masked) == event.masked > 0
    for i in masked:
        assert_masked(raw[i], sent[i], count(context, raw[i]))
    saved = sum(count(context, raw[i]) - count(context, sent[i]) for i in masked)
    assert event.masked_tokens == saved


def test_masking_takes_the_oldest_outputs_and_no_more_than_the_target_needs() -> None:
    context = manager(Summaries())
    raw = conversation(12, words=300)
    result = context.prepare(raw, model=MODEL)
    masked = masked_positions(raw, result.messages)
    outputs = [i for i, m in enumerate(raw) if m["role"] == "tool"]
    assert masked == outputs[: len(masked)], "oldest first, none skipped"
    # One output fewer would have left the request over the target: one step, the smallest
    # that reaches it.
    newest = masked[-1]
    unmasked = count(context, raw[newest]) - count(context, result.messages[newest])
    assert result.report.estimated_tokens + unmasked > result.report.target_tokens


def test_the_newest_turns_the_final_unit_and_pinned_turns_are_never_masked() -> None:
    context = manager(Summaries(), mask_keep_turns=2, pin=[PinRule(pattern="module_1\\.py")])
    raw = conversation(12, words=300, end="tool")  # the final unit is a tool exchange
    result = context.prepare(raw, model=MODEL)
    assert result.event is not None and result.event.masked > 0
    masked = set(masked_positions(raw, result.messages))
    outputs = [i for i, m in enumerate(raw) if m["role"] == "tool"]
    assert outputs[1] not in masked, "the pinned turn's output"
    assert not masked & set(outputs[-2:]), "the newest two turns (the final one among them)"
    assert masked == set(outputs[:1] + outputs[2 : len(masked) + 1])


def test_parallel_outputs_of_one_turn_are_masked_together() -> None:
    context = manager(Summaries())
    raw = conversation(0, words=0, end="none")
    for turn in range(11):
        raw.extend(tool_turn(turn, words=100, calls=3))
    raw.append({"role": "user", "content": "Go on."})
    result = context.prepare(raw, model=MODEL)
    masked = masked_positions(raw, result.messages)
    ids = {raw[i]["tool_call_id"].rsplit("_", 1)[0] for i in masked}
    by_turn = {t: [i for i in masked if raw[i]["tool_call_id"].startswith(t + "_")] for t in ids}
    assert all(len(indices) == 3 for indices in by_turn.values()), by_turn


# -- falling through to a summary ----------------------------------------------------------


def test_when_masking_is_not_enough_the_model_summarizes_and_the_result_is_under_the_target() -> (
    None
):
    summaries = Summaries()
    context = manager(summaries)
    # The bulk is the agent's own reasoning: masking every old output cannot reach the target.
    raw = conversation(14, words=120, text_words=80)
    result = context.prepare(raw, model=MODEL)
    event = result.event
    assert event is not None and event.policy == "hybrid"
    assert len(summaries.bodies) == 1 and event.verdicts == ["accepted"]
    assert event.masked > 0
    assert result.report.estimated_tokens <= result.report.target_tokens
    check_request(raw, result.messages)
    # The summary request is the live conversation plus the instruction (a prefix of what the
    # model saw last, so the provider's cache serves it): no placeholder in it.
    shown = summaries.bodies[0]["messages"][:-1]
    assert shown == raw[: len(shown)]
    # The outputs the summary does not stand for stay masked.
    kept = [m for m in result.messages if m["role"] == "tool"]
    assert kept and all(MASK.fullmatch(m["content"]) for m in kept[:-3])


def test_a_summary_failure_sends_the_request_unchanged_when_it_fits() -> None:
    def fail(call: SummarizeCall) -> SummaryOutcome:
        return SummaryOutcome(error="scripted failure")

    context = ContextManager(
        summarizer=fail, context_window=8_000, reserve_output_tokens=0, policy="hybrid"
    )
    raw = conversation(14, words=120, text_words=80)  # over the trigger, inside the window
    result = context.prepare(raw, model=MODEL)
    assert not result.compacted and result.messages == raw


# -- over time ------------------------------------------------------------------------------


def test_a_growing_session_is_append_only_between_compactions_and_never_remasked(
    tmp_path: Path,
) -> None:
    summaries = Summaries()
    store = tmp_path / "store.db"
    context = manager(summaries, context_window=12_000, store=store)
    raw = conversation(0, words=0, end="none")
    previous: list[Message] | None = None
    masks: dict[str, str] = {}  # tool_call_id -> the placeholder it was first sent as
    events = []
    for turn in range(110):
        raw.extend(tool_turn(turn, words=300, text="Reading the next module."))
        result = context.prepare(raw, model=MODEL)
        sent = result.messages
        check_request(raw, sent)
        assert result.report.estimated_tokens <= result.report.trigger_tokens
        if result.compacted:
            assert result.event is not None
            events.append(result.event)
            assert result.report.estimated_tokens <= result.report.target_tokens
        elif previous is not None:
            assert sent[: len(previous)] == previous, f"turn {turn}: not append-only"
        for message in sent:
            if message["role"] == "tool" and MASK.fullmatch(message["content"]):
                first = masks.setdefault(message["tool_call_id"], message["content"])
                assert message["content"] == first, "re-masked"
            elif message["role"] == "tool":
                assert message["tool_call_id"] not in masks, "unmasked again"
        previous = sent
        check_fresh_process(store, raw, result)
    context.close()
    masked_only = [e for e in events if not e.verdicts]
    summarized = [e for e in events if e.verdicts]
    assert len(masked_only) >= 3 and summarized, [(e.masked, e.verdicts) for e in events]
    assert len(summaries.bodies) == len(summarized) < len(events)


def check_fresh_process(store: Path, raw: list[Message], result: PrepareResult) -> None:
    """A new process over the same store rewrites ``raw`` to the same messages."""
    fresh = ContextManager(context_window=12_000, reserve_output_tokens=0, store=store)
    try:
        again = fresh.unchanged(raw, model=MODEL)
    finally:
        fresh.close()
    assert again is not None and again.messages == result.messages


# -- the default and the setting ------------------------------------------------------------


def test_self_summary_stays_the_default_and_masks_nothing() -> None:
    summaries = Summaries()
    context = ContextManager(
        summarizer=summaries, context_window=8_000, reserve_output_tokens=0, max_summary_tokens=400
    )
    assert context.config.policy == "self-summary"
    raw = conversation(12, words=300)
    result = context.prepare(raw, model=MODEL)
    assert result.event is not None and result.event.policy == "self-summary"
    assert result.event.masked == 0 and len(summaries.bodies) == 1
    assert not any(MASK.fullmatch(content_text(m)) for m in result.messages)


def test_an_unknown_policy_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigurationError, match="policy"):
        CompactionConfig(policy="summarize")
    with pytest.raises(ConfigurationError, match="mask_keep_turns"):
        CompactionConfig(policy="hybrid", mask_keep_turns=-1)
