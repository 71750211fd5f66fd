"""The context engine: from the raw messages an agent sends to the messages worth sending.

``ContextEngine.steps`` is a generator and performs no I/O of its own except through the store: it
*yields* a ``SummarizeCall`` when it needs the model to summarize and receives a
``SummaryOutcome`` back. ``drive_sync`` and ``drive_async`` are the two small drivers that perform
those calls, so sync and async callers share every decision.

The invariant it keeps: between two compactions, the messages it returns for a growing
conversation are append-only (each request's messages begin with the previous request's messages,
byte for byte), because every request is rewritten from the same stored checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .caches import ChainCache
from .checkpoints import Checkpoint
from .config import Budget, CompactionConfig, requested_output_tokens, resolve_budget
from .errors import BudgetExceeded, SummaryFailed
from .facts import Fact, extract_facts, merge_ledger, render_ledger, score_summary
from .messages import Message, message_digest, validate_messages
from .planner import Plan, ViewItem, plan_compaction, summary_request_end
from .prompts import render_prompt
from .results import (
    CompactionEvent,
    PrepareResult,
    SummarizeCall,
    SummaryOutcome,
    TokenReport,
    Trigger,
)
from .stores import Store, prefix_candidates
from .summary_request import (
    build_summary_request,
    cut_at_sentence,
    strict_instruction,
    summary_instruction,
    summary_message,
    summary_problem,
)
from .tokens import REPLY_PRIMING_TOKENS, Calibration, TokenCounter, make_counter

logger = logging.getLogger("summarizer")

Steps = Generator[SummarizeCall, SummaryOutcome, PrepareResult]
FRAME_TOKENS = 120
"""Allowance for the summary message's framing text and overhead."""


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


class ContextEngine:
    """Decides, for each request, what to send; keeps checkpoints in a ``Store``."""

    def __init__(
        self,
        config: CompactionConfig,
        store: Store,
        *,
        namespace: str = "",
        calibration: Calibration | None = None,
        on_compaction: Callable[[CompactionEvent], None] | None = None,
        memo_size: int = 256,
    ) -> None:
        self.config = config
        self.store = store
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

        ``namespace`` (default: the engine's own) scopes sessions and checkpoints, e.g. to one
        credential; nothing is ever found across namespaces.
        """
        namespace = self.namespace if namespace is None else namespace
        raw = list(messages) if not isinstance(messages, list) else messages
        validate_messages(raw[:2])  # the cache's key is made from these
        request = request or {}
        budget = resolve_budget(
            self.config, model, requested_output=requested_output_tokens(request)
        )
        counter = make_counter(
            model, tokenizer=self.config.tokenizer, encoding_overrides=self.config.encodings
        )
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
            calibrated_tokens=self.calibration.apply(model, raw_tokens),
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
            k = known.covered_count
            if k <= len(chain) and chain[k - 1] == known.covered_prefix_hash:
                start = k  # a newer checkpoint must cover more than this one
            else:
                known = None
        if memo is not None and memo.covers(chain, generation):
            # Nothing was written since these prefixes were looked up: only newer ones can match.
            start = max(start, memo.checked)
        candidates = prefix_candidates(chain, start)
        found = self.store.find_latest(namespace, candidates) if candidates else None
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
        def item(index: int | None) -> ViewItem:
            if index is None:
                assert checkpoint is not None and checkpoint.summary_message is not None
                message = checkpoint.summary_message
                digest = message_digest(message)
            elif checkpoint is not None and index in checkpoint.overrides:
                message = checkpoint.overrides[index]
                digest = message_digest(message)
            else:
                message, digest = raw[index], digests[index]
            return ViewItem(message, index, counter.count_message(message, digest=digest))

        layout = checkpoint.layout(len(raw)) if checkpoint is not None else range(len(raw))
        return [item(i) for i in layout]

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
        ratio = self.calibration.ratio(located.model)
        target = budget.target_tokens
        if trigger == "context_length_exceeded":
            target = target // 2
        plan = plan_compaction(
            located.view,
            fixed_tokens=located.fixed_tokens,
            summary_tokens=config.max_summary_tokens + config.ledger_max_tokens + FRAME_TOKENS,
            trigger_tokens=int(budget.trigger_tokens / ratio),
            target_tokens=int(target / ratio),
            keep_recent_tokens=config.keep_recent_tokens,
            pins=config.pin,
            count=located.counter.count_message,
            prompt_version=config.prompt_version,
        )
        previous = located.checkpoint
        ledger = self._ledger(located, plan)
        summary_text: str | None = None
        failure: str | None = None
        score: float | None = None
        outcome: SummaryOutcome | None = None
        if plan.needs_summary:
            summary_text, score, failure, outcome = yield from self._summarize(
                located, plan, ledger, trigger
            )
            if summary_text is None:
                if config.on_failure == "raise":
                    raise SummaryFailed(f"summarization failed: {failure}")
                # After context_length_exceeded the upstream has said it does not fit.
                if trigger == "threshold" and located.calibrated_tokens <= budget.usable:
                    logger.warning(
                        "summary failed (%s); request sent unchanged since it still fits", failure
                    )
                    return self.unchanged(located)
                summary_text = render_prompt(
                    "fallback_summary",
                    config.prompt_version,
                    reason=failure,
                    message_count=len(plan.span),
                    original_tokens=sum(located.view[i].tokens for i in plan.span),
                )
                score = None
        checkpoint = self._checkpoint(located, plan, summary_text, ledger, score, failure, trigger)
        new_view = self._view(
            located.messages,
            located.digests,
            checkpoint,
            located.counter,
        )
        tokens_after_raw = located.fixed_tokens + sum(item.tokens for item in new_view)
        tokens_after = self.calibration.apply(located.model, tokens_after_raw)
        if tokens_after > budget.usable:
            raise BudgetExceeded(
                required_tokens=tokens_after,
                budget_tokens=budget.usable,
                detail="the compacted request would not leave room for the reply",
            )
        checkpoint = checkpoint.model_copy(update={"tokens_after": tokens_after})
        self.store.put(checkpoint)
        count = checkpoint.covered_count
        memo = _Memo(checkpoint, count, checkpoint.covered_prefix_hash, self.store.generation())
        self._remember(located.namespace, located.session, memo)
        event = CompactionEvent(
            session=located.session,
            checkpoint_id=checkpoint.id,
            trigger=trigger,
            tokens_before=located.calibrated_tokens,
            tokens_after=tokens_after,
            summary=summary_text or "",
            ledger_size=len(ledger),
            score=score,
            latency_s=time.monotonic() - started,
            cut=(previous.covered_count if previous else 0, checkpoint.covered_count),
            kept_indices=list(checkpoint.kept_indices),
            degraded=list(plan.degraded),
            failure=failure,
            summary_prompt_tokens=outcome.prompt_tokens if outcome else None,
            summary_cached_tokens=outcome.cached_tokens if outcome else None,
        )
        logger.info(
            "compacted session %s: %d -> %d tokens, score %s, trigger %s%s",
            located.session,
            event.tokens_before,
            event.tokens_after,
            "n/a" if score is None else f"{score:.2f}",
            trigger,
            f", failure: {failure}" if failure else "",
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

    def _ledger(self, located: Located, plan: Plan) -> list[Fact]:
        previous = (
            [Fact.model_validate(f) for f in located.checkpoint.ledger]
            if (located.checkpoint)
            else []
        )
        raw_span = [
            located.messages[index]
            for i in plan.span
            if (index := located.view[i].raw_index) is not None
        ]
        return merge_ledger(
            previous,
            extract_facts(raw_span),
            max_tokens=self.config.ledger_max_tokens,
            count_tokens=located.counter.count_text,
        )

    def _summarize(
        self, located: Located, plan: Plan, ledger: list[Fact], trigger: Trigger
    ) -> Generator[
        SummarizeCall, SummaryOutcome, tuple[str | None, float | None, str | None, SummaryOutcome]
    ]:
        config = self.config
        counter = located.counter
        instruction = summary_instruction(config.prompt_version)
        # Room for the summary request's messages, in uncalibrated tokens, with a 2% margin.
        room = int(
            (
                located.budget.context_window
                - config.max_summary_tokens
                - counter.count_text(instruction)
                - 64
            )
            / (self.calibration.ratio(located.model) * 1.02)
        )
        if trigger == "context_length_exceeded":
            room = 0  # the window is smaller than configured: send only what the span needs
        end = summary_request_end(
            located.view, plan, fixed_tokens=located.fixed_tokens, room_tokens=room
        )
        if plan.span and end <= max(plan.span):
            logger.warning(
                "session %s: the span to summarize does not fit the window; the summary covers "
                "its first %d of %d messages, the fact ledger the rest",
                located.session,
                end,
                max(plan.span) + 1,
            )
        prefix = [item.message for item in located.view[:end]]
        cap_key = "max_tokens" if "max_tokens" in located.request else "max_completion_tokens"
        model = config.summary_model or located.model
        body = build_summary_request(
            prefix,
            model=model,
            tools=located.tools,
            max_summary_tokens=config.max_summary_tokens,
            instruction=instruction,
            cap_key=cap_key,
        )
        outcome = yield SummarizeCall(body=body)
        text, problem, score = self._judge(outcome, ledger, counter)
        if problem is None and score is not None and score >= config.min_summary_score:
            return text, score, None, outcome
        first = (text, problem, score, outcome)
        if outcome.error is None:
            missed = [f.text for f in score_summary(text or "", ledger).missed]
            strict = strict_instruction(
                config.prompt_version,
                max_words=int(config.max_summary_tokens * 0.6),
                required_facts=missed,
            )
            retry_body = dict(body)
            retry_body["messages"] = [*prefix, {"role": "user", "content": strict}]
            outcome = yield SummarizeCall(body=retry_body, attempt="strict")
            second = self._judge(outcome, ledger, counter)
            text, problem, score = second
            if problem is None and score is not None and score >= config.min_summary_score:
                return text, score, None, outcome
            # Keep the better of the two usable attempts.
            if first[0] and (not text or (first[2] or 0) > (score or 0)):
                text, problem, score, outcome = first
        if text and problem == "too_long":
            text = cut_at_sentence(text, config.max_summary_tokens, counter.count_text)
            return text, score_summary(text, ledger).recall, None, outcome
        if text and problem is None:
            return text, score, None, outcome  # usable, just under min_summary_score
        reason = outcome.error or problem or "unusable summary"
        return None, None, reason, outcome

    def _judge(
        self, outcome: SummaryOutcome, ledger: Sequence[Fact], counter: TokenCounter
    ) -> tuple[str | None, str | None, float | None]:
        if outcome.error is not None:
            return None, "error", None
        text = (outcome.text or "").strip()
        tokens = counter.count_text(text) if text else 0
        problem = summary_problem(
            text, outcome.finish_reason, max_tokens=self.config.max_summary_tokens, tokens=tokens
        )
        score = score_summary(text, ledger).recall if text else None
        return (text or None), problem, score

    def _checkpoint(
        self,
        located: Located,
        plan: Plan,
        summary_text: str | None,
        ledger: Sequence[Fact],
        score: float | None,
        failure: str | None,
        trigger: Trigger,
    ) -> Checkpoint:
        view = located.view
        previous = located.checkpoint
        kept = [_raw(view[i]) for i in plan.kept_before]
        tail = [_raw(view[i]) for i in plan.tail]
        covered = tail[0] if tail else len(located.messages)
        overrides: dict[int, Message] = {}
        if previous is not None:
            keep = set(kept) | set(range(covered, len(located.messages)))
            overrides.update({i: m for i, m in previous.overrides.items() if i in keep})
        for i, replacement in plan.overrides.items():
            overrides[_raw(view[i])] = replacement
        inserted: Message | None
        if summary_text is not None:
            inserted = summary_message(
                summary_text, render_ledger(ledger), self.config.prompt_version
            )
        else:
            inserted = previous.summary_message if previous is not None else None
        return Checkpoint(
            namespace=located.namespace,
            session=located.session,
            covered_count=covered,
            covered_prefix_hash=located.chain[covered - 1],
            kept_indices=kept,
            summary_message=inserted,
            overrides=overrides,
            summary=summary_text or (previous.summary if previous else ""),
            ledger=[f.model_dump() for f in ledger],
            score=score,
            tokens_before=located.calibrated_tokens,
            tokens_after=0,
            model=located.model,
            summary_model=self.config.summary_model or located.model,
            trigger=trigger,
            failure=failure,
            parent_id=previous.id if previous else None,
        )

    # -- feedback -----------------------------------------------------------------------------

    def observe(self, result: PrepareResult, *, model: str, prompt_tokens: int | None) -> None:
        """Feed back the ``usage.prompt_tokens`` the provider reported for ``result``."""
        if prompt_tokens is None or prompt_tokens <= 0:
            return
        self.calibration.observe(
            model, estimated=result.report.raw_estimated_tokens, reported=prompt_tokens
        )
        if result.compacted and result.checkpoint_id:
            self.store.update_reported(
                result.namespace, result.checkpoint_id, reported_tokens_after=prompt_tokens
            )


def _raw(item: ViewItem) -> int:
    """The raw index of a view item the planner keeps (kept items are never inserted ones)."""
    if item.raw_index is None:
        raise AssertionError("an inserted summary cannot be kept verbatim")
    return item.raw_index


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
