"""A compaction, in two steps: ``draft_compaction`` (mask, plan, summarize, build the checkpoint
and the view it gives: everything but saving) and ``commit_draft`` (save it, remember it, say so,
return what to send). ``ContextEngine.steps`` runs both at once; ahead-of-time compaction drafts
early and commits when a later request adopts the draft.

Pure, like the engine: generators that yield their effects.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from .config import CompactionConfig
from .effects import Effects, SaveCheckpoint, Saved
from .errors import BudgetExceeded, SummaryFailed
from .located import Draft, Located, SessionMemo
from .planner import MaskPlan, Plan, plan_compaction, plan_masking
from .prompt_set import PromptSet
from .records import (
    abandoned_event,
    build_checkpoint,
    calibrated_refusal,
    compaction_event,
    cut_final_turn,
    log_compaction,
    summary_records,
)
from .redaction import redact_checkpoint
from .results import MASKING_POLICIES, MODEL_FREE_POLICIES, CompactionEvent, PrepareResult, Trigger
from .runs import summarize_runs
from .summaries import RunSummary, frame_tokens, ledger_note_tokens
from .tokens import Calibration


class Compacting(Protocol):
    """What a compaction needs of the engine running it (``ContextEngine`` is one)."""

    config: CompactionConfig
    prompts: PromptSet
    calibration: Calibration
    on_compaction: Callable[[CompactionEvent], None] | None

    def remember(self, namespace: str, session: str, memo: SessionMemo) -> None:
        """Keep ``memo`` as what the engine last learned of the session."""
        ...

    def unchanged(self, located: Located) -> PrepareResult:
        """The result for a request sent as its view."""
        ...


logger = logging.getLogger("summarizer")

MIN_SUMMARY_CAP = 256
"""The smallest completion cap a summary is asked for when the window is tight."""
MIN_LEDGER_TOKENS = 64
"""The smallest fact ledger kept beside a summary when the window is tight."""
LAST_RESORT_SUMMARY_CAP = 96
"""The cap of a summary (with no ledger) when only that keeps a request inside the window."""
OVERFLOW_MARGIN = 0.85
"""After the provider refused a request as too long, the retry must fit in this share of it."""


def draft_compaction(
    engine: Compacting,
    located: Located,
    *,
    trigger: Trigger,
    started: float,
    target: int | None = None,
    drafting: bool = False,
) -> Effects[Draft | PrepareResult]:
    """Everything of a compaction but saving it: the checkpoint and the view it gives, or
    the result to send when there is nothing to do (or the summaries failed and the request
    still fits). ``target`` overrides the budget's; ``drafting`` (ahead of time): no event or
    error for a failure, and the summary keeps its whole allowance."""
    config = engine.config
    budget = located.budget
    ratio = engine.calibration.ratio(located.model, located.namespace)
    limit, trigger_tokens = budget.usable, budget.trigger_tokens
    target = budget.target_tokens if target is None else target
    window: int | None = budget.context_window
    if trigger == "context_length_exceeded":
        # The provider refused what we counted as fitting: the real window is smaller than
        # our figures say, by an unknown amount.
        limit = min(limit, int(located.calibrated_tokens * OVERFLOW_MARGIN))
        trigger_tokens, target, window = (
            min(trigger_tokens, limit),
            min(target, limit // 2),
            None,
        )
    masking = MaskPlan()
    planned = located  # the view the compaction works on: masked first under ``hybrid``
    if config.policy in MASKING_POLICIES:  # ``hybrid`` and ``masking``
        masking = _mask(engine, located, target=int(target / ratio))
        if masking.masks:
            planned = replace(located, view=masking.view)
    summaries: list[RunSummary] = []
    if masking.fits and not masking.masks:
        return engine.unchanged(located)  # under the target already: nothing to do
    if masking.fits:
        plan = Plan(runs=[], tail_start=len(planned.view), summary_tokens=0)
    else:
        plan = _plan(engine, planned, ratio, limit, trigger_tokens, target, whole_summary=drafting)
        nothing = not plan.runs and not plan.overrides and not plan.final_cuts
        if nothing and not masking.masks:
            return engine.unchanged(located)  # nothing to compact; it fits as it is
        # The runs are planned on the masked view, but summarized from the live one: the
        # summary request stays a prefix of the last request, and sees what was just masked
        # (under a model-free policy, the ledger is extracted from the raw turns).
        summaries = yield from summarize_runs(
            located, plan, config=config, prompts=engine.prompts, ratio=ratio, window=window
        )
    failures = [s.slot.failure for s in summaries if s.slot.failure]
    if failures:
        if config.on_failure == "raise" and not drafting:
            raise SummaryFailed(f"summarization failed: {failures[0]}")
        # After context_length_exceeded the upstream has said it does not fit.
        if drafting or (trigger == "threshold" and located.calibrated_tokens <= budget.usable):
            if drafting:
                return engine.unchanged(located)
            logger.warning(
                "summary failed (%s); request sent unchanged since it still fits", failures[0]
            )
            if engine.on_compaction is not None:
                engine.on_compaction(
                    abandoned_event(
                        located,
                        summaries,
                        failure=failures[0],
                        trigger=trigger,
                        latency_s=time.monotonic() - started,
                        policy=config.policy,
                    )
                )
            return engine.unchanged(located).model_copy(
                update={
                    "held_back": f"its summary failed ({failures[0]})",
                    "summary_records": summary_records(located, "", summaries),
                }
            )
    checkpoint = build_checkpoint(
        planned,
        plan,
        summaries,
        trigger=trigger,
        summary_model=config.summary_model,
        masks=masking.masks,
    )
    # Keys never reach a checkpoint: redacted before this request is rewritten from it, so it
    # and every later request rewritten from the stored one carry the same bytes.
    checkpoint = redact_checkpoint(checkpoint, located.secrets)
    new_view, tokens_after_raw = located.view_under(checkpoint)
    if plan.final_cuts and tokens_after_raw > int(limit / ratio):
        # Only now is the summaries' real size known: cut the final turn as far as needed.
        checkpoint = cut_final_turn(
            planned,
            plan,
            checkpoint,
            new_view,
            size=tokens_after_raw,
            limit=int(limit / ratio),
            marker=engine.prompts.truncated_output,
        )
        checkpoint = redact_checkpoint(checkpoint, located.secrets)
        new_view, tokens_after_raw = located.view_under(checkpoint)
    tokens_after = engine.calibration.apply(located.model, tokens_after_raw, located.namespace)
    if tokens_after > limit:
        raise BudgetExceeded(
            required_tokens=tokens_after,
            budget_tokens=limit,
            detail="the compacted request would not leave room for the reply",
        )
    return Draft(
        checkpoint=checkpoint.model_copy(update={"tokens_after": tokens_after}),
        parent_id=located.checkpoint_id,
        summaries=summaries,
        plan=plan,
        masking=masking,
        view=new_view,
        raw_tokens=tokens_after_raw,
    )


def commit_draft(
    engine: Compacting,
    located: Located,
    draft: Draft,
    *,
    trigger: Trigger,
    started: float,
    ahead: bool = False,
) -> Effects[PrepareResult]:
    """Save ``draft``'s checkpoint, remember it, say so, and return what to send."""
    checkpoint = draft.checkpoint
    saved: Saved = yield SaveCheckpoint(checkpoint)
    memo = SessionMemo(checkpoint, checkpoint.basis_count, checkpoint.basis_hash, saved.generation)
    engine.remember(located.namespace, located.session, memo)
    event = compaction_event(
        located,
        checkpoint,
        draft.summaries,
        draft.plan,
        trigger=trigger,
        latency_s=time.monotonic() - started,
        policy=engine.config.policy,
        masking=draft.masking,
    )
    if ahead:
        event = event.model_copy(update={"ahead_of_time": True})
    log_compaction(event)
    if engine.on_compaction is not None:
        engine.on_compaction(event)
    return PrepareResult(
        messages=[item.message for item in draft.view],
        compacted=True,
        rewritten=True,
        session=located.session,
        namespace=located.namespace,
        checkpoint_id=checkpoint.id,
        report=located.report(draft.raw_tokens, checkpoint.tokens_after),
        event=event,
        replaced=checkpoint.replaced(),
        summary_records=summary_records(located, checkpoint.id, draft.summaries),
    )


def _mask(engine: Compacting, located: Located, *, target: int) -> MaskPlan:
    """The ``hybrid`` and ``masking`` policies' first step: old tool outputs masked toward
    ``target`` (counted tokens)."""
    counter = located.counter

    def original(index: int) -> int:
        return counter.count_message(located.messages[index], digest=located.digests[index])

    return plan_masking(
        located.view,
        fixed_tokens=located.compacted_fixed_tokens,
        target_tokens=target,
        keep_turns=engine.config.mask_keep_turns,
        pins=engine.config.pin,
        original_tokens=original,
        count=counter.count_message,
        template=engine.prompts.masked_output,
    )


def _plan(
    engine: Compacting,
    located: Located,
    ratio: float,
    limit: int,
    trigger_tokens: int,
    target: int,
    *,
    whole_summary: bool = False,
) -> Plan:
    """The compaction of ``located.view`` toward ``target`` (provider tokens), in the
    window's ``limit``; ``BudgetExceeded`` in provider tokens when nothing fits.
    ``whole_summary``: reach the target by keeping fewer recent turns, never by shrinking the
    summary's allowance (a draft's lower target would otherwise squeeze its cap).

    Under a model-free policy a run's text is the ``ledger_summary`` note, of a fixed size: the
    allowance is that note, the ledger and the frame, and only the ledger shrinks (to none at
    the last resort)."""
    config = engine.config
    cap, ledger_cap = config.max_summary_tokens, config.ledger_max_tokens
    smallest_cap, last_resort_cap = min(cap, MIN_SUMMARY_CAP), min(cap, LAST_RESORT_SUMMARY_CAP)
    if config.policy in MODEL_FREE_POLICIES:
        cap = smallest_cap = last_resort_cap = ledger_note_tokens(engine.prompts, located.counter)
    frame = frame_tokens(located.recall)
    smallest = smallest_cap + min(ledger_cap, MIN_LEDGER_TOKENS) + frame
    if whole_summary:
        smallest = cap + ledger_cap + frame
    try:
        return plan_compaction(
            located.view,
            fixed_tokens=located.compacted_fixed_tokens,
            summary_tokens=cap + ledger_cap + frame,
            min_summary_tokens=smallest,
            last_resort_summary_tokens=last_resort_cap + frame,
            limit_tokens=int(limit / ratio),
            trigger_tokens=int(trigger_tokens / ratio),
            target_tokens=int(target / ratio),
            keep_recent_tokens=config.keep_recent_tokens,
            pins=config.pin,
            count=located.counter.count_message,
            truncation_marker=engine.prompts.truncated_output,
        )
    except BudgetExceeded as exc:
        raise calibrated_refusal(exc, ratio, limit, located.budget) from None
