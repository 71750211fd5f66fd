"""The planner on hand-made and random conversations, counting words for readability."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context_summarizer.core.config import PinRule
from context_summarizer.core.errors import BudgetExceeded
from context_summarizer.core.messages import group_units, leading_instructions, message_text
from context_summarizer.core.planner import (
    ViewItem,
    cut_outputs,
    plan_compaction,
    summary_request_end,
)
from context_summarizer.loaders.prompts import load_prompt

from .conftest import tool_turn

MARKER = load_prompt("truncated_output")


def words(message: Mapping[str, Any]) -> int:
    return len(message_text(message).split()) + 3


def view_of(messages: list[dict[str, Any]]) -> list[ViewItem]:
    return [ViewItem(m, i, words(m)) for i, m in enumerate(messages)]


def text(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


def plan(messages: list[dict[str, Any]], **kw: Any) -> Any:
    args: dict[str, Any] = dict(
        fixed_tokens=3,
        summary_tokens=50,
        min_summary_tokens=20,
        limit_tokens=1_000,
        trigger_tokens=400,
        target_tokens=200,
        keep_recent_tokens=60,
        count=words,
        truncation_marker=MARKER,
    )
    args.update(kw)
    view = kw.pop("view", None) or view_of(messages)
    args.pop("view", None)
    return plan_compaction(view, **args)


def parts(result: Any, n: int) -> tuple[list[int], list[int], list[int]]:
    """(kept before the tail, replaced by summaries, tail) view indices of a plan."""
    span = result.span
    tail = list(range(result.tail_start, n))
    kept = [i for i in range(result.tail_start) if i not in span]
    return kept, span, tail


def long_session(turns: int = 12, size: int = 40) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be careful"},
        {"role": "user", "content": "the task"},
    ]
    for t in range(turns):
        messages += tool_turn(f"c{t}", "read", "{}", text(size, f"t{t}_"))
    return messages


def test_keeps_system_task_and_recent_tail_and_summarizes_the_middle() -> None:
    messages = long_session()
    result = plan(messages)
    kept, span, tail = parts(result, len(messages))
    assert kept == [0, 1]
    # The tail is whole units from the end, within keep_recent (each unit is ~50 words).
    assert tail == [len(messages) - 2, len(messages) - 1]
    assert span == list(range(2, len(messages) - 2))
    assert [list(run) for run in result.runs] == [span]
    assert result.estimated_tokens <= 200


def test_without_keep_recent_the_tail_fills_what_the_target_leaves() -> None:
    messages = long_session(turns=12, size=40)  # units of 4 + 43 = 47 words
    result = plan(messages, keep_recent_tokens=None, target_tokens=300)
    # 300 - 3 fixed - (5 + 5) kept - 50 summary leaves 237: five whole 47-word units.
    assert len(parts(result, len(messages))[2]) == 10
    assert result.estimated_tokens <= 300


def test_kept_messages_stay_in_place_and_split_the_history_into_runs() -> None:
    messages = long_session(turns=4)
    messages.insert(6, {"role": "user", "content": "PLAN: step one, step two"})
    messages.insert(4, {"role": "user", "content": "older user note"})
    messages += tool_turn("z", "read", "{}", text(40))
    messages += [{"role": "developer", "content": "mid-conversation rule: be brief"}]
    messages += tool_turn("x", "read", "{}", text(40))
    messages += [{"role": "user", "content": "latest instruction"}]
    messages += tool_turn("y", "read", "{}", text(30))
    messages += tool_turn("w", "read", "{}", text(30))
    result = plan(messages, pins=[PinRule(pattern=r"^PLAN:")], keep_recent_tokens=10)
    kept, span, _ = parts(result, len(messages))
    contents = [messages[i]["content"] for i in kept]
    for must in (
        "PLAN: step one, step two",
        "latest instruction",
        "mid-conversation rule: be brief",
    ):
        assert must in contents
    assert any(messages[i]["content"] == "older user note" for i in span)
    # Every run is contiguous and holds nothing that is kept: a summary stands exactly where
    # the turns it replaces were, so everything keeps its raw order.
    protected = {i for i in kept}
    for run in result.runs:
        assert not protected & set(run)
        assert list(run) == list(range(run.start, run.stop))
    assert len(result.runs) >= 2


def test_pin_by_tool_keeps_the_whole_unit_and_only_the_newest_matches() -> None:
    messages = long_session(turns=8)
    messages[6:8] = tool_turn("p", "read_plan", "{}", "the old plan")
    messages[12:14] = tool_turn("q", "read_plan", "{}", "the new plan")
    result = plan(messages, pins=[PinRule(tool="read_plan")])
    kept, span, _ = parts(result, len(messages))
    assert 12 in kept and 13 in kept
    assert 6 in span and 7 in span  # the older match is summarized like any other turn
    both = plan(messages, pins=[PinRule(tool="read_plan", keep=2)])
    assert {6, 7, 12, 13} <= set(parts(both, len(messages))[0])


def test_a_pinned_tool_called_every_turn_never_fills_the_window() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for t in range(40):
        messages += tool_turn(f"p{t}", "read_plan", "{}", text(60, f"plan{t}_"))
    result = plan(messages, pins=[PinRule(tool="read_plan")], limit_tokens=500)
    assert result.estimated_tokens <= 400


def test_an_earlier_summary_is_folded_into_the_run_and_the_tail_never_reaches_over_it() -> None:
    messages = long_session(turns=8)
    summary = {"role": "user", "content": "[Context summary] " + text(30, "s")}
    view = [ViewItem(messages[0], 0, 5), ViewItem(messages[1], 1, 5)]
    view.append(ViewItem(summary, None, words(summary), replaces=(2, 10)))
    view += [ViewItem(m, i, words(m)) for i, m in enumerate(messages) if i >= 10]
    result = plan(messages, view=view, keep_recent_tokens=10_000, target_tokens=150)
    assert result.runs and result.runs[0].start == 2  # the earlier summary is replaced
    assert result.tail_start > 2


def test_an_explicit_tail_over_the_target_is_summarized_before_anything_is_cut() -> None:
    """``keep_recent_tokens`` bounds the tail; the target still wins over it."""
    messages = long_session(turns=3, size=150)
    result = plan(messages, keep_recent_tokens=10_000, trigger_tokens=300, target_tokens=100)
    assert result.runs and result.degraded == []
    assert result.estimated_tokens <= 300
    assert result.tail_start == len(messages) - 2  # only the final unit stays verbatim


def test_cuts_the_largest_outputs_of_a_final_turn_that_does_not_fit() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "cat", "arguments": "{}"}}
                for i in ("a", "b", "c")
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": text(900, "a")},
        {"role": "tool", "tool_call_id": "b", "content": text(700, "b")},
        {"role": "tool", "tool_call_id": "c", "content": text(30, "c")},
    ]
    result = plan(messages, trigger_tokens=500, target_tokens=200, limit_tokens=600)
    # The final turn is cut by the caller, once the summaries are written (there are none here,
    # so the estimate is exact): the plan names its outputs and the size cutting them reaches.
    assert result.overrides == {} and result.final_cuts == [3, 4, 5]
    assert result.estimated_tokens <= 600
    view = view_of(messages)
    size = 3 + sum(item.tokens for item in view)
    cuts, reached = cut_outputs(
        view, result.final_cuts, size=size, goal=600, count=words, marker=MARKER
    )
    assert set(cuts) == {3, 4} and reached == result.estimated_tokens  # never the small one


def test_cuts_a_single_oversized_output_to_head_and_tail() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        *tool_turn("big", "cat", "{}", text(2_000)),
    ]
    # The final turn's output is cut only as far as the window needs (1,000), not the trigger.
    result = plan(messages, trigger_tokens=500, target_tokens=200)
    assert result.final_cuts == [3] and 500 < result.estimated_tokens <= 1_000
    view = view_of(messages)
    size = 3 + sum(item.tokens for item in view)
    cuts, _ = cut_outputs(view, [3], size=size, goal=1_000, count=words, marker=MARKER)
    cut = cuts[3]["content"]
    assert cut.startswith("w0 w1") and cut.rstrip().endswith("w1999")
    assert "elided by summarizer" in cut
    # An earlier kept output (here pinned) is cut toward the trigger, the final turn left alone.
    pinned = [
        *messages[:2],
        *tool_turn("p", "cat", "{}", text(900, "p")),
        *tool_turn("q", "ls", "{}", "x"),
    ]
    result = plan(pinned, trigger_tokens=500, target_tokens=200, pins=[PinRule(tool="cat")])
    assert set(result.overrides) == {3} and result.estimated_tokens <= 500


def test_the_target_is_a_goal_and_the_window_the_limit() -> None:
    """Must-keep parts over the target (and the summary allowance) are sent when they fit the
    window: the allowance shrinks first, then the tail; nothing is refused."""
    messages = [
        {"role": "system", "content": text(60, "s")},
        {"role": "user", "content": text(100, "task")},
        *[m for t in range(6) for m in tool_turn(f"c{t}", "read", "{}", text(40, f"o{t}_"))],
        {"role": "user", "content": text(250, "latest")},
        {"role": "assistant", "content": "ok"},
    ]
    result = plan(
        messages,
        summary_tokens=300,
        min_summary_tokens=40,
        target_tokens=200,
        trigger_tokens=480,
        limit_tokens=600,
        keep_recent_tokens=None,
    )
    assert result.summary_tokens < 300  # the allowance shrank
    assert result.runs and result.estimated_tokens <= 480
    kept, _, tail = parts(result, len(messages))
    assert {0, 1, len(messages) - 2, len(messages) - 1} <= set(kept) | set(tail)


def test_the_allowance_shrinks_before_the_tail_does() -> None:
    messages = long_session(turns=12, size=40)
    roomy = plan(messages, keep_recent_tokens=60, summary_tokens=50)
    tight = plan(messages, keep_recent_tokens=60, summary_tokens=150, min_summary_tokens=20)
    assert tight.tail_start == roomy.tail_start
    assert tight.summary_tokens < 150 and tight.estimated_tokens <= 200


def test_budget_exceeded_only_over_the_window_and_names_what_does_not_fit() -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": text(600)},
    ]
    fits = plan(messages, trigger_tokens=300, target_tokens=100, limit_tokens=700)
    assert fits.estimated_tokens <= 700
    with pytest.raises(BudgetExceeded) as info:
        plan(messages, trigger_tokens=300, target_tokens=100, limit_tokens=500)
    assert info.value.required_tokens > 500 and info.value.budget_tokens == 500
    assert info.value.parts["latest user message"] == 603
    assert "latest user message 603" in str(info.value)


# -- properties over random conversations ------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": text(draw(st.integers(1, 40)), "s")})
    messages.append({"role": "user", "content": text(draw(st.integers(1, 40)), "task")})
    n = draw(st.integers(0, 25))
    for k in range(n):
        kind = draw(st.sampled_from(["user", "assistant", "tools", "system"]))
        if kind == "system":
            messages.append({"role": "system", "content": text(draw(st.integers(1, 20)), "r")})
        elif kind == "user":
            messages.append({"role": "user", "content": text(draw(st.integers(1, 60)), f"u{k}_")})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": text(draw(st.integers(1, 60)))})
        else:
            ids = [f"k{k}_{j}" for j in range(draw(st.integers(1, 3)))]
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}}
                        for i in ids
                    ],
                }
            )
            order = draw(st.permutations(ids))
            for i in order:
                size = draw(st.integers(1, 300))
                messages.append({"role": "tool", "tool_call_id": i, "content": text(size, "o")})
    return messages


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations(),
    st.integers(100, 2_000),
    st.floats(0.2, 0.9),
    st.one_of(st.none(), st.integers(0, 400)),
)
def test_plans_never_split_units_and_keep_what_must_be_kept(
    messages: list[dict[str, Any]], trigger: int, target_share: float, keep_recent: int | None
) -> None:
    limit = int(trigger * 1.25)
    try:
        result = plan(
            messages,
            limit_tokens=limit,
            trigger_tokens=trigger,
            target_tokens=int(trigger * target_share),
            keep_recent_tokens=keep_recent,
        )
    except BudgetExceeded as exc:
        assert exc.required_tokens > limit
        return
    n = len(messages)
    kept, span, tail = parts(result, n)
    assert sorted(kept + span + tail) == list(range(n))
    assert tail == list(range(result.tail_start, n)) and tail
    for unit in group_units(messages):
        homes = {
            name
            for name, part in (("k", kept), ("s", span), ("t", tail))
            for i in unit.indices
            if i in part
        }
        assert len(homes) == 1, f"unit {unit} split across {homes}"
    # Runs are contiguous, in order, and none holds a kept message.
    previous = 0
    for run in result.runs:
        assert run.start >= previous and run.stop > run.start
        assert not set(run) & set(kept)
        previous = run.stop
    keep = set(kept) | set(tail)
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    assert users[0] in keep and users[-1] in keep
    # Every system message is kept, a mid-conversation one at least in its newest copy.
    systems = [i for i, m in enumerate(messages) if m["role"] == "system"]
    newest = {messages[i]["content"]: i for i in systems}
    leading = leading_instructions(messages)
    assert all(i in keep for i in systems if i < leading or newest[messages[i]["content"]] == i)
    assert n - 1 in tail
    assert result.estimated_tokens <= limit
    # Overrides only replace tool outputs, keeping their ids.
    for i, replaced in result.overrides.items():
        assert messages[i]["role"] == "tool"
        assert replaced["tool_call_id"] == messages[i]["tool_call_id"]


def test_summary_request_carries_the_view_up_to_the_end_of_the_run() -> None:
    messages = long_session()
    result = plan(messages)
    view = view_of(messages)
    run = result.runs[0]
    assert summary_request_end(view, run, fixed_tokens=3, room_tokens=10_000) == run.stop


def test_summary_request_of_a_run_over_the_room_is_the_longest_prefix_that_fits() -> None:
    messages = long_session()
    result = plan(messages)
    view = view_of(messages)
    run = result.runs[0]
    room = 200  # far less than the run
    end = summary_request_end(view, run, fixed_tokens=3, room_tokens=room)
    assert 0 < end < run.stop
    assert end in {u.end for u in group_units(messages)}, "never splits a tool exchange"
    assert 3 + sum(item.tokens for item in view[:end]) <= room
    next_unit = next(u for u in group_units(messages) if u.start == end)
    assert 3 + sum(item.tokens for item in view[: next_unit.end]) > room


def test_summary_request_with_unknown_room_covers_exactly_the_run() -> None:
    messages = long_session()
    result = plan(messages)
    view = view_of(messages)
    run = result.runs[0]
    assert summary_request_end(view, run, fixed_tokens=3, room_tokens=0) == run.stop


def test_summaries_go_below_their_floor_only_when_nothing_else_fits_the_window() -> None:
    """Three runs, split by a kept follow-up and a mid-conversation rule: at the floor their
    summaries do not fit the window; below it (the last resort) they do."""
    messages = long_session(turns=3, size=60)
    messages.append({"role": "system", "content": "rule"})
    messages += tool_turn("d", "read", "{}", text(60, "d"))
    messages.append({"role": "user", "content": "follow-up"})
    messages += tool_turn("e", "read", "{}", text(60, "e"))
    messages += tool_turn("f", "read", "{}", text(20, "f"))
    args: dict[str, Any] = dict(
        summary_tokens=200,
        min_summary_tokens=60,
        trigger_tokens=150,
        target_tokens=100,
        limit_tokens=190,
        keep_recent_tokens=None,
    )
    with pytest.raises(BudgetExceeded):
        plan(messages, **args)
    result = plan(messages, **args, last_resort_summary_tokens=20)
    assert result.summary_tokens < 60 and result.estimated_tokens <= 190
    assert plan(messages, **{**args, "limit_tokens": 400}).summary_tokens >= 60


def test_earlier_summaries_kept_apart_are_summarized_again_once_they_outgrow_the_allowance() -> (
    None
):
    """Summaries isolated between kept messages (here mid-conversation rules) never fold into a
    newer one; when the allowance has shrunk below them, they are summarized again."""
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        {"role": "system", "content": "rule one"},
        {"role": "system", "content": "rule two"},
        {"role": "user", "content": text(30, "latest")},
        {"role": "assistant", "content": "ok"},
    ]
    old = {"role": "user", "content": "[Context summary] " + text(120, "old")}
    view = [
        ViewItem(messages[0], 0, 4),
        ViewItem(messages[1], 1, 4),
        ViewItem(old, None, words(old), replaces=(2, 9)),
        ViewItem(messages[2], 9, 5),
        ViewItem(old, None, words(old), replaces=(10, 14)),
        ViewItem(messages[3], 14, 5),
        ViewItem(messages[4], 15, words(messages[4])),
        ViewItem(messages[5], 16, 4),
    ]
    roomy = plan(messages, view=view, summary_tokens=200, trigger_tokens=400, target_tokens=350)
    assert roomy.runs == []  # each is within the allowance: kept as it is
    tight = plan(messages, view=view, summary_tokens=200, min_summary_tokens=60, target_tokens=200)
    assert tight.runs == [range(2, 3), range(4, 5)] and tight.summary_tokens < 124


def test_a_recurring_reminder_is_kept_in_its_newest_copy_and_the_history_forms_one_run() -> None:
    """Claude Code appends the same ``system`` reminder after each of its turns. Keeping every
    copy would cut the history into a run per copy; the newest copy says it all."""
    reminder = {"role": "system", "content": "The user hasn't heard from you in a while."}
    rule = {"role": "system", "content": "Use tabs from now on."}
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be careful"},
        {"role": "user", "content": "the task"},
        rule,
    ]
    for t in range(8):
        messages += tool_turn(f"c{t}", "read", "{}", text(40, f"t{t}_"))
        messages.append(dict(reminder))
    messages.append({"role": "user", "content": "go on"})
    result = plan(messages)
    kept, span, tail = parts(result, len(messages))
    copies = [i for i, m in enumerate(messages) if m == reminder]
    assert copies[-1] in kept + tail
    assert set(copies[:-1]) <= set(span)
    assert 0 in kept and 2 in kept  # the system prompt, and an instruction said once
    assert len(result.runs) == 1
