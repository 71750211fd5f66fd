"""What a compaction records: the checkpoint it writes, the event it reports, and the refusal it
raises when nothing fits. Pure functions of the located turn, the plan and the summaries."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .budgets import Budget
from .checkpoints import Checkpoint
from .errors import BudgetExceeded
from .located import Located
from .messages import Message
from .planner import MaskPlan, Plan, ViewItem, cut_outputs
from .results import CompactionEvent, Policy, Trigger
from .summaries import RunSummary
from .summary_records import SummaryRecord

logger = logging.getLogger("summarizer")


def build_checkpoint(
    located: Located,
    plan: Plan,
    summaries: Sequence[RunSummary],
    *,
    trigger: Trigger,
    summary_model: str | None,
    masks: Mapping[int, Message] | None = None,
) -> Checkpoint:
    """The checkpoint of ``located`` after ``plan``, with the ``summaries`` written for it.

    Earlier summaries the plan keeps stay as they were; earlier cut or masked outputs stay so
    unless a new summary now stands for them. ``masks`` (view index -> placeholder message, the
    ``hybrid`` or ``masking`` policy's) become overrides where no new summary stands for them.
    """
    view = located.view
    previous = located.checkpoint
    replaced = set(plan.span)
    new_slots = [s.slot for s in summaries]
    slots = list(new_slots)
    for i, item in enumerate(view):
        if item.replaces is not None and i not in replaced and previous is not None:
            kept = previous.slot_at(item.replaces[0])
            if kept is not None:
                slots.append(kept)
    slots.sort(key=lambda slot: slot.start)

    def outside(index: int) -> bool:
        return not any(slot.start <= index < slot.end for slot in new_slots)

    overrides: dict[int, Message] = {}
    if previous is not None:
        overrides.update({i: m for i, m in previous.overrides.items() if outside(i)})
    for i, replacement in {**(masks or {}), **plan.overrides}.items():
        if i in replaced:
            continue
        raw_index = view[i].raw_index
        assert raw_index is not None, "only raw tool outputs are cut or masked"
        overrides[raw_index] = replacement
    facts: dict[str, dict[str, Any]] = {}
    for summary in summaries:
        for fact in summary.facts:
            facts.setdefault(fact.key, fact.model_dump())
    scores = [s.slot.score for s in summaries if s.slot.score is not None]
    failures = [s.slot.failure for s in summaries if s.slot.failure]
    return Checkpoint(
        namespace=located.namespace,
        session=located.session,
        basis_count=len(located.messages),
        basis_hash=located.chain[-1],
        slots=slots,
        overrides=overrides,
        summary="\n\n".join(slot.summary for slot in new_slots),
        ledger=list(facts.values()),
        score=min(scores) if scores else None,
        tokens_before=located.calibrated_tokens,
        tokens_after=0,
        model=located.model,
        summary_model=summary_model or located.model,
        trigger=trigger,
        failure="; ".join(failures) or None,
        parent_id=previous.id if previous else None,
    )


def cut_final_turn(
    located: Located,
    plan: Plan,
    checkpoint: Checkpoint,
    new_view: Sequence[ViewItem],
    *,
    size: int,
    limit: int,
    marker: str,
) -> Checkpoint:
    """``checkpoint`` with the final turn's tool outputs cut until a request of ``size`` counted
    tokens (its real size, the summaries written) comes down to ``limit``."""
    raw = {located.view[i].raw_index for i in plan.final_cuts}
    where = [i for i, item in enumerate(new_view) if item.raw_index in raw]
    cuts, _ = cut_outputs(
        new_view, where, size=size, goal=limit, count=located.counter.count_message, marker=marker
    )
    if cuts and "truncate_tool_output" not in plan.degraded:
        plan.degraded.append("truncate_tool_output")
    overrides = dict(checkpoint.overrides)
    for i, replacement in cuts.items():
        raw_index = new_view[i].raw_index
        assert raw_index is not None
        overrides[raw_index] = replacement
    return checkpoint.model_copy(update={"overrides": overrides})


def compaction_event(
    located: Located,
    checkpoint: Checkpoint,
    summaries: Sequence[RunSummary],
    plan: Plan,
    *,
    trigger: Trigger,
    latency_s: float,
    policy: Policy = "self-summary",
    masking: MaskPlan | None = None,
) -> CompactionEvent:
    """The event ``on_compaction`` receives for this compaction (``masking``: what the
    ``hybrid`` or ``masking`` policy masked first, if anything)."""
    previous = located.checkpoint
    covered = checkpoint.covered_count
    outcomes = [s.outcome for s in summaries if s.outcome is not None]
    prompt = [o.prompt_tokens for o in outcomes if o.prompt_tokens is not None]
    cached = [o.cached_tokens for o in outcomes if o.cached_tokens is not None]
    return CompactionEvent(
        session=located.session,
        checkpoint_id=checkpoint.id,
        trigger=trigger,
        tokens_before=located.calibrated_tokens,
        tokens_after=checkpoint.tokens_after,
        summary=checkpoint.summary,
        ledger_size=len(checkpoint.ledger),
        score=checkpoint.score,
        latency_s=latency_s,
        cut=(previous.covered_count if previous else 0, covered),
        kept_indices=[i for i in range(covered) if checkpoint.slot_at(i) is None],
        replaced=[(s.slot.start, s.slot.end) for s in summaries],
        degraded=list(plan.degraded),
        verdicts=[s.verdict for s in summaries if s.verdict is not None],
        problems=[p for s in summaries for p in s.problems],
        failure=checkpoint.failure,
        summary_prompt_tokens=sum(prompt) if prompt else None,
        summary_cached_tokens=sum(cached) if cached else None,
        policy=policy,
        masked=len(masking.masks) if masking is not None else 0,
        masked_tokens=masking.saved_tokens if masking is not None else 0,
        ledger_only=sum(1 for s in summaries if s.verdict is None),
    )


def abandoned_event(
    located: Located,
    summaries: Sequence[RunSummary],
    *,
    failure: str,
    trigger: Trigger,
    latency_s: float,
    policy: Policy,
) -> CompactionEvent:
    """The event for a compaction given up because its summaries failed while the request
    still fit (it goes out unchanged)."""
    previous = located.checkpoint
    start = previous.covered_count if previous else 0
    return CompactionEvent(
        session=located.session,
        checkpoint_id="",
        trigger=trigger,
        tokens_before=located.calibrated_tokens,
        tokens_after=located.calibrated_tokens,
        summary="",
        ledger_size=0,
        score=None,
        latency_s=latency_s,
        cut=(start, start),
        kept_indices=[],
        verdicts=[s.verdict for s in summaries if s.verdict is not None],
        problems=[p for s in summaries for p in s.problems],
        failure=failure,
        policy=policy,
        applied=False,
    )


def log_compaction(event: CompactionEvent) -> None:
    """One info line on a compaction."""
    count = len(event.verdicts)
    masked = f"{event.masked} masked tool outputs ({event.masked_tokens} tokens) and "
    made = f"{count} summar{'y' if count == 1 else 'ies'}"
    if event.ledger_only:
        made = f"{event.ledger_only} fact ledger{'' if event.ledger_only == 1 else 's'} (no model)"
    logger.info(
        "compacted session %s: %d -> %d tokens in %s%s, policy %s, score %s, trigger %s%s",
        event.session,
        event.tokens_before,
        event.tokens_after,
        masked if event.masked else "",
        made,
        event.policy,
        "n/a" if event.score is None else f"{event.score:.2f}",
        event.trigger,
        f", failure: {event.failure}" if event.failure else "",
    )


def calibrated_refusal(
    exc: BudgetExceeded, ratio: float, limit: int, budget: Budget
) -> BudgetExceeded:
    """The planner's refusal (in counted tokens) in the provider's tokens, naming the window."""
    parts = {name: math.ceil(tokens * ratio) for name, tokens in exc.parts.items()}
    return BudgetExceeded(
        required_tokens=math.ceil(exc.required_tokens * ratio),
        budget_tokens=limit,
        detail=f"a {budget.context_window:,}-token window less {budget.reserve_output_tokens:,} "
        f"kept for the reply; {exc.detail}"
        if exc.detail
        else "",
        parts=parts,
    )


def summary_records(
    located: Located, checkpoint_id: str, summaries: Sequence[RunSummary]
) -> list[SummaryRecord]:
    """One training record per run a model was asked to summarize (``checkpoint_id``: the
    checkpoint the summaries went into, ``""`` when every one failed and none was written)."""
    return [
        SummaryRecord(
            namespace=located.namespace,
            session=located.session,
            checkpoint_id=checkpoint_id,
            model=located.model,
            start=summary.slot.start,
            end=summary.slot.end,
            verdict=summary.verdict,
            cap=summary.cap,
            facts=list(summary.slot.ledger),
            attempts=list(summary.attempts),
        )
        for summary in summaries
        if summary.attempts and summary.verdict is not None and summary.cap > 0
    ]
