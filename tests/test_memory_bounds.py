"""However many sessions are stored, the engine keeps a bounded number of them in memory.

State lives in the store: the engine's latest-checkpoint memo is an LRU, and a session evicted
from it is still found (and rewritten the same way) from its stored checkpoint.
"""

from __future__ import annotations

import gc
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from context_summarizer import ContextManager
from context_summarizer.core.caches import ChainCache
from context_summarizer.core.checkpoints import Checkpoint
from context_summarizer.core.engine import ContextEngine
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.library.engines import engine_for
from context_summarizer.stores import MemoryStore, SQLiteStore


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
    context.engine = engine_for(context.config, calibration=context.engine.calibration, memo_size=3)
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


class CountingStore(MemoryStore):
    """A memory store that records how many prefixes each lookup asked about."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[int] = []

    def find_latest(self, namespace: str, prefix_hashes: Mapping[str, int]) -> Checkpoint | None:
        self.asked.append(len(prefix_hashes))
        return super().find_latest(namespace, prefix_hashes)


def growing(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for turn in range(turns):
        messages += [
            {"role": "assistant", "content": f"step {turn}"},
            {"role": "user", "content": f"ok {turn}"},
        ]
    return messages


def test_prefixes_already_looked_up_are_not_asked_again_while_the_store_is_unchanged() -> None:
    store = CountingStore()
    context = ContextManager(summarizer=summarize, store=store, context_window=100_000)
    context.prepare(growing(10), model="gpt-4o")
    context.prepare(growing(11), model="gpt-4o")
    assert store.asked == [22, 2]  # the second lookup asks only about its two new messages


def test_a_checkpoint_written_by_another_process_is_still_found(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    # This process sees the whole conversation first (a window it fits in): nothing stored.
    mine = ContextManager(summarizer=summarize, store=path, context_window=100_000)
    messages = session(1)
    assert not mine.prepare(messages, model="gpt-4o").rewritten
    # Another process, on its own connection, compacts that same conversation.
    theirs = ContextManager(summarizer=summarize, store=SQLiteStore(path), **CONFIG)
    stored = theirs.prepare(messages, model="gpt-4o")
    assert stored.compacted
    # Its checkpoint covers prefixes this process already looked up: the store's generation
    # changed, so they are looked up again.
    again = mine.prepare([*messages, {"role": "user", "content": "next"}], model="gpt-4o")
    assert again.rewritten and again.checkpoint_id == stored.checkpoint_id
    assert not again.compacted
