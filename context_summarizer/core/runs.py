"""Summarizing a plan's runs, oldest first: one summary request per run, each built on the live
view (or, when that does not fit the window, on the earlier runs' new summaries). Pure: the
model calls are yielded as ``SummarizeCall``s. Under a model-free policy (``masking``,
``ledger-only``) no call is yielded: each run becomes its fact ledger (``ledger_run``)."""

from __future__ import annotations

from collections.abc import Generator

from .budgets import summary_cap_key
from .config import CompactionConfig
from .facts import Fact, is_summary_message, parse_ledger
from .located import Located
from .messages import content_text, first_index
from .planner import Plan, ViewItem
from .prompt_set import PromptSet
from .recall_tool import PARAMETERS, RecallTool, chat_definition
from .results import MODEL_FREE_POLICIES, SummarizeCall, SummaryOutcome
from .summaries import (
    RunRequest,
    RunSummary,
    anchor_of,
    frame_tokens,
    ledger_note_tokens,
    ledger_run,
    summarize_run,
)


def summarize_runs(
    located: Located,
    plan: Plan,
    *,
    config: CompactionConfig,
    prompts: PromptSet,
    ratio: float,
    window: int | None,
) -> Generator[SummarizeCall, SummaryOutcome, list[RunSummary]]:
    """One summary per planned run of ``located.view``, oldest first (under a model-free
    policy, one fact ledger per run, and no call)."""
    model_free = config.policy in MODEL_FREE_POLICIES
    if model_free:
        # The note is fixed text: only the ledger shrinks with the allowance.
        cap = ledger_note_tokens(prompts, located.counter)
        room = plan.summary_tokens - frame_tokens(located.recall) - cap
        ledger_cap = max(0, min(config.ledger_max_tokens, room))
    else:
        # The allowance may have shrunk: cap and ledger shrink in proportion.
        full = config.max_summary_tokens + config.ledger_max_tokens
        frame = frame_tokens(located.recall)
        share = max(0.0, (plan.summary_tokens - frame) / full) if full else 0.0
        cap = max(1, min(config.max_summary_tokens, int(config.max_summary_tokens * share)))
        ledger_cap = max(0, int(config.ledger_max_tokens * share))
    cap_key = summary_cap_key(config, located.request)
    first_user = first_index(located.messages, "user")
    previous = located.checkpoint
    offered = None
    if located.recall is not None and previous is not None and previous.replaced():
        # The requests it stood on were offered the tool: so is the summary request.
        offered = RecallTool(located.recall, prompts.recall_tool, PARAMETERS)
    done: list[RunSummary] = []
    compacted: list[ViewItem] = []  # the view so far, earlier runs replaced
    position = 0
    for run in plan.runs:
        compacted.extend(located.view[position : run.start])
        position = run.stop
        folded: list[Fact] = []
        for item in located.view[run.start : run.stop]:
            if item.replaces is not None and previous is not None:
                slot = previous.slot_at(item.replaces[0])
                if slot is not None:
                    folded.extend(Fact.model_validate(f) for f in slot.ledger)
            elif item.replaces is None and is_summary_message(item.message):
                # A summary the client sent back (a Responses compaction item, expanded): its
                # ledger was extracted verbatim when it was written; extraction skips summaries.
                folded.extend(parse_ledger(content_text(item.message)))
        start = len(compacted)
        with_run = [*compacted, *located.view[run.start : run.stop]]
        request = RunRequest(
            view=located.view,
            raw=located.messages,
            run=run,
            compacted=(with_run, range(start, len(with_run))) if done else None,
            previous_facts=folded,
            model=located.model,
            tools=[*(located.tools or ()), chat_definition(located.recall, prompts)]
            if offered is not None and located.recall is not None
            else located.tools,
            fixed_tokens=located.fixed_tokens,
            window_tokens=window,
            ratio=ratio,
            summary_cap=cap,
            ledger_cap=ledger_cap,
            cap_key=cap_key,
            session=located.session,
            prompts=prompts,
            recall=located.recall,
            recall_offered=offered,
            instructions=joined_instructions(config.summary_instructions, located.instructions),
        )
        if model_free:
            summary = ledger_run(request, counter=located.counter)
        else:
            anchor = anchor_of(located.view, run, first_user)
            summary = yield from summarize_run(
                request, config=config, counter=located.counter, anchor=anchor
            )
        done.append(summary)
        message = summary.slot.message
        replaces = (summary.slot.start, summary.slot.end)
        tokens = located.counter.count_message(message)
        compacted.append(ViewItem(message, None, tokens, replaces=replaces))
    return done


def joined_instructions(*parts: str | None) -> str | None:
    """The user's instructions for a summary, the configured ones first (None: none)."""
    given = [part.strip() for part in parts if part and part.strip()]
    return "\n\n".join(given) if given else None
