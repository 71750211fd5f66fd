"""Observation masking, the first step of the ``hybrid`` and ``masking`` policies. Pure, no I/O.

An old tool output is replaced by a one-line placeholder (``PromptSet.masked_output``, which
says how many tokens it stood for); the message stays a ``tool`` message answering the same call,
with every other field as it was, so the conversation stays valid and in raw order.

``plan_masking`` masks in one large step, like a compaction: whole turns, oldest first, until the
request is at or under the target, so the next masking (or compaction) is far away. It never
masks the final unit, a pinned unit, the newest ``keep_turns`` assistant turns, an inserted
summary, or an output an earlier checkpoint already masked; nor an output the placeholder
would not make smaller. When masking every maskable output still leaves the request over the
target, the plan says so (``fits`` False) and the engine summarizes the masked view.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..config import PinRule
from ..messages import Message
from .layout import _Layout
from .view import CountFn, ViewItem

TOOL_ROLES = frozenset({"tool", "function"})


@dataclass
class MaskPlan:
    """What masking does to a view."""

    masks: dict[int, Message] = field(default_factory=dict)
    """View index -> the placeholder message standing for that tool output."""
    view: list[ViewItem] = field(default_factory=list)
    """The view with the masks in place (the same items elsewhere)."""
    saved_tokens: int = 0
    """Counted tokens the masks save."""
    estimated_tokens: int = 0
    """The request's counted size with the masks in place (fixed tokens included)."""
    fits: bool = False
    """Whether that size is at or under the target."""


def masked_pattern(template: str) -> re.Pattern[str]:
    """The placeholder ``template`` as a pattern matching any of its renderings."""
    escaped = re.escape(template)
    return re.compile(re.sub(r"\\\{\w+\\\}", r"\\d+", escaped))


def is_masked(message: Message, pattern: re.Pattern[str]) -> bool:
    """Whether ``message`` is a tool output already replaced by the placeholder."""
    content = message.get("content")
    return isinstance(content, str) and pattern.fullmatch(content) is not None


def mask_message(message: Message, *, template: str, original_tokens: int) -> Message:
    """A copy of tool message ``message`` whose content is the placeholder."""
    masked = dict(message)
    masked["content"] = template.format(original_tokens=original_tokens)
    return masked


def maskable_outputs(
    view: Sequence[ViewItem], *, keep_turns: int, pins: Sequence[PinRule]
) -> list[list[int]]:
    """The view indices of the tool outputs masking may replace, grouped by unit, oldest first.

    Outputs of raw tool exchanges only: never the final unit's, a pinned unit's or those of the
    newest ``keep_turns`` assistant turns."""
    layout = _Layout(view, pins)
    turns = [
        u
        for u, unit in enumerate(layout.units)
        if not layout.inserted[u] and unit.kind in ("tool_exchange", "assistant")
    ]
    if keep_turns == 0:
        newest = len(layout.units)
    else:
        newest = turns[-keep_turns] if keep_turns <= len(turns) else 0
    groups: list[list[int]] = []
    for u, unit in enumerate(layout.units[:newest]):
        if unit.kind != "tool_exchange" or u in layout.protected or layout.inserted[u]:
            continue
        outputs = [
            i
            for i in unit.indices
            if view[i].raw_index is not None and view[i].message.get("role") in TOOL_ROLES
        ]
        if outputs:
            groups.append(outputs)
    return groups


def plan_masking(
    view: Sequence[ViewItem],
    *,
    fixed_tokens: int,
    target_tokens: int,
    keep_turns: int,
    pins: Sequence[PinRule] = (),
    original_tokens: Callable[[int], int],
    count: CountFn,
    template: str,
) -> MaskPlan:
    """Mask old tool outputs of ``view``, a unit at a time, oldest first, until the request
    (``fixed_tokens`` plus the view) is at or under ``target_tokens`` (see the module docstring).

    ``original_tokens(raw_index)`` is the raw output's size the placeholder reports.
    """
    pattern = masked_pattern(template)
    size = fixed_tokens + sum(item.tokens for item in view)
    plan = MaskPlan()
    sizes: dict[int, int] = {}
    for outputs in maskable_outputs(view, keep_turns=keep_turns, pins=pins):
        if size <= target_tokens:
            break
        for i in outputs:
            item = view[i]
            if is_masked(item.message, pattern):
                continue  # masked by an earlier checkpoint: never again
            assert item.raw_index is not None
            masked = mask_message(
                item.message, template=template, original_tokens=original_tokens(item.raw_index)
            )
            tokens = count(masked)
            if tokens < item.tokens:
                plan.masks[i], sizes[i] = masked, tokens
                plan.saved_tokens += item.tokens - tokens
                size -= item.tokens - tokens
    plan.view = [
        ViewItem(plan.masks[i], item.raw_index, sizes[i]) if i in plan.masks else item
        for i, item in enumerate(view)
    ]
    plan.estimated_tokens = size
    plan.fits = size <= target_tokens
    return plan
