"""The ``self-summary`` and ``from-scratch`` replays: production's engine over a session.

One engine run serves both (see ``benchmarks.cache_replay``): the same cut, kept tail and
compacted context; only the summary requests differ. A stand-in model answers the engine's
summary calls with a deterministic text of a fixed length.
"""

from __future__ import annotations

from collections.abc import Sequence

from context_summarizer.core.effects import Turn
from context_summarizer.core.located import Located
from context_summarizer.core.messages import Message
from context_summarizer.core.planner import ViewItem
from context_summarizer.core.results import CompactionEvent, SummarizeCall, SummaryOutcome
from context_summarizer.evaluation.engine_strategies import from_scratch_request
from context_summarizer.library.drive import drive_sync
from context_summarizer.library.effects import Performer
from context_summarizer.library.engines import engine_for
from context_summarizer.loaders.tokenizers import load_encoding
from context_summarizer.stores import MemoryStore

from .cache_replay_session import (
    FROM_SCRATCH,
    REPLAY_MODEL,
    SELF_SUMMARY,
    SUMMARY_TOKENS,
    TOKENIZER,
    Replay,
    SentRequest,
    Session,
    output_tokens,
    replay_config,
    replay_counter,
    reply_indices,
)


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
