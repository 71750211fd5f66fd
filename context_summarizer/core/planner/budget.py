"""Fitting the budget: ``plan_compaction`` pulls the levers in order (the summary allowance,
the verbatim tail, then cutting kept tool outputs) toward the target, the trigger and the
window, and ``summary_request_end`` fits a summary request into the room it has."""

from __future__ import annotations

from collections.abc import Sequence

from ..config import PinRule
from ..errors import BudgetExceeded
from ..messages import INSTRUCTION_ROLES, group_units
from .layout import _Layout, _Run
from .truncation import cut_outputs
from .view import CountFn, Plan, ViewItem


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
