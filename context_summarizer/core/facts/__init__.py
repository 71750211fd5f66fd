"""The fact ledger: key facts pulled out of compacted turns by code, not by the model.

``extract_facts`` reads a span of conversation and keeps what an agent must not forget (paths,
URLs, identifiers, errors, commands, tests, commits, quantities, what the user asked), each with
what the agent did with it (a file edited or read, a command that failed or passed, an error
unresolved); ``rank_facts`` orders them by ``importance``; ``merge_ledger`` folds them into
the previous ledger under a token bound, giving up the least important first;
``render_ledger``/``parse_ledger`` write it into the summary message and read it back;
``mentions``/``score_summary`` measure how many facts a summary kept; ``is_summary_message``
tells the summaries that extraction skips (a fact comes only from what the agent and its tools
said). Everything is pure and deterministic. Extraction prefers
precision over recall, and every regex is linear: long whitespace-free runs are skipped and line
rules only read a line's head.
"""

from __future__ import annotations

from .fact import Fact, FactKind, FactRole, normalize_fact_text
from .importance import importance, is_check, is_exploring
from .ledger import (
    KIND_ORDER,
    LEDGER_HEADER,
    ledger_facts,
    merge_ledger,
    parse_ledger,
    render_ledger,
)
from .matching import NormalizedText, Score, mentions, normalize_summary, score_summary
from .provenance import SUMMARY_OPENINGS, is_summary_message
from .survey import extract_facts, rank_facts

__all__ = [
    "KIND_ORDER",
    "LEDGER_HEADER",
    "SUMMARY_OPENINGS",
    "Fact",
    "FactKind",
    "FactRole",
    "NormalizedText",
    "Score",
    "extract_facts",
    "importance",
    "is_check",
    "is_exploring",
    "is_summary_message",
    "ledger_facts",
    "mentions",
    "merge_ledger",
    "normalize_fact_text",
    "normalize_summary",
    "parse_ledger",
    "rank_facts",
    "render_ledger",
    "score_summary",
]
