"""The context engine: from the raw messages an agent sends to the messages worth sending.

Pure: its work is generators that *yield* what they need done (``effects``: look a checkpoint up,
save one, ask the model for a summary) and receive the answers; the drivers
(``context_summarizer.library.drive``) run them with performers the edges give. So the library, the
proxy and the evaluator share every decision, and no store, file or network call happens here.

- ``locate(turn)``: the turn's view under the checkpoint it extends, and its size;
- ``refresh(located)``: the same turn after waiting (for a lock or a lease), with whatever
  checkpoint another thread or process wrote meanwhile;
- ``steps(located)``: a compaction (with ``policy="hybrid"``, old tool outputs masked first, and
  a summary only when that is not enough; with ``"masking"``, the same masking, then the fact
  ledger alone where it is not enough; with ``"ledger-only"``, the fact ledger alone: these two
  never ask a model); ``observe(result, ...)``: the usage, calibrated.

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

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import replace

from .budgets import turn_budget
from .caches import ChainCache
from .compaction import commit_draft, draft_compaction
from .config import CompactionConfig
from .effects import Effects, FindCheckpoint, Found, RecordUsage, Turn
from .located import Draft, Located, SeenView, SessionMemo, extends, view_of
from .messages import Message, validate_messages
from .prompt_set import PromptSet
from .recall_tool import chat_definition
from .results import CompactionEvent, PrepareResult, Trigger
from .summaries import RECALL_INDEX_TOKENS
from .tokens import REPLY_PRIMING_TOKENS, Calibration, TokenCounter

logger = logging.getLogger("summarizer")


RECALL_MAX_SHARE = 0.03
"""Recall is on for a turn only when its tool's definition and a summary's index take at most
this share of the usable window (about 11,000 tokens or more; in an 8,000-token window they
would take a seventh of the summary's room)."""


class ContextEngine:
    """Decides, for each turn, what to send (see the module docstring)."""

    def __init__(
        self,
        config: CompactionConfig,
        *,
        prompts: PromptSet,
        counter_for: Callable[[str], TokenCounter],
        calibration: Calibration | None = None,
        on_compaction: Callable[[CompactionEvent], None] | None = None,
        memo_size: int = 256,
    ) -> None:
        self.config = config
        self.prompts = prompts
        self.counter_for = counter_for
        self.calibration = calibration or Calibration()
        self.on_compaction = on_compaction
        self._chains = ChainCache()
        # The latest checkpoint per (namespace, session): saves a store lookup per request. Bounded
        # like the chain cache (256 conversations): a conversation evicted from that is rehashed
        # in full anyway, and the former 4,096 checkpoints (~18 KiB each) held up to 72 MiB.
        self._latest: OrderedDict[tuple[str, str], SessionMemo] = OrderedDict()
        self._latest_lock = threading.Lock()
        self._memo_size = memo_size
        # The recall tool's counted definition per (its name, the model): counting it anew
        # cost about 17 us a request. Model names come from clients: bounded like the memos.
        self._recall_tokens: dict[tuple[str, str], int] = {}

    # -- locating -----------------------------------------------------------------------------

    def locate(self, turn: Turn) -> Effects[Located]:
        """Validate the turn's messages, find the checkpoint they extend and measure the view.

        Nothing is ever found across namespaces (``turn.namespace``, e.g. one credential's).
        """
        raw = list(turn.messages) if not isinstance(turn.messages, list) else turn.messages
        validate_messages(raw[:2])  # the cache's key is made from these
        budget = turn_budget(self.config, turn.model, turn.request, turn.compact_threshold)
        counter = self.counter_for(turn.model)
        # Only what is new since this conversation was last seen is validated and hashed.
        digests, chain = self._chains.digests_and_chain(
            raw, check=lambda start: validate_messages(raw, start=start)
        )
        session = turn.session or _derive_session(raw, chain)
        with self._latest_lock:
            memo = self._latest.get((turn.namespace, session))
        known = memo.checkpoint if memo is not None else None
        if known is not None and not extends(chain, known):
            known = None  # another branch of the session (a fork) was seen last
        start = known.basis_count if known is not None else 0  # a newer one has a longer basis
        checked = memo is not None and memo.covers(chain)
        found = Found(None, memo.generation if memo is not None else None)
        if start < len(chain):
            found = yield FindCheckpoint(
                turn.namespace,
                chain,
                start,
                # Nothing written since these prefixes were looked up: only newer ones can match.
                unchanged_since=memo.generation if checked and memo is not None else None,
                fresh_start=max(start, memo.checked) if checked and memo is not None else None,
            )
        best = known
        if found.checkpoint is not None and extends(chain, found.checkpoint):
            best = found.checkpoint  # a store must never return another conversation's
        seen = memo.view if memo is not None else None
        view = seen.extended(raw, digests, best, counter) if seen is not None else None
        if seen is not None and view is not None:
            # The seen view's items begin it: only the new ones are added up.
            counted = seen.tokens + sum(item.tokens for item in view[len(seen.items) :])
        else:
            view = view_of(raw, digests, best, counter)
            counted = sum(item.tokens for item in view)
        if chain:
            seen = SeenView(list(raw), best, counter, view, counted)
            memo = SessionMemo(best, len(chain), chain[-1], found.generation, seen)
            self.remember(turn.namespace, session, memo)
        fixed = counter.count_tools(turn.tools) + REPLY_PRIMING_TOKENS
        recall, recall_tokens = turn.recall, 0
        if recall is not None:
            recall_tokens = self._recall_tool_tokens(recall, turn.model, counter)
            if recall_tokens + RECALL_INDEX_TOKENS > RECALL_MAX_SHARE * budget.usable:
                recall, recall_tokens = None, 0  # a small window: recall would crowd it
            elif best is not None and best.replaced():  # offered: a compaction stands
                fixed += recall_tokens
        raw_tokens = fixed + counted
        calibrated = self.calibration.apply(turn.model, raw_tokens, turn.namespace)
        if turn.compact_now:
            budget = budget.lowered_to(max(1, calibrated - 1))
        return Located(
            session=session,
            namespace=turn.namespace,
            messages=raw,
            model=turn.model,
            tools=list(turn.tools) if turn.tools else None,
            request=turn.request,
            budget=budget,
            counter=counter,
            checkpoint=best,
            digests=digests,
            chain=chain,
            view=view,
            fixed_tokens=fixed,
            raw_tokens=raw_tokens,
            calibrated_tokens=calibrated,
            generation=found.generation,
            recall=recall,
            recall_tokens=recall_tokens,
            secrets=turn.secrets,
            instructions=turn.instructions,
        )

    def _recall_tool_tokens(self, name: str, model: str, counter: TokenCounter) -> int:
        """The recall tool's definition, named ``name``, counted for ``model``."""
        key = (name, model)
        tokens = self._recall_tokens.get(key)
        if tokens is None:
            tokens = counter.count_tools([chat_definition(name, self.prompts)])
            if len(self._recall_tokens) >= self._memo_size:
                self._recall_tokens.clear()
            self._recall_tokens[key] = tokens
        return tokens

    def refresh(self, located: Located) -> Effects[Located]:
        """``located`` after a wait: with the checkpoint another thread or process wrote for
        it meanwhile, if any (nothing is looked up when the store says nothing was written)."""
        start = located.checkpoint.basis_count if located.checkpoint is not None else 0
        if start >= len(located.chain):
            return located
        found: Found = yield FindCheckpoint(
            located.namespace,
            located.chain,
            start,
            unchanged_since=located.generation,
            fresh_start=len(located.chain),
        )
        checkpoint = found.checkpoint
        if checkpoint is None or not extends(located.chain, checkpoint):
            return replace(located, generation=found.generation)
        memo = SessionMemo(checkpoint, len(located.chain), located.chain[-1], found.generation)
        self.remember(located.namespace, located.session, memo)
        view, raw_tokens = located.view_under(checkpoint)
        calibrated = self.calibration.apply(located.model, raw_tokens, located.namespace)
        return replace(
            located,
            checkpoint=checkpoint,
            view=view,
            raw_tokens=raw_tokens,
            calibrated_tokens=calibrated,
            generation=found.generation,
        )

    def remember(self, namespace: str, session: str, memo: SessionMemo) -> None:
        """Keep ``memo`` as what the engine last learned of the session."""
        with self._latest_lock:
            self._latest[(namespace, session)] = memo
            self._latest.move_to_end((namespace, session))
            while len(self._latest) > self._memo_size:
                self._latest.popitem(last=False)

    # -- deciding -----------------------------------------------------------------------------

    def needs_compaction(self, located: Located) -> bool:
        """Whether the located request is over the trigger."""
        return located.calibrated_tokens > located.budget.trigger_tokens

    def worth_drafting(self, located: Located) -> bool:
        """Whether a compaction of the located request should be drafted ahead of time: it is
        over the prepare threshold and still fits the window as it is."""
        prepare = located.budget.prepare_tokens
        return prepare is not None and prepare < located.calibrated_tokens <= (
            located.budget.usable
        )

    def unchanged(self, located: Located) -> PrepareResult:
        """The result for a request sent as its view, with no new compaction."""
        return PrepareResult(
            messages=[item.message for item in located.view],
            compacted=False,
            rewritten=located.checkpoint is not None,
            session=located.session,
            namespace=located.namespace,
            checkpoint_id=located.checkpoint_id,
            report=located.report(located.raw_tokens, located.calibrated_tokens),
            replaced=[] if located.checkpoint is None else located.checkpoint.replaced(),
        )

    def steps(self, located: Located, *, trigger: Trigger = "threshold") -> Effects[PrepareResult]:
        """Compact ``located`` (under ``hybrid`` and ``masking``, masking first: see the module
        docstring): yields summary calls (none under ``masking`` and ``ledger-only``) and the
        checkpoint to save, returns what to send."""
        started = time.monotonic()
        drafted = yield from draft_compaction(self, located, trigger=trigger, started=started)
        if isinstance(drafted, PrepareResult):
            return drafted
        return (yield from commit_draft(self, located, drafted, trigger=trigger, started=started))

    def ahead(self, located: Located, *, growth: int = 0) -> Effects[Draft | None]:
        """A compaction of ``located`` drafted ahead of time (the request is over the prepare
        threshold): summaries written, checkpoint built, nothing saved. Its target is lowered by
        the growth still to come before it is adopted (the room left before the trigger, or
        ``growth``, what the session's conversation last grew between a draft and its adoption,
        if more), down to half the usual target, so that once adopted the request lands near
        the usual target. None when there is nothing to compact or the summaries failed."""
        budget = located.budget
        growth = max(0, budget.trigger_tokens - located.calibrated_tokens, growth)
        target = max(budget.target_tokens // 2, budget.target_tokens - growth)
        drafted = yield from draft_compaction(
            self,
            located,
            trigger="threshold",
            started=time.monotonic(),
            target=target,
            drafting=True,
        )
        return drafted if isinstance(drafted, Draft) else None

    def adopt(
        self, located: Located, draft: Draft, *, waited_s: float = 0.0
    ) -> Effects[PrepareResult | None]:
        """Save and use ``draft`` for ``located`` (a later request of its conversation); None,
        with nothing saved, when the draft is stale (the conversation no longer begins with the
        one it was drafted from, or another checkpoint was written for it since) or when the
        rewrite would not fit the window."""
        checkpoint = draft.checkpoint
        if not extends(located.chain, checkpoint) or located.checkpoint_id != draft.parent_id:
            return None
        view, raw_tokens = located.view_under(checkpoint)
        calibrated = self.calibration.apply(located.model, raw_tokens, located.namespace)
        if calibrated > located.budget.usable:
            return None
        checkpoint = checkpoint.model_copy(
            update={"tokens_before": located.calibrated_tokens, "tokens_after": calibrated}
        )
        adopted = replace(draft, checkpoint=checkpoint, view=view, raw_tokens=raw_tokens)
        started = time.monotonic() - waited_s
        return (
            yield from commit_draft(
                self, located, adopted, trigger="threshold", started=started, ahead=True
            )
        )

    # -- feedback -----------------------------------------------------------------------------

    def observe(
        self, result: PrepareResult, *, model: str, prompt_tokens: int | None
    ) -> RecordUsage | None:
        """Calibrate with the ``usage.prompt_tokens`` the provider reported for ``result``; the
        store write to perform (the count of a compacted request), if any."""
        if prompt_tokens is None or prompt_tokens <= 0:
            return None
        self.calibration.observe(
            model,
            estimated=result.report.raw_estimated_tokens,
            reported=prompt_tokens,
            namespace=result.namespace,
        )
        if result.compacted and result.checkpoint_id:
            return RecordUsage(result.namespace, result.checkpoint_id, prompt_tokens)
        return None


def _derive_session(raw: list[Message], chain: list[str]) -> str:
    for index, message in enumerate(raw):
        if message.get("role") == "user":
            return "auto-" + chain[index][:20]
    return "auto-" + chain[0][:20]
