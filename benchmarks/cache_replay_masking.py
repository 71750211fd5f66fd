"""The observation-masking replays, rolling and stepped (see ``benchmarks.cache_replay``).

Tool outputs older than the last M assistant turns become ``mechanical.mask_tool_outputs``'s
placeholder; where that is not enough, ``mechanical.drop_oldest_units`` drops the oldest units.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet

from context_summarizer.core.messages import Message
from context_summarizer.core.tokens import REPLY_PRIMING_TOKENS, TokenCounter
from context_summarizer.evaluation.mechanical import (
    drop_oldest_units,
    largest_fitting,
    mask_tool_outputs,
)

from .cache_replay_session import (
    MASK_KEEP_TURNS,
    MASKING_ROLLING,
    MASKING_STEPPED,
    Replay,
    SentRequest,
    Session,
    output_tokens,
    replay_budget,
    replay_config,
    replay_counter,
    reply_indices,
)


class _Masker:
    """Per-message token counts and masked copies of one session, computed once each.

    A context is described by ``active`` (the raw indices not dropped, in order), ``cut`` (tool
    outputs before this raw index are masked, where masking makes them smaller) and ``fixed``
    (raw indices masked for good, by an earlier step).
    """

    def __init__(self, session: Session, counter: TokenCounter, version: str) -> None:
        self.session = session
        self.counter = counter
        raw = session.messages
        self.tokens = [counter.count_message(m) for m in raw]
        self.copies = [
            mask_tool_outputs([m], keep_turns=0, counter=counter, version=version)[0] for m in raw
        ]
        self.masked_tokens = [counter.count_message(m) for m in self.copies]
        self.maskable = [c is not m for c, m in zip(self.copies, raw, strict=True)]
        self.assistant = [m.get("role") == "assistant" for m in raw]
        self.fixed_tokens = counter.count_tools(session.tools) + REPLY_PRIMING_TOKENS

    def cutoff(self, active: Sequence[int], end: int, keep_turns: int) -> int:
        """The raw index before which tool outputs are masked when the last ``keep_turns``
        assistant turns of ``active`` keep theirs (``mask_tool_outputs``'s rule)."""
        turns = [j for j in active if self.assistant[j]]
        if keep_turns <= 0:
            return end
        if keep_turns > len(turns):
            return 0
        return turns[-keep_turns]

    def masked(self, j: int, cut: int, fixed: AbstractSet[int]) -> bool:
        """Whether raw message ``j`` is sent masked."""
        return j in fixed or (j < cut and self.maskable[j])

    def size(self, active: Sequence[int], cut: int, fixed: AbstractSet[int]) -> int:
        """Request tokens of the context."""
        total = self.fixed_tokens
        for j in active:
            total += self.masked_tokens[j] if self.masked(j, cut, fixed) else self.tokens[j]
        return total

    def messages(self, active: Sequence[int], cut: int, fixed: AbstractSet[int]) -> list[Message]:
        """The context's messages: raw ones, and masked copies (the same object every time)."""
        raw = self.session.messages
        return [self.copies[j] if self.masked(j, cut, fixed) else raw[j] for j in active]

    def largest_keep(
        self, active: Sequence[int], end: int, fixed: AbstractSet[int], *, most: int, limit: int
    ) -> int | None:
        """The most assistant turns (up to ``most``) that can keep their tool outputs with the
        request within ``limit`` tokens, or None when even 0 does not fit. Bisection: the size
        grows with the number of turns kept."""

        def fits(keep: int) -> bool:
            return self.size(active, self.cutoff(active, end, keep), fixed) <= limit

        return largest_fitting(most, fits)

    def drop(
        self, active: Sequence[int], cut: int, fixed: AbstractSet[int], target: int
    ) -> set[int]:
        """Raw indices of the oldest units ``drop_oldest_units`` drops to reach ``target``."""
        context = self.messages(active, cut, fixed)
        kept, _ = drop_oldest_units(
            context, budget_tokens=target, counter=self.counter, tools=self.session.tools
        )
        kept_ids = {id(m) for m in kept}
        return {active[k] for k, m in enumerate(context) if id(m) not in kept_ids}

    def request(self, i: int, messages: list[Message], *, rewritten: bool) -> SentRequest:
        """The agent request answered by raw message ``i``, breakpoint at its end."""
        reply = output_tokens(self.counter, self.session.messages[i])
        return SentRequest(
            "agent", messages, self.session.tools, reply, (len(messages),), rewritten=rewritten
        )


def replay_masking_rolling(
    session: Session, *, window: int, keep_turns: int = MASK_KEEP_TURNS
) -> Replay:
    """``masking (M=10, rolling)``: re-masked every turn; see ``benchmarks.cache_replay``."""
    budget = replay_budget(window)
    masker = _Masker(session, replay_counter(), replay_config(window).prompt_version)
    replay = Replay(MASKING_ROLLING)
    dropped: set[int] = set()
    none: frozenset[int] = frozenset()
    for i in reply_indices(session.messages):
        active = [j for j in range(i) if j not in dropped]
        keep = masker.largest_keep(active, i, none, most=keep_turns, limit=budget.trigger_tokens)
        rewritten = keep is None
        if keep is None:
            keep = 0
            dropped |= masker.drop(active, i, none, budget.target_tokens)
            active = [j for j in active if j not in dropped]
            replay.compactions += 1
        if keep < keep_turns:
            replay.narrowed += 1
        cut = masker.cutoff(active, i, keep)
        messages = masker.messages(active, cut, none)
        replay.requests.append(masker.request(i, messages, rewritten=rewritten))
    return replay


def replay_masking_stepped(session: Session, *, window: int) -> Replay:
    """``masking (stepped)``: masks in one step at the trigger; see ``benchmarks.cache_replay``."""
    budget = replay_budget(window)
    masker = _Masker(session, replay_counter(), replay_config(window).prompt_version)
    replay = Replay(MASKING_STEPPED)
    dropped: set[int] = set()
    masked: set[int] = set()
    for i in reply_indices(session.messages):
        active = [j for j in range(i) if j not in dropped]
        rewritten = masker.size(active, 0, masked) > budget.trigger_tokens
        if rewritten:
            replay.compactions += 1
            turns = sum(1 for j in active if masker.assistant[j])
            keep = masker.largest_keep(active, i, masked, most=turns, limit=budget.target_tokens)
            cut = masker.cutoff(active, i, 0 if keep is None else keep)
            masked |= {j for j in active if masker.masked(j, cut, masked)}
            if keep is None:
                dropped |= masker.drop(active, 0, masked, budget.target_tokens)
                active = [j for j in active if j not in dropped]
        messages = masker.messages(active, 0, masked)
        replay.requests.append(masker.request(i, messages, rewritten=rewritten))
    return replay
