"""The evaluator's strategy names, as plain text: what ``summarizer eval --help`` lists without
importing the strategies (which import the library and the openai SDK). ``strategies`` defines
each; ``tests/test_cli_start.py`` holds the two equal."""

from __future__ import annotations

ALL: tuple[str, ...] = (
    "self-summary",
    "self-summary-no-ledger",
    "from-scratch",
    "hybrid",
    "masking",
    "truncate",
    "ledger-only",
    "given",
    "observation-masking",
)
"""Every strategy, in ``STRATEGIES``'s order."""
MODEL: tuple[str, ...] = ("self-summary", "self-summary-no-ledger", "from-scratch", "hybrid")
"""Those that call a model."""
ON_REQUEST: tuple[str, ...] = ("observation-masking",)
"""Those that run only when named."""
OFFLINE: tuple[str, ...] = ("masking", "truncate", "ledger-only", "given")
"""Those that run with no model, by default."""
DEFAULT_MAX_SUMMARY_TOKENS = 2_000
"""``CompactionConfig.max_summary_tokens``'s default."""
