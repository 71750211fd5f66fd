"""What every compaction strategy's replay shares: the session, what a replay sends, the settings.

A ``Session`` is a complete recorded agent session; a ``Replay`` is every ``SentRequest`` one
strategy sends over it. The strategies (``benchmarks.cache_replay``) all count with the same
o200k_base counter and compact at the same trigger to the same target (``replay_budget``).
Sessions come from a dataset file (``dataset_sessions``) or a scripted ``CodingSession``
(``coding_session``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from context_summarizer.core.budgets import Budget, resolve_budget
from context_summarizer.core.config import CompactionConfig
from context_summarizer.core.messages import Message
from context_summarizer.core.tokens import TOKENS_PER_MESSAGE, TokenCounter
from context_summarizer.evaluation.dataset import load_dataset
from context_summarizer.loaders.tokenizers import make_counter
from context_summarizer.testing import ScriptedToolAgent
from context_summarizer.testing.scenario import CodingSession

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


def session_tokens(session: Session) -> int:
    """Tokens of the whole session as one request (its raw size)."""
    counter = replay_counter()
    return counter.count_messages(session.messages) + counter.count_tools(session.tools)
