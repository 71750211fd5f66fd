"""The planner's data: the view it reads (``ViewItem``, counted with a ``CountFn``) and the
``Plan`` it returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message

CountFn = Callable[[Mapping[str, Any]], int]
"""Counts the tokens of one message (the engine passes ``TokenCounter.count_message``)."""


@dataclass(frozen=True, slots=True)
class ViewItem:
    """One message of the view: a raw message (``raw_index``) or a summary inserted by an
    earlier compaction (``raw_index`` None, ``replaces`` its raw range)."""

    message: Message
    raw_index: int | None
    tokens: int
    replaces: tuple[int, int] | None = None

    @property
    def raw_range(self) -> tuple[int, int]:
        """The raw messages this item stands for, as ``[start, end)``."""
        if self.raw_index is not None:
            return (self.raw_index, self.raw_index + 1)
        assert self.replaces is not None
        return self.replaces


@dataclass
class Plan:
    """What a compaction summarizes, keeps and rewrites (indices into the view)."""

    runs: list[range]
    """View index ranges, in order, each to be replaced by one new summary."""
    tail_start: int
    """View index where the verbatim tail begins."""
    summary_tokens: int
    """The allowance of each new summary (cap, ledger and framing), after any shrinking."""
    overrides: dict[int, Message] = field(default_factory=dict)
    """View index -> replacement message (tool outputs cut to their head and tail)."""
    estimated_tokens: int = 0
    """Estimated request size after the compaction, with each summary at its allowance."""
    degraded: list[str] = field(default_factory=list)
    """Degradation steps applied, in order."""
    final_cuts: list[int] = field(default_factory=list)
    """The final unit's tool outputs the caller cuts (``cut_outputs``) if, with the summaries
    written, the request is still over the window; ``estimated_tokens`` assumes it does."""

    @property
    def needs_summary(self) -> bool:
        """Whether there is anything for the model to summarize."""
        return bool(self.runs)

    @property
    def span(self) -> list[int]:
        """Every view index a new summary replaces."""
        return [i for run in self.runs for i in run]
