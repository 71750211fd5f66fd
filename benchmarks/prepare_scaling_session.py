"""The session the prepare-scaling benchmark drives, and the time of every ``prepare()`` in it.

``drive`` plays a scripted ``CodingSession`` through ``ContextManager`` as a hand-written agent
loop does (``prepare()``, send, append the reply and tool results, ``observe()``), with
``summary_responder`` as the in-process summary model, and returns one ``Turn`` per call.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from context_summarizer.core.messages import Message
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.core.tokens import TiktokenCounter, encoding_for_model
from context_summarizer.library.manager import ContextManager
from context_summarizer.loaders.tokenizers import load_encoding
from context_summarizer.testing.scenario import CodingSession
from context_summarizer.testing.summaries import summary_responder

MODEL = "gpt-4o"
"""The model the session is prepared for: its registry window, its encoding."""

_THOUGHTS = (
    "Reading {target} to see how the discount reaches the total.",
    "Checking {target} for where rounding happens.",
    "Looking at {target} again; the order of discount and tax matters here.",
    "Let me confirm what {target} does with a missing discount code.",
    "{target} should tell whether the tax is computed on the discounted amount.",
    "Comparing {target} with the failing assertion.",
)


@dataclass(frozen=True)
class Turn:
    """One agent turn: how long ``prepare()`` took and the sizes around it."""

    index: int
    """Turn number, from 0."""
    seconds: float
    """Wall time of the ``prepare()`` call."""
    summary_seconds: float
    """Of which, time inside the in-process summary stand-in (0 on non-compaction turns)."""
    compacted: bool
    """Whether this ``prepare()`` performed a compaction."""
    raw_tokens: int
    """Tokens of the raw history passed to ``prepare()`` (messages only)."""
    sent_tokens: int
    """The library's estimate of the request it returned (messages, tools, priming)."""
    raw_messages: int
    """Messages in the raw history passed to ``prepare()``."""


def _tool_calls(step: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``(name, arguments)`` pairs of one ``CodingSession`` step (one call or parallel)."""
    if isinstance(step, tuple):
        return [(str(step[0]), step[1])]
    if isinstance(step, list):
        return [(str(name), arguments) for name, arguments in step]
    raise TypeError(f"not a tool-call step: {step!r}")


def assistant_turn(session: CodingSession, turn: int, step: Any) -> list[Message]:
    """The assistant message for ``step`` at ``turn`` and the tool messages answering it."""
    calls = _tool_calls(step)
    rng = random.Random(f"{session.seed}:thought:{turn}")
    target = " and ".join(
        str(arguments.get("path") or arguments.get("pattern") or arguments.get("command"))
        for _, arguments in calls
    )
    assistant: Message = {
        "role": "assistant",
        "content": rng.choice(_THOUGHTS).format(target=target),
        "tool_calls": [
            {
                "id": f"call_{turn}_{k}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(dict(arguments))},
            }
            for k, (name, arguments) in enumerate(calls)
        ],
    }
    results: list[Message] = [
        {
            "role": "tool",
            "tool_call_id": f"call_{turn}_{k}",
            "content": session.execute(turn, name, arguments),
        }
        for k, (name, arguments) in enumerate(calls)
    ]
    return [assistant, *results]


class _StandIn:
    """The summary model: ``summary_responder`` in process, timing itself."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, call: SummarizeCall) -> SummaryOutcome:
        started = time.perf_counter()
        reply = summary_responder(call.body)
        elapsed = time.perf_counter() - started
        self.seconds += elapsed
        self.calls += 1
        return SummaryOutcome(
            text=reply.content, finish_reason=reply.derived_finish_reason(), latency_s=elapsed
        )


def drive(turns: int, *, model: str = MODEL, **config: Any) -> list[Turn]:
    """Run a ``turns``-turn session through ``ContextManager`` and time every ``prepare()``.

    ``config``: ``CompactionConfig`` fields (none: the defaults).
    """
    session = CodingSession(turns=turns)
    steps = session.steps
    stand_in = _StandIn()
    manager = ContextManager(summarizer=stand_in, **config)
    raw_counter = TiktokenCounter(load_encoding(encoding_for_model(model)))
    history: list[Message] = [session.system, session.task]
    raw_tokens = raw_counter.count_messages(history)
    out: list[Turn] = []
    try:
        for turn in range(turns):
            summary_before = stand_in.seconds
            started = time.perf_counter()
            result = manager.prepare(history, model=model, tools=session.tools)
            seconds = time.perf_counter() - started
            out.append(
                Turn(
                    index=turn,
                    seconds=seconds,
                    summary_seconds=stand_in.seconds - summary_before,
                    compacted=result.compacted,
                    raw_tokens=raw_tokens,
                    sent_tokens=result.report.estimated_tokens,
                    raw_messages=len(history),
                )
            )
            # The "provider" agrees with the estimate: calibration stays at 1.0.
            usage = {"prompt_tokens": result.report.raw_estimated_tokens}
            manager.observe(result, usage, model=model)
            added = assistant_turn(session, turn, steps[turn])
            history.extend(added)
            raw_tokens += raw_counter.count_messages(added)
    finally:
        manager.close()
    return out
