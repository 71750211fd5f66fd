"""What to tell a user whose agent leaves the proxy no room: the fix, in the agent's own terms.

Coding agents ask for long replies (Claude Code sends ``max_tokens`` 32,000 to 128,000) and carry
a large fixed load (Claude Code's tools and system prompt: 11,000 to 24,000 tokens before the
first turn). The reply cap is reserved out of the window, so with a small ``--context-window``
nothing, or too little, is left for the prompt. The messages name both ways out.
"""

from __future__ import annotations

from ..core.budgets import Budget
from ..core.errors import BudgetExceeded, ReplyReserveTooLarge

FIXES = (
    "ask for a smaller reply cap (Claude Code: CLAUDE_CODE_MAX_OUTPUT_TOKENS=8000) or give "
    "the proxy a larger window (--context-window, or context_window in the model's [[models]] "
    "entry); see docs/agents.md"
)
"""The two ways out, as the messages say them."""

LARGE_RESERVE_SHARE = 0.25
"""A reply reserve over this share of the window is named as the cause of a refusal."""


def reserve_advice(exc: ReplyReserveTooLarge) -> str:
    """Why a request is forwarded unmanaged when its reply reserve is the whole window."""
    source = (
        f"the request asks for replies of up to {exc.reserve:,} tokens"
        if exc.asked
        else f"the configured reply reserve is {exc.reserve:,} tokens"
    )
    return (
        f"{source}, which leaves nothing of the {exc.window:,}-token window for the prompt, so "
        f"it is forwarded unmanaged: {FIXES}"
    )


def budget_advice(exc: BudgetExceeded, budget: Budget) -> str:
    """The refusal's message, with the fix when the reply reserve is a large part of the cause."""
    if budget.reserve_output_tokens <= budget.context_window * LARGE_RESERVE_SHARE:
        return str(exc)
    return (
        f"{exc}; the reply cap of {budget.reserve_output_tokens:,} tokens this request asks "
        f"for is reserved out of the {budget.context_window:,}-token window: {FIXES}"
    )
