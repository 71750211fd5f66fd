"""summarizer: keeps LLM agents working past their context window.

It tracks each request's token budget, has the model summarize its own work at a threshold
(appending one instruction to the live conversation, so the provider's prompt cache covers the
whole prefix), keeps prompts append-only between compactions, and scores whether each summary
kept the key facts (``reward`` scores one summary the same way, for training).

Library entry points: ``wrap(client, **config)`` and ``ContextManager(**config)`` (or
``config=CompactionConfig(...)``). Exported beside them: what their hooks take and return
(``SummarizeCall`` and ``SummaryOutcome`` for ``summarizer=``, ``CompactionEvent`` for
``on_compaction``), the results, the stores, and every error class. Importing the package is
cheap: the names below load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BadCompactionItem": "core.codecs.responses_compaction",
    "BudgetExceeded": "core.errors",
    "Checkpoint": "core.checkpoints",
    "CompactionConfig": "core.config",
    "CompactionEvent": "core.results",
    "ConfigurationError": "core.errors",
    "ContextManager": "library.manager",
    "ConversionError": "core.errors",
    "InvalidConversation": "core.errors",
    "LeaseLost": "core.errors",
    "HistoryNotInRequest": "core.errors",
    "MemoryStore": "stores",
    "PinRule": "core.config",
    "PrepareResult": "core.results",
    "ReplyReserveTooLarge": "core.errors",
    "Reward": "core.rewards",
    "RunConfigMismatch": "evaluation.runner",
    "RedisStore": "stores",
    "SQLiteStore": "stores",
    "Store": "stores",
    "StoreUnavailable": "core.errors",
    "SummarizeCall": "core.results",
    "SummarizerError": "core.errors",
    "SummaryFailed": "core.errors",
    "SummaryOutcome": "core.results",
    "SummaryReward": "rewards",
    "TokenReport": "core.results",
    "TokenizerUnavailable": "core.errors",
    "UnknownModelError": "core.errors",
    "reward": "rewards",
    "wrap": "library.wrapping",
}

__all__ = [
    "BadCompactionItem",
    "BudgetExceeded",
    "Checkpoint",
    "CompactionConfig",
    "CompactionEvent",
    "ConfigurationError",
    "ContextManager",
    "ConversionError",
    "HistoryNotInRequest",
    "InvalidConversation",
    "LeaseLost",
    "MemoryStore",
    "PinRule",
    "PrepareResult",
    "RedisStore",
    "ReplyReserveTooLarge",
    "Reward",
    "RunConfigMismatch",
    "SQLiteStore",
    "Store",
    "StoreUnavailable",
    "SummarizeCall",
    "SummarizerError",
    "SummaryFailed",
    "SummaryOutcome",
    "SummaryReward",
    "TokenReport",
    "TokenizerUnavailable",
    "UnknownModelError",
    "reward",
    "wrap",
]

if TYPE_CHECKING:
    from .core.checkpoints import Checkpoint
    from .core.codecs.responses_compaction import BadCompactionItem
    from .core.config import CompactionConfig, PinRule
    from .core.errors import (
        BudgetExceeded,
        ConfigurationError,
        ConversionError,
        HistoryNotInRequest,
        InvalidConversation,
        LeaseLost,
        ReplyReserveTooLarge,
        StoreUnavailable,
        SummarizerError,
        SummaryFailed,
        TokenizerUnavailable,
        UnknownModelError,
    )
    from .core.results import (
        CompactionEvent,
        PrepareResult,
        SummarizeCall,
        SummaryOutcome,
        TokenReport,
    )
    from .core.rewards import Reward
    from .evaluation.runner import RunConfigMismatch
    from .library.manager import ContextManager
    from .library.wrapping import wrap
    from .rewards import SummaryReward, reward
    from .stores import MemoryStore, RedisStore, SQLiteStore, Store


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'context_summarizer' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
