"""The compaction strategies the evaluator compares, by name. Names are a public contract:

==========================  =====  ===============================================================
name                        model  what it sends next
==========================  =====  ===============================================================
``self-summary``            yes    production: the live conversation summarizes itself, + ledger
``self-summary-no-ledger``  yes    the same without the fact ledger
``from-scratch``            yes    a separate summarizer prompt over the same span, as text
``hybrid``                  yes    old tool outputs masked first; a self-summary only when needed
``masking``                 no     the engine's ``masking`` policy: old tool outputs masked, then
                                   the fact ledger alone for the runs masking cannot clear
``truncate``                no     the oldest units dropped
``observation-masking``     no     old tool outputs masked (largest M newest turns kept), then the
                                   oldest units dropped: the published baseline, not a policy
``ledger-only``             no     the engine's ``ledger-only`` policy: the fact ledger, no summary
``given``                   no     each summary the dataset carries (one row per summary)
==========================  =====  ===============================================================

See ``compaction`` for the ``Strategy`` protocol, ``mechanical``, ``model_free`` and
``engine_strategies`` for each strategy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ..core.errors import ConfigurationError
from .compaction import Compaction, CompactionInput, Strategy, SummaryClient
from .engine_strategies import FromScratch, SelfSummary
from .mechanical import Given, ObservationMasking, Truncate
from .model_free import ModelFree

__all__ = [
    "MODEL_STRATEGIES",
    "OFFLINE_STRATEGIES",
    "ON_REQUEST",
    "STRATEGIES",
    "Compaction",
    "CompactionInput",
    "Strategy",
    "SummaryClient",
    "resolve_strategies",
]

STRATEGIES: Mapping[str, Strategy] = MappingProxyType(
    {
        strategy.name: strategy
        for strategy in (
            SelfSummary(ledger=True),
            SelfSummary(ledger=False),
            FromScratch(),
            SelfSummary(policy="hybrid"),
            ModelFree("masking"),
            Truncate(),
            ModelFree("ledger-only"),
            Given(),
            ObservationMasking(),
        )
    }
)
"""Every strategy, by name."""

MODEL_STRATEGIES: tuple[str, ...] = tuple(n for n, s in STRATEGIES.items() if s.needs_model)
"""The strategies that call a model (they need ``--upstream`` and ``--model``)."""
ON_REQUEST: tuple[str, ...] = ("observation-masking",)
"""Baselines that run only when named (``-s``), never by default."""
OFFLINE_STRATEGIES: tuple[str, ...] = tuple(
    n for n, s in STRATEGIES.items() if not s.needs_model and n not in ON_REQUEST
)
"""The strategies that run with no model at all, by default."""


def resolve_strategies(names: Sequence[str]) -> list[Strategy]:
    """The strategies named, in order, without repeats; ``ConfigurationError`` on an unknown
    name, listing the valid ones."""
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown:
        raise ConfigurationError(
            f"unknown strategy {', '.join(map(repr, unknown))}; valid strategies: "
            + ", ".join(STRATEGIES)
        )
    return [STRATEGIES[name] for name in dict.fromkeys(names)]
