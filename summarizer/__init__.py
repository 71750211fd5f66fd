"""summarizer: keeps LLM agents working past their context window.

It tracks each request's token budget, has the model summarize its own work at a threshold
(appending one instruction to the live conversation, so the provider's prompt cache covers the
whole prefix), keeps prompts append-only between compactions, and scores whether each summary
kept the key facts.

Library entry points: ``wrap(client, **config)`` and ``ContextManager(**config)``. Importing the
package is cheap: the names below load their modules on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "BudgetExceeded": "errors",
    "Checkpoint": "checkpoints",
    "CompactionConfig": "config",
    "CompactionEvent": "results",
    "ConfigurationError": "errors",
    "ContextManager": "library",
    "InvalidConversation": "errors",
    "MemoryStore": "stores",
    "PinRule": "config",
    "PrepareResult": "results",
    "SQLiteStore": "stores",
    "Store": "stores",
    "SummarizerError": "errors",
    "SummaryFailed": "errors",
    "TokenReport": "results",
    "TokenizerUnavailable": "errors",
    "UnknownModelError": "errors",
    "wrap": "wrapping",
}

__all__ = [
    "BudgetExceeded",
    "Checkpoint",
    "CompactionConfig",
    "CompactionEvent",
    "ConfigurationError",
    "ContextManager",
    "InvalidConversation",
    "MemoryStore",
    "PinRule",
    "PrepareResult",
    "SQLiteStore",
    "Store",
    "SummarizerError",
    "SummaryFailed",
    "TokenReport",
    "TokenizerUnavailable",
    "UnknownModelError",
    "wrap",
]

if TYPE_CHECKING:
    from .checkpoints import Checkpoint
    from .config import CompactionConfig, PinRule
    from .errors import (
        BudgetExceeded,
        ConfigurationError,
        InvalidConversation,
        SummarizerError,
        SummaryFailed,
        TokenizerUnavailable,
        UnknownModelError,
    )
    from .library import ContextManager
    from .results import CompactionEvent, PrepareResult, TokenReport
    from .stores import MemoryStore, SQLiteStore, Store
    from .wrapping import wrap


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'summarizer' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
