"""Compaction planning: what to keep, what to summarize, and how to degrade. Pure, no I/O.

The planner works on the *view*: the messages as the model would see them now (raw messages, and
summaries inserted by earlier compactions). It never splits a unit (an assistant message with its
tool results) and always keeps verbatim, in their raw order: every system/developer message
(leading or mid-conversation), the first user message (the task), the latest user message, pinned
units (the newest ``keep`` matches of each rule), the final unit, and the newest units up to the
tail budget (the *verbatim tail*).

Before the tail, the units that are not kept form *runs*: maximal stretches between kept units. A
run is replaced by one summary placed exactly where the run was, so the order of everything is
kept; a summary inserted earlier inside a run is folded into the new one. Most conversations have
one run (after the task); a kept unit in the middle (a follow-up user message, a mid-conversation
system message, a pin) splits the history into two or more, and each run worth summarizing gets its
own summary.

The target is a goal and the usable window is the limit. To reach the target the planner first
shrinks the allowance of each summary (down to a floor), then the verbatim tail (down to the final
unit). Over the trigger it then degrades: it cuts kept tool outputs to their head and tail,
largest first, and the final unit's only when nothing else fits the window. When that still does
not fit, it plans once more with the summaries below their floor (a last resort), and it refuses
(``BudgetExceeded``, naming each part) only when even that does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import PinRule
from .errors import BudgetExceeded
from .messages import INSTRUCTION_ROLES, Message, Unit, group_units, message_text

CountFn = Callable[[Mapping[str, Any]], int]
MIN_KEPT_OUTPUT_TOKENS = 128
"""A tool output cut to fit keeps at least this much of its head and tail."""


@dataclass(frozen=True, slots=True)
class ViewItem:
    """One message of the view: a raw message (``raw_index``) or a summary inserted by an
    earlier compaction (``raw_index`` None, ``replaces`` its raw range)."""

    message: Message
    raw_index: int | None
    tokens: int
    replaces: tuple[int, int] | None = None

    @property
    def raw_range(self) -> tuple[int, int]:
        """The raw messages this item stands for, as ``[start, end)``."""
        if self.raw_index is not None:
            return (self.raw_index, self.raw_index + 1)
        assert self.replaces is not None
        return self.replaces


@dataclass
class Plan:
    """What a compaction summarizes, keeps and rewrites (indices into the view)."""

    runs: list[range]
    """View index ranges, in order, each to be replaced by one new summary."""
    tail_start: int
    """View index where the verbatim tail begins."""
    summary_tokens: int
    """The allowance of each new summary (cap, ledger and framing), after any shrinking."""
    overrides: dict[int, Message] = field(default_factory=dict)
    """View index -> replacement message (tool outputs cut to their head and tail)."""
    estimated_tokens: int = 0
    """Estimated request size after the compaction, with each summary at its allowance."""
    degraded: list[str] = field(default_factory=list)
    """Degradation steps applied, in order."""
    final_cuts: list[int] = field(default_factory=list)
    """The final unit's tool outputs the caller cuts (``cut_outputs``) if, with the summaries
    written, the request is still over the window; ``estimated_tokens`` assumes it does."""

    @property
    def needs_summary(self) -> bool:
        """Whether there is anything for the model to summarize."""
        return bool(self.runs)

    @property
    def span(self) -> list[int]:
        """Every view index a new summary replaces."""
        return [i for run in self.runs for i in run]


@dataclass(frozen=True, slots=True)
class _Run:
    first: int
    """First unit index."""
    stop: int
    """One past the last unit index."""
    tokens: int


class _Layout:
    """The units of a view and what is known about them, computed once per plan."""

    def __init__(self, view: Sequence[ViewItem], pins: Sequence[PinRule]) -> None:
        self.view = view
        self.units = group_units([item.message for item in view])
        self.tokens = [sum(view[i].tokens for i in unit.indices) for unit in self.units]
        self.inserted = [view[unit.start].raw_index is None for unit in self.units]
        self.protected = _protected(view, self.units, self.inserted, pins)
        last_inserted = max((u for u, ins in enumerate(self.inserted) if ins), default=-1)
        self.floor = last_inserted + 1
        """The tail never reaches back over an inserted summary."""

    @property
    def last(self) -> int:
        return len(self.units) - 1

    def runs(self, cut: int) -> list[_Run]:
        """Maximal stretches of units before ``cut`` that are not kept by rule."""
        found: list[_Run] = []
        first: int | None = None
        for u in range(cut + 1):
            if u < cut and u not in self.protected:
                if first is None:
                    first = u
                continue
            if first is not None:
                found.append(_Run(first, u, sum(self.tokens[first:u])))
                first = None
        return found

    def view_range(self, run: _Run) -> range:
        return range(self.units[run.first].start, self.units[run.stop - 1].end)


def _protected(
    view: Sequence[ViewItem],
    units: Sequence[Unit],
    inserted: Sequence[bool],
    pins: Sequence[PinRule],
) -> set[int]:
    """Units kept verbatim by rule (see the module docstring)."""
    protected: set[int] = set()
    users: list[int] = []
    for u, unit in enumerate(units):
        if inserted[u]:
            continue
        role = view[unit.start].message.get("role")
        if role in INSTRUCTION_ROLES:
            protected.add(u)
        elif role == "user":
            users.append(u)
    if users:
        protected.update((users[0], users[-1]))
    protected |= _pinned_units(view, units, inserted, pins)
    if units:
        protected.add(len(units) - 1)
    return protected


def _pinned_units(
    view: Sequence[ViewItem],
    units: Sequence[Unit],
    inserted: Sequence[bool],
    pins: Sequence[PinRule],
) -> set[int]:
    """For each rule, the newest ``rule.keep`` raw units it matches."""
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
    for rule in pins:
        matched = 0
        for u in range(len(units) - 1, -1, -1):
            if matched >= rule.keep:
                break
            if inserted[u]:
                continue
            for i in units[u].indices:
                message = view[i].message
                answered = call_names.get(message.get("tool_call_id", ""))
                if rule.matches(message, message_text(message), answered):
                    pinned.add(u)
                    matched += 1
                    break
    return pinned


def plan_compaction(
    view: Sequence[ViewItem],
    *,
    fixed_tokens: int,
    summary_tokens: int,
    min_summary_tokens: int,
    last_resort_summary_tokens: int | None = None,
    limit_tokens: int,
    trigger_tokens: int,
    target_tokens: int,
    keep_recent_tokens: int | None,
    pins: Sequence[PinRule] = (),
    count: CountFn,
    truncation_marker: str,
) -> Plan:
    """Plan a compaction of ``view`` that lands under ``target_tokens`` if it can, under
    ``trigger_tokens`` if it must degrade, and never over ``limit_tokens`` (else
    ``BudgetExceeded``).

    ``fixed_tokens`` is what the request costs besides its messages (tools, reply priming);
    ``summary_tokens`` the most one new summary message may take (its cap, framing and ledger),
    which shrinks down to ``min_summary_tokens`` when the target needs it, and down to
    ``last_resort_summary_tokens`` only when nothing else would fit the window. The verbatim
    tail holds the newest units up to ``keep_recent_tokens``; when that is None, as many as the
    target leaves.
    """
    layout = _Layout(view, pins)
    if not layout.units:
        return Plan(runs=[], tail_start=0, summary_tokens=summary_tokens)
    goals = (target_tokens, trigger_tokens, limit_tokens)
    cut = _initial_cut(layout, fixed_tokens, summary_tokens, target_tokens, keep_recent_tokens)
    plan = _plan(
        layout,
        cut,
        fixed_tokens,
        summary_tokens,
        min_summary_tokens,
        goals,
        count,
        truncation_marker,
    )
    last_resort = last_resort_summary_tokens or min_summary_tokens
    if plan.estimated_tokens > limit_tokens and last_resort < plan.summary_tokens:
        plan = _plan(
            layout,
            cut,
            fixed_tokens,
            plan.summary_tokens,
            last_resort,
            goals,
            count,
            truncation_marker,
        )
    if plan.estimated_tokens > limit_tokens:
        raise BudgetExceeded(
            required_tokens=plan.estimated_tokens,
            budget_tokens=limit_tokens,
            detail="even with the summaries at their smallest, only the final turn in the tail "
            "and kept tool outputs cut to their head and tail",
            parts=_parts(plan, layout, fixed_tokens, count),
        )
    return plan


def _plan(
    layout: _Layout,
    cut: int,
    fixed: int,
    allowance: int,
    floor: int,
    goals: tuple[int, int, int],
    count: CountFn,
    marker: str,
) -> Plan:
    """The levers in order: the summary allowance (down to ``floor``), then the tail, toward the
    target; then, over the trigger, cutting kept tool outputs (the final turn's only to fit the
    limit)."""
    target, trigger, limit = goals
    while True:
        runs, size = _select(layout, cut, allowance, fixed, target)
        if size <= target:
            break
        if allowance > floor and any(run.tokens > floor for run in layout.runs(cut)):
            needed = -(-(size - target) // max(1, len(runs)))
            allowance = max(floor, allowance - needed)
            continue
        if cut < layout.last:
            cut += 1
            continue
        break
    plan = Plan(
        runs=[layout.view_range(run) for run in runs],
        tail_start=layout.units[cut].start,
        summary_tokens=allowance,
        estimated_tokens=size,
    )
    if size > trigger:
        _degrade(plan, layout, goal=trigger, limit=limit, count=count, marker=marker)
    return plan


def _initial_cut(
    layout: _Layout, fixed: int, allowance: int, target: int, keep_recent: int | None
) -> int:
    """Where the verbatim tail begins: the final unit, then newer-to-older units within the tail
    budget (``keep_recent`` when set, else what the target leaves beside the kept parts and one
    summary; kept units then cost nothing extra, since they stay anyway)."""
    last = layout.last
    if keep_recent is None:
        must_keep = sum(layout.tokens[u] for u in layout.protected if u != last)
        budget = max(0, target - fixed - must_keep - allowance)
    else:
        budget = keep_recent
    cut = max(last, layout.floor)
    used = layout.tokens[last] if cut <= last else 0
    while cut > layout.floor:
        candidate = cut - 1
        free = keep_recent is None and candidate in layout.protected
        cost = 0 if free else layout.tokens[candidate]
        if used + cost > budget:
            break
        used += cost
        cut = candidate
    return cut


def _select(
    layout: _Layout, cut: int, allowance: int, fixed: int, target: int
) -> tuple[list[_Run], int]:
    """The runs to summarize for tail start ``cut`` (fewest, largest first, until the target
    is met; at least one when any is worth it) and the resulting size."""
    size = fixed + sum(layout.tokens)
    # A run of earlier summaries alone is worth it too when they outgrow today's allowance.
    worth = [run for run in layout.runs(cut) if run.tokens > allowance]
    chosen: list[_Run] = []
    for run in sorted(worth, key=lambda r: r.tokens, reverse=True):
        if chosen and size <= target:
            break
        chosen.append(run)
        size -= run.tokens - allowance
    return sorted(chosen, key=lambda r: r.first), size


def _kept_indices(plan: Plan, layout: _Layout) -> list[int]:
    """View indices sent verbatim (or overridden) after this plan: everything outside its runs."""
    replaced = {i for run in plan.runs for i in run}
    return [i for i in range(len(layout.view)) if i not in replaced]


def _tool_outputs(view: Sequence[ViewItem], indices: Sequence[int]) -> list[int]:
    return [i for i in indices if view[i].message.get("role") in ("tool", "function")]


def truncate_message(
    message: Message, *, keep_tokens: int, original_tokens: int, marker: str
) -> Message:
    """A copy of a tool message cut to its head and tail, about ``keep_tokens`` tokens in all."""
    text = message_text(message)
    # Characters per token measured on this very text keeps the cut close to the budget.
    chars_per_token = max(1.0, len(text) / max(1, original_tokens))
    keep_chars = max(0, int(keep_tokens * chars_per_token))
    head = text[: keep_chars // 2]
    tail = text[len(text) - keep_chars // 2 :] if keep_chars // 2 else ""
    note = marker.format(elided_tokens=max(0, original_tokens - keep_tokens))
    replaced = dict(message)
    replaced["content"] = head + note + tail
    return replaced


def _degrade(
    plan: Plan, layout: _Layout, *, goal: int, limit: int, count: CountFn, marker: str
) -> None:
    """Bring ``plan`` toward ``goal`` by cutting kept tool outputs to their head and tail,
    largest first, each at most once. The final unit's outputs are cut only when nothing else
    brings the request inside ``limit``, and then only by the caller, once the summaries are
    written and their real size is known: the plan counts each at its full allowance, and
    names the outputs it may cut (``final_cuts``) with the size it would reach."""
    view = layout.view
    final = set(layout.units[layout.last].indices)
    outputs = _tool_outputs(view, _kept_indices(plan, layout))
    earlier = [i for i in outputs if i not in final]
    cuts, plan.estimated_tokens = cut_outputs(
        view, earlier, size=plan.estimated_tokens, goal=goal, count=count, marker=marker
    )
    plan.overrides.update(cuts)
    if cuts:
        plan.degraded.append("truncate_tool_output")
    if plan.estimated_tokens > limit:
        plan.final_cuts = [i for i in outputs if i in final]
        _, plan.estimated_tokens = cut_outputs(
            view,
            plan.final_cuts,
            size=plan.estimated_tokens,
            goal=limit,
            count=count,
            marker=marker,
        )


def cut_outputs(
    view: Sequence[ViewItem],
    outputs: Sequence[int],
    *,
    size: int,
    goal: int,
    count: CountFn,
    marker: str,
) -> tuple[dict[int, Message], int]:
    """Tool outputs of ``view`` (indices ``outputs``) cut to their head and tail, largest
    first, each at most once, until a request of ``size`` tokens is down to ``goal``: the
    replacements by view index, and the size reached."""
    cuts: dict[int, Message] = {}
    for i in sorted(outputs, key=lambda i: view[i].tokens, reverse=True):
        if size <= goal:
            break
        # Room for the marker and recount drift; never below a useful head and tail.
        keep = max(MIN_KEPT_OUTPUT_TOKENS, view[i].tokens - (size - goal) - 64)
        if keep >= view[i].tokens:
            continue
        replaced = truncate_message(
            view[i].message, keep_tokens=keep, original_tokens=view[i].tokens, marker=marker
        )
        new_tokens = count(replaced)
        if new_tokens < view[i].tokens:
            cuts[i] = replaced
            size -= view[i].tokens - new_tokens
    return cuts, size


def _parts(plan: Plan, layout: _Layout, fixed: int, count: CountFn) -> dict[str, int]:
    """The planned request's size by part, for an error that says what does not fit."""
    view = layout.view
    names: dict[int, str] = {}
    users: list[int] = []
    for u, unit in enumerate(layout.units):
        role = view[unit.start].message.get("role")
        if layout.inserted[u]:
            names[u] = "earlier summaries"
        elif role in INSTRUCTION_ROLES:
            names[u] = "system/developer messages"
        elif role == "user":
            users.append(u)
    if users:
        names[users[0]] = "first user message"
        names[users[-1]] = "latest user message"
    names.setdefault(layout.last, "final turn")
    parts: dict[str, int] = {"tools and reply priming": fixed}
    if plan.runs:
        parts["new summaries"] = plan.summary_tokens * len(plan.runs)
    kept = set(_kept_indices(plan, layout))
    for u, unit in enumerate(layout.units):
        for i in unit.indices:
            if i not in kept:
                continue
            override = plan.overrides.get(i)
            tokens = view[i].tokens if override is None else count(override)
            name = names.get(u, "other kept turns")
            parts[name] = parts.get(name, 0) + tokens
    return parts


def summary_request_end(
    view: Sequence[ViewItem], run: range, *, fixed_tokens: int, room_tokens: int
) -> int:
    """How many leading view messages the summary request for ``run`` carries.

    The view up to the end of the run (a prefix of the last request, so the provider's cache
    serves it) when it fits in ``room_tokens``; otherwise the longest unit-aligned prefix that
    fits: the model summarizes what it can see, and the rest survives only in the fact ledger.
    ``room_tokens == 0`` means the room is unknown: the prefix up to the end of the run.
    """
    end = run.stop
    if room_tokens <= 0:
        return end
    size = fixed_tokens
    fits = 0
    for unit in group_units([item.message for item in view[:end]]):
        size += sum(view[i].tokens for i in unit.indices)
        if size > room_tokens:
            break
        fits = unit.end
    return fits
