"""The planner on hand-made and random conversations, counting words for readability."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from summarizer.config import PinRule
from summarizer.errors import BudgetExceeded
from summarizer.messages import group_units, message_text
from summarizer.planner import ViewItem, plan_compaction, summary_request_end

from .conftest import tool_turn


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
        trigger_tokens=400,
        target_tokens=200,
        keep_recent_tokens=60,
        count=words,
    )
    args.update(kw)
    return plan_compaction(view_of(messages), **args)


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
    assert result.kept_before == [0, 1]
    # The tail is whole units from the end, within keep_recent (each unit is ~50 words).
    assert result.tail == [len(messages) - 2, len(messages) - 1]
    assert result.span == list(range(2, len(messages) - 2))
    assert result.estimated_tokens <= 200


def test_without_keep_recent_the_tail_fills_what_the_target_leaves() -> None:
    messages = long_session(turns=12, size=40)  # units of 4 + 43 = 47 words
    result = plan(messages, keep_recent_tokens=None, target_tokens=300)
    # 300 - 3 fixed - (5 + 5) kept - 50 summary leaves 237: five whole 47-word units.
    assert len(result.tail) == 10
    assert result.estimated_tokens <= 300


def test_latest_user_message_and_pins_are_kept_verbatim() -> None:
    messages = long_session(turns=4)
    messages.insert(6, {"role": "user", "content": "PLAN: step one, step two"})
    messages += tool_turn("z", "read", "{}", text(40))
    messages.insert(4, {"role": "user", "content": "older user note"})
    messages += [{"role": "user", "content": "latest instruction"}]
    messages += tool_turn("y", "read", "{}", text(30))
    result = plan(messages, pins=[PinRule(pattern=r"^PLAN:")], keep_recent_tokens=10)
    kept = [messages[i]["content"] for i in result.kept_before]
    assert "PLAN: step one, step two" in kept
    assert "latest instruction" in kept
    assert "older user note" not in kept
    assert any(messages[i]["content"] == "older user note" for i in result.span)


def test_pin_by_tool_keeps_the_whole_unit() -> None:
    messages = long_session(turns=6)
    messages[6:8] = tool_turn("p", "read_plan", "{}", "the plan")
    result = plan(messages, pins=[PinRule(tool="read_plan")])
    assert 6 in result.kept_before and 7 in result.kept_before


def test_elides_old_tool_outputs_in_the_tail_before_failing() -> None:
    messages = long_session(turns=3, size=150)
    result = plan(messages, keep_recent_tokens=10_000, trigger_tokens=300, target_tokens=100)
    assert result.span == []  # everything is in the explicitly kept tail
    assert result.degraded[0] == "elide_tool_outputs"
    assert result.estimated_tokens <= 300
    # The final unit's output is never elided.
    assert len(messages) - 1 not in result.overrides
    elided = next(iter(result.overrides.values()))
    assert "elided" in elided["content"] and elided["tool_call_id"]


def test_cuts_a_single_oversized_output_to_head_and_tail() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "task"},
        *tool_turn("big", "cat", "{}", text(2_000)),
    ]
    result = plan(messages, trigger_tokens=500, target_tokens=200)
    assert result.degraded == ["truncate_tool_output"]
    cut = result.overrides[3]["content"]
    assert cut.startswith("w0 w1") and cut.rstrip().endswith("w1999")
    assert "elided by summarizer" in cut
    assert result.estimated_tokens <= 500


def test_budget_exceeded_when_must_keep_parts_do_not_fit() -> None:
    messages = [
        {"role": "system", "content": text(600)},
        {"role": "user", "content": "task"},
        {"role": "assistant", "content": "ok"},
    ]
    with pytest.raises(BudgetExceeded) as info:
        plan(messages, trigger_tokens=300)
    assert info.value.required_tokens > 300 and info.value.budget_tokens == 300


# -- properties over random conversations ------------------------------------------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": text(draw(st.integers(1, 40)), "s")})
    messages.append({"role": "user", "content": text(draw(st.integers(1, 40)), "task")})
    n = draw(st.integers(0, 25))
    for k in range(n):
        kind = draw(st.sampled_from(["user", "assistant", "tools"]))
        if kind == "user":
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
    try:
        result = plan(
            messages,
            trigger_tokens=trigger,
            target_tokens=int(trigger * target_share),
            keep_recent_tokens=keep_recent,
        )
    except BudgetExceeded as exc:
        assert exc.required_tokens > trigger
        return
    everything = result.kept_before + result.span + result.tail
    assert sorted(everything) == list(range(len(messages)))
    assert result.kept_before == sorted(result.kept_before)
    assert result.tail == list(range(result.tail[0], len(messages)))
    for unit in group_units(messages):
        homes = {
            name
            for name, part in (("k", result.kept_before), ("s", result.span), ("t", result.tail))
            for i in unit.indices
            if i in part
        }
        assert len(homes) == 1, f"unit {unit} split across {homes}"
    kept = set(result.kept_before) | set(result.tail)
    users = [i for i, m in enumerate(messages) if m["role"] == "user"]
    assert users[0] in kept and users[-1] in kept
    if messages[0]["role"] == "system":
        assert 0 in kept
    assert len(messages) - 1 in result.tail
    assert result.estimated_tokens <= trigger
    # Overrides only replace tool outputs, keeping their ids.
    for i, replaced in result.overrides.items():
        assert messages[i]["role"] == "tool"
        assert replaced["tool_call_id"] == messages[i]["tool_call_id"]


def test_summary_request_carries_the_whole_view_when_it_fits() -> None:
    messages = long_session()
    result = plan(messages)
    view = view_of(messages)
    assert summary_request_end(view, result, fixed_tokens=3, room_tokens=10_000) == len(view)


def test_summary_request_covers_the_span_and_what_else_fits() -> None:
    messages = long_session()
    result = plan(messages)
    view = view_of(messages)
    span_end = max(result.span) + 1
    covering = 3 + sum(item.tokens for item in view[:span_end])
    end = summary_request_end(view, result, fixed_tokens=3, room_tokens=covering + 10)
    assert span_end <= end < len(view)
    assert end in {u.end for u in group_units(messages)}


def test_summary_request_of_a_span_over_the_room_is_the_longest_prefix_that_fits() -> None:
    messages = long_session()
    result = plan(messages)
    view = view_of(messages)
    room = 200  # far less than the span
    end = summary_request_end(view, result, fixed_tokens=3, room_tokens=room)
    assert 0 < end <= max(result.span)
    assert end in {u.end for u in group_units(messages)}, "never splits a tool exchange"
    assert 3 + sum(item.tokens for item in view[:end]) <= room
    next_unit = next(u for u in group_units(messages) if u.start == end)
    assert 3 + sum(item.tokens for item in view[: next_unit.end]) > room


def test_summary_request_with_unknown_room_covers_exactly_what_the_span_needs() -> None:
    messages = long_session()
    result = plan(messages)
    view = view_of(messages)
    end = summary_request_end(view, result, fixed_tokens=3, room_tokens=0)
    assert end == max(result.span) + 1
