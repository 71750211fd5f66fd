"""Replaying a recorded agent session under a compaction strategy: the requests it would send.

A *session* is a complete message list (system prompt, task, then assistant turns with their tool
results). It is replayed as the agent lived it: at each assistant message ``i`` the agent sends a
request whose context is what the strategy keeps of ``messages[:i]``, and message ``i`` is the
model's reply (its tokens are the request's output tokens). A strategy's replay is the list of
every request it sends, agent requests and summary requests alike, in order; pricing them is
``benchmarks.cache_accounting``'s job. Everything here is deterministic and offline.

Strategies (all compact at the same trigger to the same target, the project's
``CompactionConfig`` defaults over the replay window):

- ``self-summary``: production's engine (``ContextEngine``: locate, planner, summary request,
  checkpoint, rewritten view), with a stand-in model whose summary is a fixed ``S`` tokens.
- ``from-scratch``: the same engine run, so the same cut, kept tail and compacted context, but
  each compaction's summary request is the evaluator's LangChain-style one
  (``engine_strategies.from_scratch_request``) over the span the engine replaced, with the same
  ``S`` output tokens. The two replays differ only in their summary requests.
- ``masking (M=10, rolling)``: observation masking as in "The Complexity Trap" (Lindenbauer et al.,
  2025), re-applied every turn: tool outputs older than the last 10 assistant turns become the
  placeholder of ``prompts/<v>/masked_output.md`` (``mechanical.mask_tool_outputs``). Where that
  still exceeds the trigger, fewer turns keep their outputs (the largest M that fits); where even
  M = 0 does not fit, the oldest units are dropped down to the target, for good.
- ``masking (stepped)``: masking as a compaction: nothing changes until the trigger, then in one
  step the outputs older than the last M turns are masked, M the largest that lands under the
  target (the evaluator's ``masking`` rule), then the oldest units are dropped if M = 0 is not
  enough; append-only until the next trigger.
- ``no compaction``: every request is the raw ``messages[:i]``.

Each request also records where an Anthropic-style client puts its explicit cache breakpoints:
at the end of every agent request and right after the summary message of a compacted context; at
the end of a self-summary request (it must carry one to read the cached conversation); none on a
from-scratch summary request (nothing will ever read its prompt back, so a breakpoint would only
turn its input into 1.25x cache writes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from summarizer.core.config import Budget, CompactionConfig, resolve_budget
from summarizer.core.effects import Turn
from summarizer.core.located import Located
from summarizer.core.messages import Message
from summarizer.core.planner import ViewItem
from summarizer.core.results import CompactionEvent, SummarizeCall, SummaryOutcome
from summarizer.core.tokens import (
    REPLY_PRIMING_TOKENS,
    TOKENS_PER_MESSAGE,
    TokenCounter,
)
from summarizer.evaluation.dataset import load_dataset
from summarizer.evaluation.engine_strategies import from_scratch_request
from summarizer.evaluation.mechanical import (
    drop_oldest_units,
    largest_fitting,
    mask_tool_outputs,
)
from summarizer.library.drive import drive_sync
from summarizer.library.effects import Performer
from summarizer.library.engines import engine_for
from summarizer.loaders.tokenizers import load_encoding, make_counter
from summarizer.stores import MemoryStore
from summarizer.testing import ScriptedToolAgent
from summarizer.testing.scenario import CodingSession

REPLAY_MODEL = "gpt-5"
"""The model the replays name (it selects the engine's registry entry; the window is set)."""
TOKENIZER = "o200k_base"
"""Every token is counted with o200k_base, for both priced models (Claude's own tokenizer is
not public; the comparison between strategies does not depend on it)."""
SUMMARY_TOKENS = 1_500
"""``S``: the output tokens of every summary, whichever strategy asks for it."""
MASK_KEEP_TURNS = 10
"""M of the rolling masking variant: the last 10 assistant turns keep their tool outputs."""

SELF_SUMMARY = "self-summary"
"""Production's compaction: the live conversation summarizes itself."""
FROM_SCRATCH = "from-scratch"
"""A separate summarizer prompt over the replaced span as a transcript."""
MASKING_ROLLING = "masking (M=10, rolling)"
"""Observation masking re-applied every turn (the literature's version)."""
MASKING_STEPPED = "masking (stepped)"
"""Observation masking applied in one step at the trigger."""
NO_COMPACTION = "no compaction"
"""Every request is the whole history."""
STRATEGIES = (SELF_SUMMARY, FROM_SCRATCH, MASKING_ROLLING, MASKING_STEPPED, NO_COMPACTION)
"""Every replayed strategy, in report order."""

Purpose = Literal["agent", "summary"]
"""What a request is for: the agent's next step, or a summary."""


@dataclass(frozen=True)
class Session:
    """A complete recorded agent session."""

    name: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class SentRequest:
    """One request a replay sends, as the provider would see it."""

    purpose: Purpose
    messages: Sequence[Message]
    tools: Sequence[Mapping[str, Any]] | None
    output_tokens: int
    breakpoints: tuple[int, ...]
    """Message counts after which an explicit (Anthropic-style) cache breakpoint sits."""
    rewritten: bool = False
    """The first agent request after a compaction (its context was just rewritten)."""


@dataclass
class Replay:
    """Everything one strategy sends over one session."""

    strategy: str
    requests: list[SentRequest] = field(default_factory=list)
    compactions: int = 0
    """Context rewrites at a trigger (summaries, masking steps, unit drops)."""
    narrowed: int = 0
    """Rolling masking only: requests where fewer than M turns kept their tool outputs, so that
    the request stayed under the trigger."""


def reply_indices(messages: Sequence[Message]) -> list[int]:
    """The assistant messages that answer a request (every one but a leading one)."""
    return [i for i, m in enumerate(messages) if i > 0 and m.get("role") == "assistant"]


def output_tokens(counter: TokenCounter, reply: Message) -> int:
    """Completion tokens of a reply: its counted tokens without the per-message framing."""
    return max(1, counter.count_message(reply) - TOKENS_PER_MESSAGE)


def replay_counter() -> TokenCounter:
    """The shared o200k_base counter every replay and every price uses."""
    return make_counter(REPLAY_MODEL, tokenizer=TOKENIZER)


def replay_config(window: int) -> CompactionConfig:
    """The project's default compaction settings over a ``window``-token window."""
    return CompactionConfig(context_window=window, tokenizer=TOKENIZER)


def replay_budget(window: int) -> Budget:
    """The trigger and target every strategy compacts at in a ``window``-token window."""
    return resolve_budget(replay_config(window), REPLAY_MODEL)


# --- sessions -----------------------------------------------------------------------------------


def dataset_sessions(path: Path, *, limit: int | None = None) -> list[Session]:
    """The cases of a dataset file as sessions (the first ``limit`` when given)."""
    cases, errors = load_dataset([path])
    if errors:
        raise ValueError(f"{path}: {errors[0]}")
    chosen = cases if limit is None else cases[:limit]
    return [Session(case.id, case.messages, case.tools) for case in chosen]


def coding_session(turns: int, seed: int) -> Session:
    """A ``CodingSession`` played out without a model: its scripted replies and tool outputs."""
    script = CodingSession(turns=turns, seed=seed)
    messages: list[Message] = [script.system, script.task]
    for turn, reply in enumerate(ScriptedToolAgent(script.steps).steps):
        if not reply.tool_calls:
            messages.append({"role": "assistant", "content": reply.content or ""})
            break
        calls: list[dict[str, Any]] = [
            {
                "id": f"call_{turn}_{k}",
                "type": "function",
                "function": {"name": spec.name, "arguments": spec.arguments_json()},
            }
            for k, spec in enumerate(reply.tool_calls)
        ]
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call in calls:
            function = call["function"]
            output = script.execute(turn, function["name"], function["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": output})
    return Session(f"coding-{turns}t-seed{seed}", messages, script.tools)


# --- self-summary and from-scratch: the engine ----------------------------------------------------


def stand_in_summary(tokens: int, label: str) -> str:
    """A deterministic text of ``tokens`` o200k_base tokens standing in for a model's summary."""
    encoding = load_encoding(TOKENIZER)
    lines: list[str] = []
    ids: list[int] = []
    j = 0
    while len(ids) < tokens:
        lines.append(f"- {label}, note {j}: state {j * 37 % 1009} kept, next step {j + 1}.")
        j += 1
        if j % 32 == 0 or j * 12 >= tokens:
            ids = encoding.encode_ordinary("\n".join(lines))
    return encoding.decode(ids[:tokens])


class _StandInModel:
    """Answers the engine's summary calls with a stand-in summary of ``tokens`` tokens (or the
    request's cap, when that is lower, as a model that keeps to it would), and keeps the calls
    with what each wrote."""

    def __init__(self, session: str, tokens: int) -> None:
        self.session = session
        self.tokens = tokens
        self.calls: list[SummarizeCall] = []
        self.written: list[int] = []

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        self.calls.append(call)
        cap = call.body.get("max_completion_tokens") or call.body.get("max_tokens")
        tokens = min(self.tokens, cap) if isinstance(cap, int) else self.tokens
        self.written.append(tokens)
        text = stand_in_summary(tokens, f"summary {len(self.calls)} of {self.session}")
        return SummaryOutcome(text=text, finish_reason="stop", completion_tokens=tokens)


def replaced_span(located: Located, event: CompactionEvent) -> list[Message]:
    """The view messages a compaction replaced: those inside the raw ranges its new summaries
    stand for (an earlier summary folded into a new one among them)."""

    def inside(item: ViewItem) -> bool:
        start = item.raw_range[0]
        return any(low <= start < high for low, high in event.replaced)

    return [item.message for item in located.view if inside(item)]


def agent_breakpoints(messages: Sequence[Message], raw_ids: set[int]) -> tuple[int, ...]:
    """Explicit breakpoints of an agent request: after the summary message (a user message the
    agent never sent), and at the end."""
    points = {len(messages)}
    for index, message in enumerate(messages):
        if message.get("role") == "user" and id(message) not in raw_ids:
            points.add(index + 1)
    return tuple(sorted(points))


def replay_engine(
    session: Session, *, window: int, summary_tokens: int = SUMMARY_TOKENS
) -> tuple[Replay, Replay]:
    """The ``self-summary`` and ``from-scratch`` replays of ``session`` (one engine run).

    The engine is driven as ``ContextManager.prepare`` drives it: locate, compact when over the
    trigger, else send the view unchanged.
    """
    config = replay_config(window)
    engine = engine_for(config)
    counter = replay_counter()
    model = _StandInModel(session.name, summary_tokens)
    perform = Performer(MemoryStore(), model)
    raw_ids = {id(m) for m in session.messages}
    own = Replay(SELF_SUMMARY)
    scratch = Replay(FROM_SCRATCH)
    for i in reply_indices(session.messages):
        turn = Turn(session.messages[:i], REPLAY_MODEL, tools=session.tools, session=session.name)
        located = drive_sync(engine.locate(turn), perform)
        if engine.needs_compaction(located):
            first_call = len(model.calls)
            result = drive_sync(engine.steps(located), perform)
            own.compactions += 1
            scratch.compactions += 1
            calls = model.calls[first_call:]
            for call, written in zip(calls, model.written[first_call:], strict=True):
                sent = call.body["messages"]
                own.requests.append(
                    SentRequest("summary", sent, call.body.get("tools"), written, (len(sent),))
                )
            if calls and result.event is not None:
                body = from_scratch_request(
                    replaced_span(located, result.event),
                    model=REPLAY_MODEL,
                    max_summary_tokens=config.max_summary_tokens,
                    version=config.prompt_version,
                )
                scratch.requests.append(
                    SentRequest("summary", body["messages"], None, summary_tokens, ())
                )
        else:
            result = engine.unchanged(located)
        messages = list(result.messages)
        request = SentRequest(
            "agent",
            messages,
            session.tools,
            output_tokens(counter, session.messages[i]),
            agent_breakpoints(messages, raw_ids),
            rewritten=result.compacted,
        )
        own.requests.append(request)
        scratch.requests.append(request)
    return own, scratch


# --- masking ------------------------------------------------------------------------------------


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
    """``masking (M=10, rolling)``: re-masked every turn; see the module docstring."""
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
    """``masking (stepped)``: masks in one step at the trigger; see the module docstring."""
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


# --- no compaction --------------------------------------------------------------------------------


def replay_raw(session: Session) -> Replay:
    """``no compaction``: every request is the whole history so far."""
    counter = replay_counter()
    replay = Replay(NO_COMPACTION)
    for i in reply_indices(session.messages):
        replay.requests.append(
            SentRequest(
                "agent",
                session.messages[:i],
                session.tools,
                output_tokens(counter, session.messages[i]),
                (i,),
            )
        )
    return replay


def replay_all(session: Session, *, window: int) -> dict[str, Replay]:
    """Every strategy's replay of ``session`` in a ``window``-token window, by strategy name."""
    own, scratch = replay_engine(session, window=window)
    replays = [
        own,
        scratch,
        replay_masking_rolling(session, window=window),
        replay_masking_stepped(session, window=window),
        replay_raw(session),
    ]
    return {replay.strategy: replay for replay in replays}


def session_tokens(session: Session) -> int:
    """Tokens of the whole session as one request (its raw size)."""
    counter = replay_counter()
    return counter.count_messages(session.messages) + counter.count_tools(session.tools)
