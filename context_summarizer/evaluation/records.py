"""The records an evaluation writes: one ``ResultRow`` per case, strategy, variant and repeat.

``results.jsonl`` holds one ``ResultRow`` per line, keyed by ``ResultRow.key`` (case, strategy,
variant and repeat index: ``--repeat N`` runs each model strategy N times, as repeats 0 to N-1);
when a key occurs more than once (an errored row recomputed by a later run), the last line wins.
A row written before repeats existed reads as repeat 0. ``RunConfig`` is
``run.json``: what must be equal for rows of two runs to be mixed in one results file.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..core.config import CompactionConfig, SummaryCapField

RowKey = tuple[str, str, str, int]
"""``(case id, strategy, variant or "", repeat index)``."""

ROW_FORMAT = 1
"""Version of the ``ResultRow`` layout; part of ``RunConfig``."""

DEFAULT_MAX_SUMMARY_TOKENS: int = CompactionConfig.model_fields["max_summary_tokens"].default
"""Completion cap of the summary requests, unless a run sets one: production's default."""


class MissedFact(BaseModel):
    """A fact the compacted context no longer mentions."""

    id: str | None = None
    """The gold fact's id (None for an extracted fact)."""
    kind: str
    text: str


class FactRecall(BaseModel):
    """How many of a set of facts the compacted context still mentions."""

    total: int
    kept: int
    recall: float | None
    """``kept / total``; None when there were no facts to keep."""
    missed: list[MissedFact] = Field(default_factory=list)


class ModelCall(BaseModel):
    """One model call a strategy made, with the token counts its cost depends on."""

    purpose: str
    """``summary``, ``summary-strict``, ``from-scratch``..."""
    model: str
    prompt_tokens: int
    """As the upstream reported them (our estimate when it did not)."""
    reusable_prefix_tokens: int = 0
    """Leading prompt tokens an earlier request already sent (see ``pricing``)."""
    cached_tokens: int | None = None
    """What the upstream reported as cached, for information (cost uses the estimate above)."""
    output_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None


class ProbeResult(BaseModel):
    """One probe, answered from the compacted context and from the full one, and graded."""

    question: str
    reference: str
    answer: str | None
    correct: bool | None
    """None when the answer or its grading failed."""
    full_answer: str | None
    full_correct: bool | None
    recall_answer: str | None = None
    """The answer from the compacted context with the recall tool offered (None: not asked)."""
    recall_correct: bool | None = None
    recall_calls: int = 0
    """Recall calls the model made before that answer."""


class ResultRow(BaseModel):
    """What one strategy did to one case, and how well the result keeps what matters."""

    model_config = ConfigDict(extra="ignore")

    case_id: str
    strategy: str
    variant: str | None = None
    """The given summary's name for ``given``; None otherwise."""
    repeat: int = Field(default=0, ge=0)
    """Which run of the strategy on this case (``--repeat``): 0 to N-1 for a model strategy;
    always 0 for an offline one, which is deterministic and runs once."""
    status: Literal["ok", "error", "infeasible"]
    """``error`` rows (a failed model call, say) are recomputed by the next run into the same
    directory; ``infeasible`` rows (what the strategy must keep does not fit the budget: the
    same on every run) are not."""
    error: str | None = None
    agent_model: str
    """The model whose tokenizer counted, and that the next request is priced for."""
    tokens_before: int
    budget_tokens: int
    tokens_after: int | None = None
    met_budget: bool | None = None
    compacted: bool | None = None
    """Whether the strategy changed anything (a case already within budget is left alone)."""
    compression_ratio: float | None = None
    """``tokens_after / tokens_before``: lower is more compressed."""
    summary_tokens: int = 0
    """Tokens of the summary text a model (or the dataset) wrote; 0 without one."""
    inserted_tokens: int = 0
    """Tokens of every message the strategy inserted or rewrote (summary frame, ledger,
    placeholders)."""
    next_reusable_prefix_tokens: int = 0
    """Leading tokens of the compacted request unchanged from the original (tools included)."""
    gold: FactRecall | None = None
    recoverable: FactRecall | None = None
    """Of the gold facts ``gold`` missed, how many one recall search gives back from the
    replaced messages (``recoverable``); None in rows written before it was measured."""
    extracted: FactRecall | None = None
    calls: list[ModelCall] = Field(default_factory=list)
    failure: str | None = None
    """Why a summary could not be used, when the engine fell back."""
    verdicts: list[str] = Field(default_factory=list)
    """What became of each summary the model wrote, in order: ``accepted``, ``repaired`` (the
    strict retry's summary was used) or ``replaced`` (the mechanical fallback took its place)."""
    notes: list[str] = Field(default_factory=list)
    """Degradations and fallbacks applied (``elide_tool_outputs``, ``dropped_units``, ...)."""
    summary: str | None = None
    probes: list[ProbeResult] | None = None
    probe_accuracy: float | None = None
    probe_accuracy_full: float | None = None
    probe_gap: float | None = None
    """``probe_accuracy_full - probe_accuracy``: what compaction cost in answers."""
    probe_accuracy_recall: float | None = None
    """Probe accuracy from the compacted context with the recall tool offered (the model may
    read back what the compaction replaced); None in rows written before it was measured."""
    latency_s: float = 0.0
    """Wall time of the compaction, model calls included, probes excluded."""
    probe_latency_s: float | None = None

    @property
    def key(self) -> RowKey:
        """The row's identity in ``results.jsonl``."""
        return (self.case_id, self.strategy, self.variant or "", self.repeat)

    @property
    def label(self) -> str:
        """How reports name the row's strategy: ``given:<name>`` for a given summary."""
        return f"{self.strategy}:{self.variant}" if self.variant else self.strategy


class RunConfig(BaseModel):
    """``run.json``: the settings rows depend on. Rows are only mixed under an equal config."""

    model_config = ConfigDict(extra="forbid")

    row_format: int = ROW_FORMAT
    budget: float
    context_window: int | None
    model: str | None
    probes: bool
    prompt_version: str
    prompt_digest: str
    """SHA-256 over the prompt files strategies, probes and the engine use."""
    max_summary_tokens: int = DEFAULT_MAX_SUMMARY_TOKENS
    summary_cap_field: SummaryCapField = "auto"
    datasets: list[str]
    """SHA-256 of each dataset file's bytes, sorted."""

    def differences(self, other: RunConfig) -> list[str]:
        """The fields that differ from ``other`` (a stored config), as ``name was X, now Y``."""
        mine: dict[str, Any] = self.model_dump()
        theirs: dict[str, Any] = other.model_dump()
        return [
            f"{name} was {theirs.get(name)!r}, now {mine[name]!r}"
            for name in mine
            if mine[name] != theirs.get(name)
        ]
