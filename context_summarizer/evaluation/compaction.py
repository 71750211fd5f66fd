"""What a compaction strategy is given and what it returns; measuring its result. Pure.

A strategy receives a ``CompactionInput`` (one case, a budget in tokens, the token counter, and a
summary client when it needs a model) and returns a ``Compaction``: the messages that would be
sent next, with what it cost to get them. ``finish`` measures every strategy's result the same
way, with the same counter: tokens after (messages, tools and reply priming, as the engine counts
a request), whether that fits the budget, and which leading part is unchanged (for the cache).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.config import SummaryCapField
from ..core.messages import Message, message_digest
from ..core.results import SummarizeCall, SummaryOutcome
from ..core.summary_records import SummaryRecord
from ..core.tokens import TokenCounter
from ..loaders.prompts import DEFAULT_VERSION
from .dataset import Case
from .records import DEFAULT_MAX_SUMMARY_TOKENS, ModelCall

SummaryClient = Callable[[SummarizeCall], SummaryOutcome]
"""Performs one chat completion body and never raises for an upstream failure
(``upstream.OpenAISummaryClient`` is one)."""


@dataclass(frozen=True)
class CompactionInput:
    """One case to compact, and everything a strategy may use to do it."""

    case: Case
    budget_tokens: int
    """The compacted request (messages, tools, reply priming) must fit in this many tokens."""
    counter: TokenCounter
    agent_model: str
    """The model the agent talks to: summary requests go to it, and it names the next request."""
    variant: str | None = None
    """Which of the case's given summaries (``given`` only)."""
    client: SummaryClient | None = None
    """For strategies that call a model; None runs offline."""
    context_window: int | None = None
    """The agent's window when the run sets one (the summary request must fit it)."""
    prompt_version: str = DEFAULT_VERSION
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS
    """Completion cap of summary requests."""
    summary_cap_field: SummaryCapField = "auto"
    """The request field that carries it."""

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        """The case's tool definitions."""
        return self.case.tools

    @property
    def tokens_before(self) -> int:
        """The uncompacted request's tokens."""
        return request_tokens(self.counter, self.case.messages, self.case.tools)


@dataclass
class Compaction:
    """What a strategy would send next, and what it took."""

    messages: list[Message]
    tokens_after: int
    met_budget: bool
    compacted: bool
    """Whether anything changed."""
    summary: str | None = None
    """The summary text a model (or the dataset) wrote, when there is one."""
    summary_tokens: int = 0
    inserted_tokens: int = 0
    """Tokens of the messages that are not original messages (frames, ledger, placeholders)."""
    reusable_prefix_tokens: int = 0
    """Tokens of the tools and leading messages unchanged from the original request."""
    calls: list[ModelCall] = field(default_factory=list)
    failure: str | None = None
    notes: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    """What became of each summary the model wrote (see ``ResultRow.verdicts``)."""
    summary_records: list[SummaryRecord] = field(default_factory=list)
    """The engine's record of each run a model summarized under its online gate (the
    strategies that go through the engine with a model; ``from-scratch`` has no gate)."""


class Strategy(Protocol):
    """A way to bring a case under its budget. ``name`` is a public contract."""

    name: str
    needs_model: bool
    """Whether ``compact`` needs ``CompactionInput.client``."""

    def variants(self, case: Case) -> list[str | None]:
        """The rows this strategy produces for ``case`` (``[None]`` for one row)."""
        ...

    def compact(self, job: CompactionInput) -> Compaction:
        """Compact ``job.case`` to ``job.budget_tokens``."""
        ...


def request_tokens(
    counter: TokenCounter,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
) -> int:
    """Prompt tokens of a request: messages, reply priming and tool definitions."""
    return counter.count_messages(messages) + counter.count_tools(tools)


def unchanged_prefix_tokens(
    counter: TokenCounter,
    original: Sequence[Mapping[str, Any]],
    compacted: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
) -> int:
    """Tokens of the tools plus the leading messages ``compacted`` shares with ``original``."""
    total = counter.count_tools(tools)
    for before, after in zip(original, compacted, strict=False):
        if before is not after and message_digest(before) != message_digest(after):
            break
        total += counter.count_message(after)
    return total


def _same_messages(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> bool:
    if len(a) != len(b):
        return False
    return all(x is y or message_digest(x) == message_digest(y) for x, y in zip(a, b, strict=True))


def finish(
    job: CompactionInput,
    messages: list[Message],
    *,
    summary: str | None = None,
    calls: Sequence[ModelCall] = (),
    failure: str | None = None,
    notes: Sequence[str] = (),
    verdicts: Sequence[str] = (),
    summary_records: Sequence[SummaryRecord] = (),
) -> Compaction:
    """Measure ``messages`` as the compacted request of ``job``."""
    counter = job.counter
    original = job.case.messages
    after = request_tokens(counter, messages, job.tools)
    originals = {message_digest(m) for m in original}
    inserted = sum(counter.count_message(m) for m in messages if message_digest(m) not in originals)
    return Compaction(
        messages=messages,
        tokens_after=after,
        met_budget=after <= job.budget_tokens,
        compacted=not _same_messages(messages, original),
        summary=summary,
        summary_tokens=counter.count_text(summary) if summary else 0,
        inserted_tokens=inserted,
        reusable_prefix_tokens=unchanged_prefix_tokens(counter, original, messages, job.tools),
        calls=list(calls),
        failure=failure,
        notes=list(notes),
        verdicts=list(verdicts),
        summary_records=list(summary_records),
    )


def unchanged(job: CompactionInput) -> Compaction:
    """The case as it is (it already fits its budget)."""
    return finish(job, list(job.case.messages), notes=["within_budget"])


class OneRowPerCase:
    """Base of the strategies that make one row per case (every one but ``given``).

    A case already within its budget is left as it is; subclasses implement
    ``compact_over_budget`` for the others.
    """

    def variants(self, case: Case) -> list[str | None]:
        """One row per case."""
        return [None]

    def compact(self, job: CompactionInput) -> Compaction:
        """``job.case`` unchanged when it fits, else ``compact_over_budget``."""
        if job.tokens_before <= job.budget_tokens:
            return unchanged(job)
        return self.compact_over_budget(job)

    def compact_over_budget(self, job: CompactionInput) -> Compaction:
        """Bring a case that is over its budget under it."""
        raise NotImplementedError
