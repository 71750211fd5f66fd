"""The context engine: from the raw messages an agent sends to the messages worth sending.

``ContextEngine.steps`` is a generator and performs no I/O of its own except through the store: it
*yields* a ``SummarizeCall`` when it needs the model to summarize and receives a
``SummaryOutcome`` back. ``drive_sync`` and ``drive_async`` are the two small drivers that perform
those calls, so sync and async callers share every decision.

The invariants it keeps:

- a checkpoint applies only to the conversation it was computed from and to its extensions (see
  ``checkpoints``): a fork, an edited turn or another tenant's conversation never gets it;
- between two compactions, the messages it returns for a growing conversation are append-only
  (each request's messages begin with the previous request's messages, byte for byte), because
  every request is rewritten from the same stored checkpoint;
- what it returns keeps the raw order of everything kept, every system/developer message, the
  latest user message and every tool pair, and fits the usable window (or it raises
  ``BudgetExceeded``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..stores import Store, prefix_candidates
from .caches import ChainCache
from .checkpoints import Checkpoint, Slot
from .config import Budget, CompactionConfig, requested_output_tokens, resolve_budget
from .errors import BudgetExceeded, SummaryFailed
from .facts import Fact
from .messages import Message, first_index, message_digest, validate_messages
from .planner import Plan, ViewItem, cut_outputs, plan_compaction
from .prompt_set import PromptSet
from .results import (
    CompactionEvent,
    PrepareResult,
    SummarizeCall,
    SummaryOutcome,
    TokenReport,
    Trigger,
)
from .summaries import FRAME_TOKENS, RunRequest, RunSummary, anchor_of, summarize_run
from .tokens import REPLY_PRIMING_TOKENS, Calibration, TokenCounter

logger = logging.getLogger("summarizer")

Steps = Generator[SummarizeCall, SummaryOutcome, PrepareResult]
MIN_SUMMARY_CAP = 256
"""The smallest completion cap a summary is asked for when the window is tight."""
MIN_LEDGER_TOKENS = 64
"""The smallest fact ledger kept beside a summary when the window is tight."""
LAST_RESORT_SUMMARY_CAP = 96
"""The cap of a summary (with no ledger) when only that keeps a request inside the window."""
OVERFLOW_MARGIN = 0.85
"""After the provider refused a request as too long, the retry must fit in this share of it."""


@dataclass
class Located:
    """A request resolved against the store: its view and its size (engine-internal state)."""

    session: str
    namespace: str
    messages: list[Message]
    model: str
    tools: list[Mapping[str, Any]] | None
    request: Mapping[str, Any]
    budget: Budget
    counter: TokenCounter
    checkpoint: Checkpoint | None
    digests: list[str]
    chain: list[str]
    view: list[ViewItem]
    fixed_tokens: int
    raw_tokens: int
    calibrated_tokens: int

    def report(self, raw_tokens: int, calibrated: int) -> TokenReport:
        return TokenReport(
            estimated_tokens=calibrated,
            raw_estimated_tokens=raw_tokens,
            context_window=self.budget.context_window,
            reserve_output_tokens=self.budget.reserve_output_tokens,
            trigger_tokens=self.budget.trigger_tokens,
            target_tokens=self.budget.target_tokens,
        )


@dataclass(frozen=True, slots=True)
class _Memo:
    """What the engine last learned of a session's checkpoints."""

    checkpoint: Checkpoint | None
    """The best checkpoint found for the session's conversation, if any."""
    checked: int
    """The store held nothing better for any prefix up to this many messages..."""
    checked_hash: str
    """...of the conversation whose prefix of ``checked`` messages hashes to this..."""
    generation: int | None
    """...as of this store generation (None: the store cannot tell, so it is never trusted)."""

    def covers(self, chain: Sequence[str], generation: int | None) -> bool:
        """Whether the first ``checked`` prefixes of ``chain`` need no new lookup."""
        return (
            generation is not None
            and generation == self.generation
            and 0 < self.checked <= len(chain)
            and chain[self.checked - 1] == self.checked_hash
        )


def _extends(chain: Sequence[str], checkpoint: Checkpoint) -> bool:
    """Whether the conversation hashed by ``chain`` begins with the checkpoint's basis."""
    k = checkpoint.basis_count
    return checkpoint.applicable and k <= len(chain) and chain[k - 1] == checkpoint.basis_hash


class ContextEngine:
    """Decides, for each request, what to send; keeps checkpoints in a ``Store``."""

    def __init__(
        self,
        config: CompactionConfig,
        store: Store,
        *,
        prompts: PromptSet,
        counter_for: Callable[[str], TokenCounter],
        namespace: str = "",
        calibration: Calibration | None = None,
        on_compaction: Callable[[CompactionEvent], None] | None = None,
        memo_size: int = 256,
    ) -> None:
        self.config = config
        self.store = store
        self.prompts = prompts
        self.counter_for = counter_for
        self.namespace = namespace
        self.calibration = calibration or Calibration()
        self.on_compaction = on_compaction
        self._chains = ChainCache()
        # The latest checkpoint per (namespace, session): saves a store lookup per request. Bounded
        # like the chain cache (256 conversations): a conversation evicted from that is rehashed
        # in full anyway, and the former 4,096 checkpoints (~18 KiB each) held up to 72 MiB.
        self._latest: OrderedDict[tuple[str, str], _Memo] = OrderedDict()
        self._latest_lock = threading.Lock()
        self._memo_size = memo_size

    # -- locating -----------------------------------------------------------------------------

    def locate(
        self,
        messages: Sequence[Message],
        *,
        model: str,
        tools: Sequence[Mapping[str, Any]] | None = None,
        session: str | None = None,
        request: Mapping[str, Any] | None = None,
        namespace: str | None = None,
    ) -> Located:
        """Validate ``messages``, find their checkpoint and measure the resulting view.

        ``namespace`` (default: the engine's own) scopes sessions, checkpoints and calibration,
        e.g. to one credential; nothing is ever found across namespaces.
        """
        namespace = self.namespace if namespace is None else namespace
        raw = list(messages) if not isinstance(messages, list) else messages
        validate_messages(raw[:2])  # the cache's key is made from these
        request = request or {}
        budget = resolve_budget(
            self.config, model, requested_output=requested_output_tokens(request)
        )
        counter = self.counter_for(model)
        # Only what is new since this conversation was last seen is validated and hashed.
        digests, chain = self._chains.digests_and_chain(
            raw, check=lambda start: validate_messages(raw, start=start)
        )
        session_key = session or self._derive_session(raw, chain)
        checkpoint = self._find_checkpoint(namespace, session_key, chain)
        view = self._view(raw, digests, checkpoint, counter)
        fixed = counter.count_tools(tools) + REPLY_PRIMING_TOKENS
        raw_tokens = fixed + sum(item.tokens for item in view)
        return Located(
            session=session_key,
            namespace=namespace,
            messages=raw,
            model=model,
            tools=list(tools) if tools else None,
            request=request,
            budget=budget,
            counter=counter,
            checkpoint=checkpoint,
            digests=digests,
            chain=chain,
            view=view,
            fixed_tokens=fixed,
            raw_tokens=raw_tokens,
            calibrated_tokens=self.calibration.apply(model, raw_tokens, namespace),
        )

    def _derive_session(self, raw: Sequence[Message], chain: Sequence[str]) -> str:
        for index, message in enumerate(raw):
            if message.get("role") == "user":
                return "auto-" + chain[index][:20]
        return "auto-" + chain[0][:20]

    def _remember(self, namespace: str, session: str, memo: _Memo) -> None:
        with self._latest_lock:
            self._latest[(namespace, session)] = memo
            self._latest.move_to_end((namespace, session))
            while len(self._latest) > self._memo_size:
                self._latest.popitem(last=False)

    def _find_checkpoint(
        self, namespace: str, session: str, chain: Sequence[str]
    ) -> Checkpoint | None:
        # Read before the lookup: a write during it then makes the memo stale, never wrong.
        generation = self.store.generation()
        with self._latest_lock:
            memo = self._latest.get((namespace, session))
        known = memo.checkpoint if memo is not None else None
        start = 0
        if known is not None:
            if _extends(chain, known):
                start = known.basis_count  # a newer checkpoint must have a longer basis
            else:
                known = None  # another branch of the session (a fork) was seen last
        if memo is not None and memo.covers(chain, generation):
            # Nothing was written since these prefixes were looked up: only newer ones can match.
            start = max(start, memo.checked)
        candidates = prefix_candidates(chain, start)
        found = self.store.find_latest(namespace, candidates) if candidates else None
        if found is not None and not _extends(chain, found):
            found = None  # a store must never return another conversation's; be sure anyway
        best = found if found is not None else known
        if chain:
            self._remember(namespace, session, _Memo(best, len(chain), chain[-1], generation))
        return best

    def _view(
        self,
        raw: Sequence[Message],
        digests: Sequence[str],
        checkpoint: Checkpoint | None,
        counter: TokenCounter,
    ) -> list[ViewItem]:
        def item(entry: int | Slot) -> ViewItem:
            if isinstance(entry, Slot):
                message = entry.message
                tokens = counter.count_message(message, digest=message_digest(message))
                return ViewItem(message, None, tokens, replaces=(entry.start, entry.end))
            override = checkpoint.overrides.get(entry) if checkpoint is not None else None
            if override is not None:
                digest = message_digest(override)
                return ViewItem(override, entry, counter.count_message(override, digest=digest))
            tokens = counter.count_message(raw[entry], digest=digests[entry])
            return ViewItem(raw[entry], entry, tokens)

        if checkpoint is None:
            return [item(i) for i in range(len(raw))]
        return [item(entry) for entry in checkpoint.layout(len(raw))]

    # -- deciding -----------------------------------------------------------------------------

    def needs_compaction(self, located: Located) -> bool:
        """Whether the located request is over the trigger."""
        return located.calibrated_tokens > located.budget.trigger_tokens

    def unchanged(self, located: Located) -> PrepareResult:
        """The result for a request sent as its view, with no new compaction."""
        return PrepareResult(
            messages=[item.message for item in located.view],
            compacted=False,
            rewritten=located.checkpoint is not None,
            session=located.session,
            namespace=located.namespace,
            checkpoint_id=located.checkpoint.id if located.checkpoint else None,
            report=located.report(located.raw_tokens, located.calibrated_tokens),
        )

    def steps(self, located: Located, *, trigger: Trigger = "threshold") -> Steps:
        """Compact ``located``: yields summary calls, returns what to send."""
        started = time.monotonic()
        config = self.config
        budget = located.budget
        ratio = self.calibration.ratio(located.model, located.namespace)
        limit, trigger_tokens, target = budget.usable, budget.trigger_tokens, budget.target_tokens
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
        cap, ledger_cap = config.max_summary_tokens, config.ledger_max_tokens
        smallest = min(cap, MIN_SUMMARY_CAP) + min(ledger_cap, MIN_LEDGER_TOKENS) + FRAME_TOKENS
        last_resort = min(cap, LAST_RESORT_SUMMARY_CAP) + FRAME_TOKENS
        try:
            plan = plan_compaction(
                located.view,
                fixed_tokens=located.fixed_tokens,
                summary_tokens=cap + ledger_cap + FRAME_TOKENS,
                min_summary_tokens=smallest,
                last_resort_summary_tokens=last_resort,
                limit_tokens=int(limit / ratio),
                trigger_tokens=int(trigger_tokens / ratio),
                target_tokens=int(target / ratio),
                keep_recent_tokens=config.keep_recent_tokens,
                pins=config.pin,
                count=located.counter.count_message,
                truncation_marker=self.prompts.truncated_output,
            )
        except BudgetExceeded as exc:
            raise _calibrated(exc, ratio, limit, budget) from None
        if not plan.runs and not plan.overrides and not plan.final_cuts:
            return self.unchanged(located)  # nothing to compact; it fits the window as it is
        summaries = yield from self._summarize(located, plan, ratio, window, trigger)
        failures = [s.slot.failure for s in summaries if s.slot.failure]
        if failures:
            if config.on_failure == "raise":
                raise SummaryFailed(f"summarization failed: {failures[0]}")
            # After context_length_exceeded the upstream has said it does not fit.
            if trigger == "threshold" and located.calibrated_tokens <= budget.usable:
                logger.warning(
                    "summary failed (%s); request sent unchanged since it still fits", failures[0]
                )
                return self.unchanged(located)
        checkpoint = self._checkpoint(located, plan, summaries, trigger, failures)
        new_view = self._view(located.messages, located.digests, checkpoint, located.counter)
        tokens_after_raw = located.fixed_tokens + sum(item.tokens for item in new_view)
        if plan.final_cuts and tokens_after_raw > int(limit / ratio):
            # Only now is the summaries' real size known: cut the final turn as far as needed.
            checkpoint = self._cut_final_turn(
                located, plan, checkpoint, new_view, tokens_after_raw, int(limit / ratio)
            )
            new_view = self._view(located.messages, located.digests, checkpoint, located.counter)
            tokens_after_raw = located.fixed_tokens + sum(item.tokens for item in new_view)
        tokens_after = self.calibration.apply(located.model, tokens_after_raw, located.namespace)
        if tokens_after > limit:
            raise BudgetExceeded(
                required_tokens=tokens_after,
                budget_tokens=limit,
                detail="the compacted request would not leave room for the reply",
            )
        checkpoint = checkpoint.model_copy(update={"tokens_after": tokens_after})
        self.store.put(checkpoint)
        memo = _Memo(
            checkpoint, checkpoint.basis_count, checkpoint.basis_hash, self.store.generation()
        )
        self._remember(located.namespace, located.session, memo)
        event = self._event(located, checkpoint, summaries, plan, trigger, started)
        logger.info(
            "compacted session %s: %d -> %d tokens in %d summar%s, score %s, trigger %s%s",
            located.session,
            event.tokens_before,
            event.tokens_after,
            len(summaries),
            "y" if len(summaries) == 1 else "ies",
            "n/a" if event.score is None else f"{event.score:.2f}",
            trigger,
            f", failure: {event.failure}" if event.failure else "",
        )
        if self.on_compaction is not None:
            self.on_compaction(event)
        return PrepareResult(
            messages=[item.message for item in new_view],
            compacted=True,
            rewritten=True,
            session=located.session,
            namespace=located.namespace,
            checkpoint_id=checkpoint.id,
            report=located.report(tokens_after_raw, tokens_after),
            event=event,
        )

    def _summarize(
        self, located: Located, plan: Plan, ratio: float, window: int | None, trigger: Trigger
    ) -> Generator[SummarizeCall, SummaryOutcome, list[RunSummary]]:
        """One summary per planned run, oldest first."""
        config = self.config
        # The allowance may have shrunk: cap and ledger shrink in proportion.
        full = config.max_summary_tokens + config.ledger_max_tokens
        share = max(0.0, (plan.summary_tokens - FRAME_TOKENS) / full) if full else 0.0
        cap = max(1, min(config.max_summary_tokens, int(config.max_summary_tokens * share)))
        ledger_cap = max(0, int(config.ledger_max_tokens * share))
        cap_key = "max_tokens" if "max_tokens" in located.request else "max_completion_tokens"
        first_user = first_index(located.messages, "user")
        previous = located.checkpoint
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
            start = len(compacted)
            with_run = [*compacted, *located.view[run.start : run.stop]]
            request = RunRequest(
                view=located.view,
                raw=located.messages,
                run=run,
                compacted=(with_run, range(start, len(with_run))) if done else None,
                previous_facts=folded,
                model=located.model,
                tools=located.tools,
                fixed_tokens=located.fixed_tokens,
                window_tokens=window,
                ratio=ratio,
                summary_cap=cap,
                ledger_cap=ledger_cap,
                cap_key=cap_key,
                session=located.session,
                prompts=self.prompts,
            )
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

    def _cut_final_turn(
        self,
        located: Located,
        plan: Plan,
        checkpoint: Checkpoint,
        new_view: Sequence[ViewItem],
        size: int,
        limit: int,
    ) -> Checkpoint:
        """``checkpoint`` with the final turn's tool outputs cut until the request fits."""
        raw = {located.view[i].raw_index for i in plan.final_cuts}
        where = [i for i, item in enumerate(new_view) if item.raw_index in raw]
        cuts, _ = cut_outputs(
            new_view,
            where,
            size=size,
            goal=limit,
            count=located.counter.count_message,
            marker=self.prompts.truncated_output,
        )
        if cuts and "truncate_tool_output" not in plan.degraded:
            plan.degraded.append("truncate_tool_output")
        overrides = dict(checkpoint.overrides)
        for i, replacement in cuts.items():
            raw_index = new_view[i].raw_index
            assert raw_index is not None
            overrides[raw_index] = replacement
        return checkpoint.model_copy(update={"overrides": overrides})

    def _checkpoint(
        self,
        located: Located,
        plan: Plan,
        summaries: Sequence[RunSummary],
        trigger: Trigger,
        failures: Sequence[str | None],
    ) -> Checkpoint:
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
        for i, replacement in plan.overrides.items():
            raw_index = view[i].raw_index
            assert raw_index is not None, "only raw tool outputs are cut"
            overrides[raw_index] = replacement
        facts: dict[str, dict[str, Any]] = {}
        for summary in summaries:
            for fact in summary.facts:
                facts.setdefault(fact.key, fact.model_dump())
        scores = [s.slot.score for s in summaries if s.slot.score is not None]
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
            summary_model=self.config.summary_model or located.model,
            trigger=trigger,
            failure="; ".join(f for f in failures if f) or None,
            parent_id=previous.id if previous else None,
        )

    def _event(
        self,
        located: Located,
        checkpoint: Checkpoint,
        summaries: Sequence[RunSummary],
        plan: Plan,
        trigger: Trigger,
        started: float,
    ) -> CompactionEvent:
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
            latency_s=time.monotonic() - started,
            cut=(previous.covered_count if previous else 0, covered),
            kept_indices=[i for i in range(covered) if checkpoint.slot_at(i) is None],
            replaced=[(s.slot.start, s.slot.end) for s in summaries],
            degraded=list(plan.degraded),
            failure=checkpoint.failure,
            summary_prompt_tokens=sum(prompt) if prompt else None,
            summary_cached_tokens=sum(cached) if cached else None,
        )

    # -- feedback -----------------------------------------------------------------------------

    def observe(self, result: PrepareResult, *, model: str, prompt_tokens: int | None) -> None:
        """Feed back the ``usage.prompt_tokens`` the provider reported for ``result``."""
        if prompt_tokens is None or prompt_tokens <= 0:
            return
        self.calibration.observe(
            model,
            estimated=result.report.raw_estimated_tokens,
            reported=prompt_tokens,
            namespace=result.namespace,
        )
        if result.compacted and result.checkpoint_id:
            self.store.update_reported(
                result.namespace, result.checkpoint_id, reported_tokens_after=prompt_tokens
            )


def _calibrated(exc: BudgetExceeded, ratio: float, limit: int, budget: Budget) -> BudgetExceeded:
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


def drive_sync(steps: Steps, perform: Callable[[SummarizeCall], SummaryOutcome]) -> PrepareResult:
    """Run ``steps`` to completion, performing each summary call with ``perform``."""
    try:
        call = next(steps)
        while True:
            call = steps.send(perform(call))
    except StopIteration as stop:
        result: PrepareResult = stop.value
        return result


async def drive_async(
    steps: Steps,
    perform: Callable[[SummarizeCall], Awaitable[SummaryOutcome]],
    *,
    offload: bool = False,
) -> PrepareResult:
    """``drive_sync`` for async callers.

    ``offload``: run each step of the engine (planning, counting, storing: CPU work) in a worker
    thread, so the event loop keeps serving other requests meanwhile.
    """
    outcome: SummaryOutcome | None = None
    while True:
        if offload:
            done, value = await asyncio.to_thread(_advance, steps, outcome)
        else:
            done, value = _advance(steps, outcome)
        if done:
            result: PrepareResult = value
            return result
        outcome = await perform(value)


def _advance(steps: Steps, outcome: SummaryOutcome | None) -> tuple[bool, Any]:
    """One step: ``(False, the next call)`` or ``(True, the result)``.

    A ``StopIteration`` cannot cross ``asyncio.to_thread``; it becomes a flag here.
    """
    try:
        return False, steps.send(outcome)  # type: ignore[arg-type]
    except StopIteration as stop:
        return True, stop.value
