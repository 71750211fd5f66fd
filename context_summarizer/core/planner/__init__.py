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

With the ``hybrid`` and ``masking`` policies, ``plan_masking`` comes first: old tool outputs
become placeholders (``masking``), and the compaction is planned only when that is not enough,
on the masked view.
"""

from __future__ import annotations

from .budget import plan_compaction, summary_request_end
from .masking import MaskPlan, is_masked, masked_pattern, plan_masking
from .truncation import MIN_KEPT_OUTPUT_TOKENS, cut_outputs, truncate_message
from .view import CountFn, Plan, ViewItem

__all__ = [
    "MIN_KEPT_OUTPUT_TOKENS",
    "CountFn",
    "MaskPlan",
    "Plan",
    "ViewItem",
    "cut_outputs",
    "is_masked",
    "masked_pattern",
    "plan_compaction",
    "plan_masking",
    "summary_request_end",
    "truncate_message",
]
