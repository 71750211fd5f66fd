"""When the next draft starts (issue 26, item 5): at once when a compaction leaves the
conversation over the prepare threshold (not a turn later); again once the conversation grew,
when a draft found nothing to compact yet; never again before the trigger when its summary
failed (a failing upstream is not asked each turn). And a draft aims as much lower than the
target as the session's conversation last grew before adopting one."""

from __future__ import annotations

from typing import Any

from context_summarizer import ContextManager
from context_summarizer.core.effects import Turn
from context_summarizer.core.results import SummaryOutcome
from context_summarizer.library.drive import drive_sync
from context_summarizer.library.effects import Performer

from .conftest import tool_turn
from .test_ahead import grown, summary_text, wait_for
from .test_proxy import MODEL
from .test_wrong_context import check_belongs_and_in_order


def manager(outcomes: list[str], calls: list[Any], **fields: Any) -> ContextManager:
    def summarize(call: Any) -> Any:
        calls.append(call)
        return summary_text(call)

    fields.setdefault("context_window", 16_000)
    return ContextManager(
        summarizer=fields.pop("summarizer", summarize),
        on_ahead=outcomes.append,
        store=":memory:",
        **fields,
    )


def settled(context: ContextManager) -> None:
    wait_for(lambda: all(job.done() for job in context.drafts.jobs.all()))


def test_the_next_draft_starts_with_a_compaction_that_leaves_the_request_over_the_threshold() -> (
    None
):
    outcomes: list[str] = []
    calls: list[Any] = []
    context = manager(outcomes, calls, prepare_ratio=0.45)
    context.prepare(grown(5), model=MODEL)
    settled(context)
    # Over the window: it waits for its draft and adopts it, four turns verbatim after the
    # summary, still over 0.45 of the window: the next draft starts with it, not a turn later.
    conversation = grown(9)
    result = context.prepare(conversation, model=MODEL)
    assert result.compacted and result.report.estimated_tokens > 0.45 * 12_000
    assert outcomes == ["started", "adopted", "started"]
    (job,) = context.drafts.jobs.all()
    assert job.parent_id == result.checkpoint_id and job.basis_count == len(conversation)
    check_belongs_and_in_order(conversation, result.messages)
    settled(context)
    # The next turn continues the drafted conversation on the same checkpoint: no new draft.
    context.prepare(grown(10), model=MODEL)
    assert outcomes.count("started") == 2 and len(calls) == 2
    context.close()


def test_a_draft_that_found_nothing_to_compact_is_drafted_again_once_the_conversation_grew() -> (
    None
):
    outcomes: list[str] = []
    calls: list[Any] = []
    context = manager(outcomes, calls, context_window=4_000, prepare_ratio=0.45)
    start = [
        {"role": "system", "content": "You are careful. " + "rule " * 1_500},
        {"role": "user", "content": "Fix it."},
        *tool_turn("c1", "read_file", "{}", "x " * 200),
    ]
    assert not context.prepare(start, model=MODEL).compacted
    settled(context)
    assert outcomes == ["started"] and calls == []  # nothing old enough to summarize yet
    context.prepare(start, model=MODEL)  # the same conversation: nothing new to look at
    assert outcomes == ["started"]
    grown_on = [
        *start,
        *tool_turn("c2", "read_file", "{}", "y " * 150),
        *tool_turn("c3", "read_file", "{}", "z " * 100),
    ]
    assert not context.prepare(grown_on, model=MODEL).compacted
    assert outcomes == ["started", "failed", "started"]
    context.close()


def test_a_draft_whose_summary_failed_is_not_retried_before_the_trigger() -> None:
    outcomes: list[str] = []
    calls: list[Any] = []

    def failing(call: Any) -> SummaryOutcome:
        calls.append(call)
        return SummaryOutcome(error="upstream returned HTTP 503")

    context = manager(outcomes, calls, prepare_ratio=0.45, summarizer=failing)
    context.prepare(grown(4), model=MODEL)
    settled(context)
    assert outcomes == ["started"] and calls
    asked = len(calls)
    context.prepare(grown(5), model=MODEL)  # grown, still under the trigger
    assert outcomes == ["started"] and len(calls) == asked
    context.close()


def test_a_draft_aims_lower_by_the_growth_expected_before_its_adoption() -> None:
    context = ContextManager(summarizer=summary_text, context_window=32_000, store=":memory:")
    turn = Turn(messages=grown(10), model=MODEL, tools=None, session=None, request={})
    located = context.locate(turn)
    perform = Performer(context.store, summary_text)
    usual = drive_sync(context.engine.ahead(located), perform)
    lower = drive_sync(context.engine.ahead(located, growth=4_000), perform)
    assert usual is not None and lower is not None
    assert lower.raw_tokens < usual.raw_tokens <= located.budget.target_tokens
    context.close()
