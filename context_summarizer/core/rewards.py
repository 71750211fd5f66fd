"""A summary's quality as one number: the online gate's checks turned into a reward in [0, 1].

The parts are the gate's own (``summary_checks``, ``summary_answers``): whether the summary has
a problem the gate refuses (empty, cut off at its cap, a tool call, another format or language,
an echo of the instruction, the task restated, a loop, facts never seen), the share of the run's
ledger facts it names, and its length against its cap. A summary the gate would refuse earns 0;
any other earns the share of facts it names, discounted by up to ``BREVITY_WEIGHT`` for the
share of its cap it uses: ``facts x (1 - w + w x brevity)``. So a summary that names nothing
earns nothing however short, among summaries naming the same facts the shorter earns more, and
naming more facts outweighs length unless the two shares are within ``1 / (1 - w)`` of each
other (11% at the default weight).

The facts are the ones the gate scores against: the run's ``rank_facts`` merged with the
ledgers of the summaries it folds in, bounded by the ledger's cap (``prefix_facts``), or the
ones a record kept. Pure: the token counter is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .facts import Fact, merge_ledger, parse_ledger, rank_facts, score_summary
from .facts.provenance import is_summary_message
from .messages import INSTRUCTION_ROLES, message_text
from .summary_checks import PROBLEM_TEXT, Problem, SummarySource, invented_facts, summary_problem
from .tokens import TokenCounter

BREVITY_WEIGHT = 0.1
"""How much of a summary's reward its length can take away (all of its cap used: 10%)."""


class Reward(BaseModel):
    """A summary's reward and the parts it is made of."""

    model_config = ConfigDict(frozen=True)

    reward: float = Field(ge=0.0, le=1.0)
    """0 when ``problem`` is set, else ``facts * (1 - w + w * brevity)`` (``w``: the brevity
    weight, ``BREVITY_WEIGHT`` by default)."""
    facts: float = Field(ge=0.0, le=1.0)
    """The share of the run's facts the summary names (1.0 when the run has none)."""
    facts_named: int
    facts_total: int
    missed: list[str] = Field(default_factory=list)
    """The facts it does not name, most important first."""
    brevity: float = Field(ge=0.0, le=1.0)
    """``1 - tokens / cap``, at least 0."""
    tokens: int
    cap: int
    problem: Problem | None = None
    """Why the online gate would refuse the summary (None: it would use it)."""
    problem_text: str | None = None
    invented: list[str] = Field(default_factory=list)
    """Paths, URLs, commits, tests and errors the summary names that the conversation never
    mentions."""

    @property
    def usable(self) -> bool:
        """Whether the online gate would use the summary."""
        return self.problem is None

    def parts(self) -> dict[str, Any]:
        """The reward's parts as plain JSON (everything but ``reward``)."""
        return self.model_dump(mode="json", exclude={"reward"})


def split_request(
    messages: Sequence[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], str | None]:
    """A summary request's live prefix and its instruction (the last message, when it is a
    user message); a conversation that does not end with one has no instruction."""
    if messages and messages[-1].get("role") == "user":
        return list(messages[:-1]), message_text(messages[-1])
    return list(messages), None


def replaced_start(messages: Sequence[Mapping[str, Any]]) -> int:
    """Where a summary of ``messages`` starts by default, as the engine plans it: after the
    leading system and developer messages and the first user message (the task, kept)."""
    start = 0
    while start < len(messages) and messages[start].get("role") in INSTRUCTION_ROLES:
        start += 1
    if start < len(messages) and messages[start].get("role") == "user":
        start += 1
    return start


def prefix_facts(
    messages: Sequence[Mapping[str, Any]],
    *,
    ledger_tokens: int,
    count_tokens: Callable[[str], int],
    start: int | None = None,
) -> list[Fact]:
    """The facts the online gate would score a summary of ``messages[start:]`` against: their
    ranked facts, merged with the ledgers of the summary messages among them, bounded to
    ``ledger_tokens`` as rendered. ``start`` defaults to ``replaced_start``."""
    run = messages[replaced_start(messages) if start is None else start :]
    previous = [
        fact for m in run if is_summary_message(m) for fact in parse_ledger(message_text(m))
    ]
    return merge_ledger(
        previous, rank_facts(run), max_tokens=ledger_tokens, count_tokens=count_tokens
    )


def summary_source(prefix: Sequence[Mapping[str, Any]], instruction: str) -> SummarySource:
    """What the gate checks a summary of ``prefix`` against (as ``summaries._ask`` builds it)."""
    return SummarySource(
        conversation="\n".join(message_text(m) for m in prefix),
        instruction=instruction,
        task=next((message_text(m) for m in prefix if m.get("role") == "user"), None),
    )


def score_reward(
    summary: str | None,
    *,
    facts: Sequence[Fact],
    source: SummarySource,
    counter: TokenCounter | None,
    cap: int,
    finish_reason: str | None = None,
    tool_called: bool = False,
    brevity_weight: float = BREVITY_WEIGHT,
    tokens: int | None = None,
) -> Reward:
    """The reward of ``summary`` (see the module docstring). ``brevity_weight`` (0 to 1): how
    much of the reward a summary that uses its whole cap loses. ``tokens``: the summary's
    tokens as already counted (a record's), else ``counter`` counts them (one of the two must
    be given)."""
    if not 0.0 <= brevity_weight <= 1.0:
        raise ValueError(f"brevity_weight must be between 0 and 1, got {brevity_weight}")
    if cap <= 0:
        raise ValueError(f"the summary's cap must be positive, got {cap}")
    text = (summary or "").strip()
    if tokens is None:
        if counter is None:
            raise ValueError("score_reward needs the summary's tokens or a counter")
        tokens = counter.count_text(text) if text else 0
    problem = summary_problem(
        text or None,
        finish_reason,
        max_tokens=cap,
        tokens=tokens,
        tool_called=tool_called,
        source=source,
    )
    scored = score_summary(text, facts)
    invented = invented_facts(text, source.conversation) if text else []
    brevity = max(0.0, 1.0 - tokens / cap)
    value = 0.0
    if problem is None:
        value = scored.recall * (1.0 - brevity_weight + brevity_weight * brevity)
    return Reward(
        reward=min(1.0, max(0.0, value)),
        facts=scored.recall,
        facts_named=scored.mentioned,
        facts_total=scored.total,
        missed=[fact.text for fact in scored.missed],
        brevity=brevity,
        tokens=tokens,
        cap=cap,
        problem=problem,
        problem_text=PROBLEM_TEXT[problem] if problem else None,
        invented=invented,
    )
