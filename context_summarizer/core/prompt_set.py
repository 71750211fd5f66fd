"""The prompt texts the core fills in, handed to it by the edge
(``context_summarizer.loaders.prompts`` reads them from ``prompts/<version>/``): the core never
reads a file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class PromptSet:
    """One version's templates; ``{field}`` placeholders are filled with ``str.format``."""

    version: str
    self_summary: str
    """The instruction appended to the live conversation: summarize your work so far."""
    self_summary_strict: str
    """The one retry after an empty, over-long or fact-poor summary (``max_words``,
    ``required_facts``)."""
    self_summary_since: str
    """The instruction for a run after a kept message, quoted as ``anchor``."""
    self_summary_since_strict: str
    """Its retry (``anchor``, ``max_words``, ``required_facts``)."""
    summary_frame: str
    """The message standing for a run the model summarized: framing around ``summary`` (the
    model's) and ``ledger``."""
    mechanical_frame: str
    """The message standing for a run no model summarized (``ledger_summary``, or
    ``fallback_summary``): framing around ``summary`` (that note) and ``ledger``."""
    fallback_summary: str
    """The mechanical summary when the model's cannot be used (``reason``, ``message_count``,
    ``original_tokens``)."""
    ledger_summary: str
    """The note standing for a run under the ``masking`` and ``ledger-only`` policies, which
    ask no model (``message_count``, ``original_tokens``)."""
    truncated_output: str
    """The marker inside a tool output cut to its head and tail (``elided_tokens``)."""
    masked_output: str
    """What an old tool output is replaced with when the ``hybrid`` or ``masking`` policy
    masks it (``original_tokens``)."""
    recall_tool: str
    """The recall tool's description, as the model is offered it (``core.recall_tool``)."""
    recall_index: str
    """The list of recallable spans a summary carries (``tool``: the tool's name, ``spans``:
    one index line per span)."""
    summary_instructions: str
    """Framing around a user's own instructions for a summary (``instructions``), added after
    the summary instruction (``CompactionConfig.summary_instructions``, a request's)."""

    @classmethod
    def names(cls) -> Sequence[str]:
        """The prompt files a set is made of (every field but ``version``)."""
        return [f.name for f in fields(cls) if f.name != "version"]
