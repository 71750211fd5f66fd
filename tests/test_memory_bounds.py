"""However many sessions are stored, the engine keeps a bounded number of them in memory.

State lives in the store: the engine's latest-checkpoint memo is an LRU, and a session evicted
from it is still found (and rewritten the same way) from its stored checkpoint.
"""

from __future__ import annotations

import gc
import inspect
from typing import Any

from summarizer import ContextManager
from summarizer.caches import ChainCache
from summarizer.engine import ContextEngine
from summarizer.results import SummarizeCall, SummaryOutcome


def summarize(call: SummarizeCall) -> SummaryOutcome:
    return SummaryOutcome(text="## Task and constraints\nthe task\n## Current state\nworking")


def session(index: int) -> list[dict[str, Any]]:
    """A distinct conversation over the trigger of ``CONFIG``'s window."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": f"Fix bug {index} in module_{index}.py."},
    ]
    for turn in range(12):
        messages.append({"role": "assistant", "content": f"Step {turn} on bug {index}. " * 40})
        messages.append({"role": "user", "content": f"Go on ({turn})."})
    return messages


CONFIG: dict[str, Any] = {"context_window": 4_000, "max_summary_tokens": 300}


def compact_sessions(context: ContextManager, count: int) -> list[str]:
    ids = []
    for index in range(count):
        result = context.prepare(session(index), model="gpt-4o")
        assert result.compacted and result.checkpoint_id is not None
        ids.append(result.checkpoint_id)
    return ids


def test_the_latest_checkpoint_memo_is_bounded_by_default() -> None:
    memo_size = inspect.signature(ContextEngine).parameters["memo_size"].default
    # No larger than the conversations the chain cache keeps: past those, a request is rehashed
    # in full anyway, and a memoized checkpoint saves little.
    assert memo_size <= inspect.signature(ChainCache).parameters["size"].default
    context = ContextManager(summarizer=summarize, **CONFIG)
    compact_sessions(context, memo_size + 20)
    assert len(context.engine._latest) == memo_size


def test_a_session_evicted_from_the_memo_is_rewritten_from_the_store() -> None:
    context = ContextManager(summarizer=summarize, **CONFIG)
    context.engine = ContextEngine(
        context.config, context.store, calibration=context.engine.calibration, memo_size=3
    )
    ids = compact_sessions(context, 10)
    assert len(context.engine._latest) == 3
    for index in (0, 1):  # long evicted from the memo
        follow_up = [*session(index), {"role": "assistant", "content": "Done."}]
        again = context.prepare(follow_up, model="gpt-4o")
        assert not again.compacted and again.rewritten and again.checkpoint_id == ids[index]
    assert len(context.engine._latest) == 3


def test_session_locks_are_not_kept_once_no_request_holds_them() -> None:
    context = ContextManager(summarizer=summarize, **CONFIG)
    compact_sessions(context, 30)
    gc.collect()
    assert len(context._locks) == 0
