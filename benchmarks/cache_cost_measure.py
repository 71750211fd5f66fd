"""The cache-cost benchmark's measurement: every session replayed and priced, per corpus.

``measure`` replays each session under every strategy (``benchmarks.cache_replay``) and prices
every request under each cache model (``benchmarks.cache_accounting``); the lower bound is priced
from the no-compaction replay. ``compaction_ratio`` and ``session_ratio`` compare self-summary
with from-scratch over a measured corpus.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from context_summarizer.core.model_limits import lookup_limits
from context_summarizer.evaluation.pricing import Price, default_prices, price_for

from .cache_accounting import (
    SessionCost,
    Shapes,
    bill_requests,
    lower_bound_bills,
    session_cost,
)
from .cache_replay import replay_all
from .cache_replay_session import (
    FROM_SCRATCH,
    NO_COMPACTION,
    SELF_SUMMARY,
    STRATEGIES,
    Session,
    replay_counter,
    session_tokens,
)

MODELS = ("gpt-5", "claude-sonnet-4")
"""The priced models: OpenAI's automatic cache, Anthropic's explicit one."""

LOWER_BOUND = "lower bound"
"""The row of the raw session sent append-only with perfect caching."""
ROWS = (*STRATEGIES, LOWER_BOUND)
"""The rows of each strategy table, in order."""


@dataclass(frozen=True)
class CacheModel:
    """A priced model, its cache style and its real context window."""

    model: str
    price: Price
    window: int

    @property
    def label(self) -> str:
        """E.g. ``gpt-5 (automatic cache)``."""
        return f"{self.model} ({self.price.cache} cache)"


def cache_models() -> list[CacheModel]:
    """The two priced models, from the shipped price table and model registry."""
    found: list[CacheModel] = []
    for model in MODELS:
        price = price_for(model, default_prices())
        if price is None:
            raise LookupError(f"no price for {model} in the shipped table")
        found.append(CacheModel(model, price, lookup_limits(model).context_window))
    return found


@dataclass
class Corpus:
    """A set of sessions replayed in one window, and their costs."""

    name: str
    window: int
    sessions: list[Session]
    raw_tokens: list[int]
    costs: dict[str, dict[str, list[SessionCost]]]
    """cache model -> row (strategy or lower bound) -> one cost per session."""
    lookback_cost: dict[str, float] = field(default_factory=dict)
    """Explicit cache only: strategy -> the share of its cost (over all sessions) that the
    lookback limit adds, against an unlimited lookback."""


def measure(name: str, sessions: Sequence[Session], window: int) -> Corpus:
    """Replay and price every session of a corpus."""
    models = cache_models()
    costs: dict[str, dict[str, list[SessionCost]]] = {
        m.model: {row: [] for row in ROWS} for m in models
    }
    limited: dict[str, float] = dict.fromkeys(STRATEGIES, 0.0)
    unlimited: dict[str, float] = dict.fromkeys(STRATEGIES, 0.0)
    for session in sessions:
        replays = replay_all(session, window=window)
        shapes = Shapes(replay_counter())
        for strategy, replay in replays.items():
            for m in models:
                bills = bill_requests(replay.requests, m.price, shapes)
                if m.price.cache == "explicit":
                    free = bill_requests(replay.requests, m.price, shapes, lookback_blocks=10**9)
                    limited[strategy] += sum(b.cost.usd for b in bills)
                    unlimited[strategy] += sum(b.cost.usd for b in free)
                fits_window = m.window if strategy == NO_COMPACTION else None
                costs[m.model][strategy].append(
                    session_cost(
                        bills,
                        m.price,
                        compactions=replay.compactions,
                        narrowed=replay.narrowed,
                        window=fits_window,
                    )
                )
        raw = replays[NO_COMPACTION].requests
        for m in models:
            bills = lower_bound_bills(raw, m.price, shapes)
            costs[m.model][LOWER_BOUND].append(session_cost(bills, m.price, compactions=0))
    lookback = {k: 1 - quotient(unlimited[k], v) for k, v in limited.items() if v > unlimited[k]}
    raw_tokens = [session_tokens(s) for s in sessions]
    return Corpus(name, window, list(sessions), raw_tokens, costs, lookback)


def mean(values: Sequence[float]) -> float:
    """The mean of ``values``, 0 when there are none."""
    return statistics.fmean(values) if values else 0.0


def quotient(a: float, b: float) -> float:
    """``a / b``, NaN when ``b`` is 0."""
    return a / b if b else float("nan")


def compaction_ratio(corpus: Corpus, model: str, *, prompt_only: bool = False) -> float:
    """Self-summary's summary requests over from-scratch's, per session on average."""
    own = corpus.costs[model][SELF_SUMMARY]
    other = corpus.costs[model][FROM_SCRATCH]
    if prompt_only:
        return quotient(
            mean([c.compaction_prompt_input_equivalent for c in own]),
            mean([c.compaction_prompt_input_equivalent for c in other]),
        )
    return quotient(
        mean([c.compaction_input_equivalent for c in own]),
        mean([c.compaction_input_equivalent for c in other]),
    )


def session_ratio(corpus: Corpus, model: str) -> float:
    """Self-summary's whole-session cost over from-scratch's."""
    return quotient(
        mean([c.input_equivalent for c in corpus.costs[model][SELF_SUMMARY]]),
        mean([c.input_equivalent for c in corpus.costs[model][FROM_SCRATCH]]),
    )
