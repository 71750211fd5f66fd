"""The model-free policies through the library: ``ledger-only`` (each compacted run becomes a
note and its fact ledger) and ``masking`` (observation masking first, as ``hybrid``; then the
fact ledger where masking is not enough). Neither ever asks a model.

Summary calls go to an in-process function that records them (as in ``test_hybrid.py``), so each
test says exactly how many the engine made: none. The proxy over real sockets is in
``test_model_free_proxy.py``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from context_summarizer import CompactionEvent, ContextManager
from context_summarizer.core.facts import (
    LEDGER_HEADER,
    extract_facts,
    is_summary_message,
    parse_ledger,
)
from context_summarizer.core.messages import content_text
from context_summarizer.core.results import Policy, PrepareResult
from context_summarizer.core.summary_request import summary_message
from context_summarizer.loaders.prompts import load_prompt, render_prompt

from .invariants import check_request
from .test_hybrid import MASK, MODEL, Message, Summaries, conversation, masked_positions, tool_turn

PROMPTS = Path(__file__).resolve().parent.parent / "prompts"
MECHANICAL_OPENING = load_prompt("mechanical_frame").split("{", 1)[0].strip()
"""How a slot no model wrote opens (frame text up to its placeholders)."""


def manager(summaries: Summaries, policy: Policy, **config: Any) -> ContextManager:
    values: dict[str, Any] = {
        "context_window": 8_000,
        "reserve_output_tokens": 0,
        "policy": policy,
        "max_summary_tokens": 400,
    }
    values.update(config)
    return ContextManager(summarizer=summaries, **values)


def slots(sent: list[Message]) -> list[str]:
    """The texts of the summary messages the engine inserted."""
    return [
        content_text(m)
        for m in sent
        if m["role"] == "user" and content_text(m).startswith("[Context summary]")
    ]


def assert_ledger_slot(text: str, event: CompactionEvent, raw: list[Message]) -> None:
    """``text`` is a model-free slot: the mechanical frame (never "written by you"), the note
    naming how many messages and tokens it stands for, then the fact ledger."""
    assert text.startswith(MECHANICAL_OPENING)
    assert "written by you" not in text and "could not summarize" not in text
    (start, end) = event.replaced[0]
    assert f"with no model summary: {end - start} messages (" in text
    note = render_prompt("ledger_summary", message_count=end - start, original_tokens=0)
    assert note.split("(")[0] in text
    assert LEDGER_HEADER in text


# -- ledger-only ------------------------------------------------------------------------------


@pytest.mark.parametrize("raw_turns", [(12, 300, 0), (14, 120, 80)])
def test_ledger_only_compacts_under_the_target_with_no_model_call_and_no_failure(
    raw_turns: tuple[int, int, int], caplog: pytest.LogCaptureFixture
) -> None:
    turns, words, text_words = raw_turns
    summaries = Summaries()
    events: list[CompactionEvent] = []
    context = manager(summaries, "ledger-only", on_compaction=events.append)
    raw = conversation(turns, words=words, text_words=text_words)
    with caplog.at_level(logging.INFO, logger="summarizer"):
        result = context.prepare(raw, model=MODEL)
    event = result.event
    assert result.compacted and event is not None and events == [event]
    assert summaries.bodies == [], "ledger-only never asks a model"
    assert event.policy == "ledger-only" and event.applied
    assert event.verdicts == [] and event.problems == [] and event.failure is None
    assert event.ledger_only == len(event.replaced) == 1 and event.masked == 0
    assert result.report.estimated_tokens <= result.report.target_tokens
    check_request(raw, result.messages)
    assert not any(MASK.fullmatch(content_text(m)) for m in result.messages)
    (text,) = slots(result.messages)
    assert_ledger_slot(text, event, raw)
    # The facts of the turns it replaced, verbatim: every module the agent read there.
    start, end = event.replaced[0]
    read = {m["content"].split("\n", 1)[0] for m in raw[start:end] if m["role"] == "tool"}
    assert read and all(path in text for path in read)
    # Not a failure: nothing warns, and the log line says what happened.
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("1 fact ledger (no model)" in r.getMessage() for r in caplog.records)
    assert any("policy ledger-only" in r.getMessage() for r in caplog.records)


def test_ledger_only_is_planned_as_self_summary() -> None:
    """With the same verbatim tail, ``ledger-only`` replaces exactly the turns ``self-summary``
    does; with the default tail it keeps at least as many recent turns (its slot is smaller
    than a model's summary, and the planner gives the room back to the tail)."""
    raw = conversation(14, words=120, text_words=80)
    for tail in (1_200, None):
        own = manager(Summaries(), "self-summary", keep_recent_tokens=tail)
        ledger = manager(Summaries(), "ledger-only", keep_recent_tokens=tail)
        summarized = own.prepare(raw, model=MODEL).event
        mechanical = ledger.prepare(raw, model=MODEL).event
        assert summarized is not None and mechanical is not None
        if tail is not None:
            assert mechanical.replaced == summarized.replaced
            assert mechanical.kept_indices == summarized.kept_indices
        else:
            assert mechanical.replaced[0][0] == summarized.replaced[0][0]
            assert mechanical.replaced[-1][1] <= summarized.replaced[-1][1]


def test_ledger_only_with_on_failure_raise_does_not_raise() -> None:
    """A ledger-only slot is not a failed summary, so ``on_failure="raise"`` has nothing to do."""
    summaries = Summaries()
    context = manager(summaries, "ledger-only", on_failure="raise")
    result = context.prepare(conversation(12, words=300), model=MODEL)
    assert result.compacted and summaries.bodies == []


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_every_prompt_version_has_the_model_free_prompts(version: str) -> None:
    context = manager(Summaries(), "ledger-only", prompt_version=version)
    result = context.prepare(conversation(12, words=300), model=MODEL)
    (text,) = slots(result.messages)
    assert text.startswith(load_prompt("mechanical_frame", version).split("{", 1)[0].strip())


def test_every_shipped_mechanical_frame_is_a_summary_the_ledger_never_reads() -> None:
    """A model-free slot opens like every summary the engine writes, so a client that sends it
    back never has it mined for "verbatim" facts: its ledger is read back as it was."""
    frames = sorted(PROMPTS.glob("*/mechanical_frame.md"))
    assert [f.parent.name for f in frames] == ["v1", "v2"]
    for path in frames:
        frame = path.read_text(encoding="utf-8")
        assert frame.startswith("[Context summary]") and "written by you" not in frame
        message = summary_message("Compacted mechanically: `src/x.py`.", "", frame)
        assert is_summary_message(message), path
    result = manager(Summaries(), "ledger-only").prepare(conversation(12, words=300), model=MODEL)
    (text,) = slots(result.messages)
    slot = {"role": "user", "content": text}
    assert is_summary_message(slot) and extract_facts([slot]) == []
    assert parse_ledger(text), "the ledger reads back"


# -- masking ----------------------------------------------------------------------------------


def test_masking_when_enough_is_hybrids_masking_with_no_model_call() -> None:
    raw = conversation(12, words=300)
    summaries = Summaries()
    result = manager(summaries, "masking").prepare(raw, model=MODEL)
    hybrid = manager(Summaries(), "hybrid").prepare(raw, model=MODEL)
    event = result.event
    assert event is not None and event.policy == "masking"
    assert summaries.bodies == [] and event.verdicts == [] and event.ledger_only == 0
    assert event.masked > 0 and event.replaced == [] and event.summary == ""
    assert result.messages == hybrid.messages
    assert result.report.estimated_tokens <= result.report.target_tokens
    masked = masked_positions(raw, result.messages)
    outputs = [i for i, m in enumerate(raw) if m["role"] == "tool"]
    assert masked == outputs[: len(masked)], "oldest first"


def test_masking_not_enough_masks_first_then_makes_a_fact_ledger_with_no_model_call() -> None:
    summaries = Summaries()
    raw = conversation(14, words=120, text_words=80)  # the bulk is the agent's own reasoning
    result = manager(summaries, "masking").prepare(raw, model=MODEL)
    event = result.event
    assert event is not None and event.policy == "masking"
    assert summaries.bodies == [], "masking never asks a model"
    assert event.masked > 0 and event.ledger_only == 1 and event.verdicts == []
    assert event.failure is None
    assert result.report.estimated_tokens <= result.report.target_tokens
    check_request(raw, result.messages)
    (text,) = slots(result.messages)
    assert_ledger_slot(text, event, raw)
    # The outputs the ledger does not stand for stay masked, all but the newest turns'.
    kept = [m for m in result.messages if m["role"] == "tool"]
    assert kept and all(MASK.fullmatch(m["content"]) for m in kept[:-3])
    assert not any(MASK.fullmatch(m["content"]) for m in kept[-3:])
    # The ledger is extracted from the raw turns: a masked output's path is in it.
    start, end = event.replaced[0]
    first_read = next(m for m in raw[start:end] if m["role"] == "tool")["content"].split("\n")[0]
    assert first_read in text.split(LEDGER_HEADER, 1)[1]


# -- over time --------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["masking", "ledger-only"])
def test_a_growing_session_is_append_only_between_compactions_and_never_asks_a_model(
    tmp_path: Path, policy: Policy
) -> None:
    summaries = Summaries()
    store = tmp_path / "store.db"
    context = manager(summaries, policy, context_window=12_000, store=store)
    raw: list[Message] = conversation(0, words=0, end="none")
    previous: list[Message] | None = None
    events: list[CompactionEvent] = []
    for turn in range(90):
        raw.extend(tool_turn(turn, words=300, text="Reading the next module."))
        result = context.prepare(raw, model=MODEL)
        sent = result.messages
        check_request(raw, sent)
        assert result.report.estimated_tokens <= result.report.trigger_tokens
        if result.compacted:
            assert result.event is not None
            events.append(result.event)
        elif previous is not None:
            assert sent[: len(previous)] == previous, f"turn {turn}: not append-only"
        previous = sent
        check_fresh_process(store, raw, result, policy)
    context.close()
    assert summaries.bodies == []
    assert len(events) >= 3 and all(e.policy == policy and not e.verdicts for e in events)
    assert any(e.ledger_only for e in events)
    if policy == "masking":
        assert any(e.masked and not e.ledger_only for e in events), "masking alone, at first"
    else:
        assert all(e.masked == 0 for e in events)


def check_fresh_process(
    store: Path, raw: list[Message], result: PrepareResult, policy: Policy
) -> None:
    """A new process over the same store rewrites ``raw`` to the same messages."""
    fresh = ContextManager(
        context_window=12_000, reserve_output_tokens=0, store=store, policy=policy
    )
    try:
        again = fresh.unchanged(raw, model=MODEL)
    finally:
        fresh.close()
    assert again is not None and again.messages == result.messages


@pytest.mark.parametrize("policy", ["masking", "ledger-only"])
def test_an_explicit_prepare_ratio_drafts_ahead_and_the_draft_is_adopted_correctly(
    tmp_path: Path, policy: Policy
) -> None:
    """Drafting ahead of time makes little sense for a compaction that is instant, but asked
    for, it works: the draft is made with no model call and the request over the trigger
    adopts it, a valid conversation of its own turns under the window."""
    summaries = Summaries()
    outcomes: list[str] = []
    context = manager(
        summaries,
        policy,
        context_window=12_000,
        prepare_ratio=0.6,
        on_ahead=outcomes.append,
        store=tmp_path / "a.db",
    )
    raw: list[Message] = conversation(0, words=0, end="none")
    adopted: list[PrepareResult] = []
    for turn in range(40):
        raw.extend(tool_turn(turn, words=300, text="Reading the next module."))
        result = context.prepare(raw, model=MODEL)
        check_request(raw, result.messages)
        assert result.report.estimated_tokens <= result.report.trigger_tokens
        if result.event is not None and result.event.ahead_of_time:
            adopted.append(result)
        deadline = time.monotonic() + 10
        while not all(job.done() for job in context.drafts.jobs.all()):
            assert time.monotonic() < deadline, "a draft never finished"
            time.sleep(0.01)
    context.close()
    assert summaries.bodies == []
    assert "started" in outcomes and adopted, outcomes
    assert all(r.event is not None and r.event.policy == policy for r in adopted)
