"""Compaction planning: where to cut, what to keep, and how to degrade. Pure, no I/O.

The planner works on the *view*: the messages as the model would see them now (kept prefix,
previous summary, verbatim tail, then what the agent appended). It never splits a unit (an
assistant message with its tool results) and always keeps, verbatim: the leading system/developer
messages, the first user message (the task), pinned units, the latest user message, the final
unit, and the newest units up to ``keep_recent_tokens``. Everything else before the cut is the
*span* the summary replaces.

When even the kept parts do not fit under the trigger, it degrades in a fixed order: elide old
tool outputs in the kept tail, then cut the single largest tool output to its head and tail, and
only then raise ``BudgetExceeded``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import PinRule
from .errors import BudgetExceeded
from .messages import (
    INSTRUCTION_ROLES,
    Message,
    Unit,
    group_units,
    message_text,
)
from .prompts import render_prompt

CountFn = Callable[[Mapping[str, Any]], int]


@dataclass(frozen=True, slots=True)
class ViewItem:
    """One message of the view; ``raw_index`` is None for a message summarizer inserted."""

    message: Message
    raw_index: int | None
    tokens: int


@dataclass
class Plan:
    """What a compaction keeps, replaces and rewrites (indices into the view)."""

    kept_before: list[int]
    """View indices kept verbatim before the summary, in order."""
    span: list[int]
    """View indices the summary replaces."""
    tail: list[int]
    """View indices kept after the summary (the verbatim tail), in order."""
    overrides: dict[int, Message] = field(default_factory=dict)
    """View index -> replacement message (elided or truncated tool outputs)."""
    estimated_tokens: int = 0
    """Estimated request size after the compaction, with the summary at its cap."""
    degraded: list[str] = field(default_factory=list)
    """Degradation steps applied, in order."""

    @property
    def needs_summary(self) -> bool:
        """Whether there is anything for the model to summarize."""
        return bool(self.span)


def _pinned_units(
    view: Sequence[ViewItem], units: Sequence[Unit], pins: Sequence[PinRule]
) -> set[int]:
    if not pins:
        return set()
    call_names: dict[str, str] = {}
    for item in view:
        for call in item.message.get("tool_calls") or ():
            if isinstance(call, Mapping) and isinstance(call.get("id"), str):
                function = call.get("function")
                if isinstance(function, Mapping) and isinstance(function.get("name"), str):
                    call_names[call["id"]] = function["name"]
    pinned: set[int] = set()
    for u, unit in enumerate(units):
        for i in unit.indices:
            message = view[i].message
            if view[i].raw_index is None:
                continue
            answered = call_names.get(message.get("tool_call_id", ""))
            text = message_text(message)
            if any(rule.matches(message, text, answered) for rule in pins):
                pinned.add(u)
                break
    return pinned


def plan_compaction(
    view: Sequence[ViewItem],
    *,
    fixed_tokens: int,
    summary_tokens: int,
    trigger_tokens: int,
    target_tokens: int,
    keep_recent_tokens: int | None,
    pins: Sequence[PinRule] = (),
    count: CountFn,
    prompt_version: str = "v1",
) -> Plan:
    """Plan a compaction of ``view`` that lands under ``trigger_tokens``, or raise
    ``BudgetExceeded``.

    The verbatim tail holds the newest units up to ``keep_recent_tokens``; when that is None, it
    holds as many as fit beside the kept parts and the summary under ``target_tokens``.

    ``fixed_tokens`` is what the request costs besides its messages (tools, reply priming);
    ``summary_tokens`` the most the summary message can take (its cap, framing and ledger).
    """
    units = group_units([item.message for item in view])
    protected: set[int] = set()
    raw_user_units = [
        u
        for u, unit in enumerate(units)
        if unit.kind == "user" and view[unit.start].raw_index is not None
    ]
    for u, unit in enumerate(units):
        if unit.kind != "instruction" or view[unit.start].raw_index is None:
            break
        if view[unit.start].message.get("role") in INSTRUCTION_ROLES:
            protected.add(u)
    if raw_user_units:
        protected.add(raw_user_units[0])
        protected.add(raw_user_units[-1])
    protected |= _pinned_units(view, units, pins)

    def unit_tokens(u: int) -> int:
        return sum(view[i].tokens for i in units[u].indices)

    # A summary inserted by an earlier compaction is always replaced, never kept in the tail.
    floor = 0
    for u, unit in enumerate(units):
        if view[unit.start].raw_index is None:
            floor = u + 1
    if 0 in protected and len(units) > 1:
        floor = max(floor, 1)  # a checkpoint always covers at least the first message
    last = len(units) - 1
    # The verbatim tail: the final unit always, then newer-to-older units within the tail budget:
    # ``keep_recent_tokens`` when set, else whatever the target leaves beside the kept parts.
    if keep_recent_tokens is None:
        must_keep = sum(unit_tokens(u) for u in protected if u != last)
        tail_budget = max(0, target_tokens - fixed_tokens - must_keep - summary_tokens)
    else:
        tail_budget = keep_recent_tokens
    cut = max(last, floor)
    tail_tokens = unit_tokens(last) if cut <= last else 0
    while cut > floor:
        candidate = cut - 1
        cost = (
            0 if (keep_recent_tokens is None and candidate in protected) else unit_tokens(candidate)
        )
        if tail_tokens + cost > tail_budget:
            break
        tail_tokens += cost
        cut = candidate

    before_units = [u for u in range(cut) if u in protected]
    span_units = [u for u in range(cut) if u not in protected]
    kept = [i for u in before_units for i in units[u].indices]
    span = [i for u in span_units for i in units[u].indices]
    tail = [i for u in range(cut, len(units)) for i in units[u].indices]
    size = (
        fixed_tokens
        + sum(view[i].tokens for i in kept)
        + sum(view[i].tokens for i in tail)
        + (summary_tokens if span else 0)
    )
    # The kept parts may exceed the target (a large explicit keep_recent_tokens, big pins): that
    # is allowed; exceeding the trigger is not.
    plan = Plan(kept_before=kept, span=span, tail=tail, estimated_tokens=size)
    if size <= trigger_tokens:
        return plan
    _degrade(plan, view, trigger_tokens=trigger_tokens, count=count, version=prompt_version)
    return plan


def _tool_outputs(view: Sequence[ViewItem], indices: Sequence[int]) -> list[int]:
    return [i for i in indices if view[i].message.get("role") in ("tool", "function")]


def elide_message(message: Message, *, original_tokens: int, version: str = "v1") -> Message:
    """A copy of a tool message whose content is replaced by a placeholder saying what went."""
    replaced = dict(message)
    replaced["content"] = render_prompt(
        "elided_output",
        version,
        original_tokens=original_tokens,
    )
    return replaced


def truncate_message(
    message: Message, *, keep_tokens: int, original_tokens: int, version: str = "v1"
) -> Message:
    """A copy of a tool message cut to its head and tail, about ``keep_tokens`` tokens in all."""
    text = message_text(message)
    # Characters per token measured on this very text keeps the cut close to the budget.
    chars_per_token = max(1.0, len(text) / max(1, original_tokens))
    keep_chars = max(0, int(keep_tokens * chars_per_token))
    head = text[: keep_chars // 2]
    tail = text[len(text) - keep_chars // 2 :] if keep_chars // 2 else ""
    marker = render_prompt(
        "truncated_output",
        version,
        elided_tokens=max(0, original_tokens - keep_tokens),
    )
    replaced = dict(message)
    replaced["content"] = head + marker + tail
    return replaced


def _degrade(
    plan: Plan,
    view: Sequence[ViewItem],
    *,
    trigger_tokens: int,
    count: CountFn,
    version: str,
) -> None:
    """Bring ``plan`` under ``trigger_tokens`` by elision, then truncation, else raise."""
    size = plan.estimated_tokens
    outputs = _tool_outputs(view, plan.tail)
    final_unit_outputs = set(_final_unit_outputs(view))
    # 1. Elide old tool outputs in the kept tail (never the final unit's), oldest first.
    for i in outputs:
        if size <= trigger_tokens:
            break
        if i in final_unit_outputs:
            continue
        replaced = elide_message(view[i].message, original_tokens=view[i].tokens, version=version)
        new_tokens = count(replaced)
        if new_tokens >= view[i].tokens:
            continue
        plan.overrides[i] = replaced
        size -= view[i].tokens - new_tokens
        if "elide_tool_outputs" not in plan.degraded:
            plan.degraded.append("elide_tool_outputs")
    # 2. Cut the single largest remaining tool output (kept tail or kept prefix) to head and tail.
    if size > trigger_tokens:
        candidates = [
            i for i in _tool_outputs(view, plan.tail + plan.kept_before) if i not in plan.overrides
        ]
        if candidates:
            largest = max(candidates, key=lambda i: view[i].tokens)
            excess = size - trigger_tokens
            keep = view[largest].tokens - excess - 64  # room for the marker and recount drift
            if keep > 0:
                replaced = truncate_message(
                    view[largest].message,
                    keep_tokens=keep,
                    original_tokens=view[largest].tokens,
                    version=version,
                )
                new_tokens = count(replaced)
                if new_tokens < view[largest].tokens:
                    plan.overrides[largest] = replaced
                    size -= view[largest].tokens - new_tokens
                    plan.degraded.append("truncate_tool_output")
    plan.estimated_tokens = size
    if size > trigger_tokens:
        raise BudgetExceeded(
            required_tokens=size,
            budget_tokens=trigger_tokens,
            detail="the system prompt, task, pinned messages, latest user message and the final "
            "turn do not fit even with old tool outputs elided",
        )


def _final_unit_outputs(view: Sequence[ViewItem]) -> list[int]:
    units = group_units([item.message for item in view])
    if not units:
        return []
    return _tool_outputs(view, list(units[-1].indices))


def summary_request_end(
    view: Sequence[ViewItem], plan: Plan, *, fixed_tokens: int, room_tokens: int
) -> int:
    """How many leading view messages the summary request can carry.

    The whole view when it fits in ``room_tokens``; otherwise the longest unit-aligned prefix
    that still covers the span (a prefix of the last request, so the provider's cache still
    serves it). When even the span does not fit (a conversation that arrived already over the
    window), the longest unit-aligned prefix that fits: the model summarizes what it can see,
    and the rest of the span survives only in the fact ledger. ``room_tokens == 0`` means the
    room is unknown: the prefix that covers the span, nothing more.
    """
    total = fixed_tokens + sum(item.tokens for item in view)
    if total <= room_tokens:
        return len(view)
    units = group_units([item.message for item in view])
    must_cover = (max(plan.span) + 1) if plan.span else 0
    end = fits = 0
    size = fixed_tokens
    for unit in units:
        cost = sum(view[i].tokens for i in unit.indices)
        if unit.start >= must_cover and size + cost > room_tokens:
            break
        size += cost
        end = unit.end
        if size <= room_tokens:
            fits = end
    if room_tokens > 0 and size > room_tokens and fits > 0:
        return fits
    return end
