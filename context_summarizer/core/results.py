"""The values the engine hands out: what to send, what happened, and what it needs done.

``SummarizeCall`` is how the pure engine *describes* the one piece of I/O it needs (a summary
request to the model); a driver performs it and sends back a ``SummaryOutcome``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SkipValidation

from .messages import Message
from .summary_records import SummaryRecord

Trigger = Literal["threshold", "context_length_exceeded", "manual"]
Policy = Literal["self-summary", "hybrid", "masking", "ledger-only"]
"""How a compaction makes room (``CompactionConfig.policy``)."""
MASKING_POLICIES: frozenset[Policy] = frozenset({"hybrid", "masking"})
"""The policies that mask old tool outputs before anything else."""
MODEL_FREE_POLICIES: frozenset[Policy] = frozenset({"masking", "ledger-only"})
"""The policies that never ask a model: a run they compact becomes its fact ledger alone."""


class SummarizeCall(BaseModel):
    """A summary request for a driver to send: a Chat Completions body, sent as is."""

    model_config = ConfigDict(frozen=True)

    body: SkipValidation[dict[str, Any]]
    attempt: Literal["first", "strict"] = "first"
    recall: SkipValidation[Any] = None
    """The recall tool (a ``recall_tool.RecallTool``) when the conversation's requests are
    offered it: a driver that builds its API's body from the client's own request (not from
    ``body``, whose ``tools`` has it already) offers it too, so the provider's cached prefix of
    the live requests covers the summary request."""


class SummaryOutcome(BaseModel):
    """What the model answered to a ``SummarizeCall`` (or why it did not)."""

    text: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    tool_called: bool = False
    """Whether the model answered with a tool call (forbidden in a summary request)."""
    tool_calls: SkipValidation[list[dict[str, Any]]] = Field(default_factory=list)
    """The answer's tool calls, as chat completions write them (the evaluator's probes answer
    the recall tool's)."""
    error: str | None = None
    """Set when the call failed after its retries; never contains a credential."""
    failed_attempts: list[str] = Field(default_factory=list)
    """Why each failed attempt failed, in order: an HTTP status (``"503"``), ``"timeout"``,
    ``"unreachable"`` or ``"invalid_response"`` (an answer that is not a chat completion)."""


class TokenReport(BaseModel):
    """Token figures of one prepared request."""

    estimated_tokens: int
    """Estimate of the request as sent (messages, tools, priming), calibrated."""
    raw_estimated_tokens: int
    """The same estimate before calibration."""
    context_window: int
    reserve_output_tokens: int
    trigger_tokens: int
    target_tokens: int


class CompactionEvent(BaseModel):
    """One compaction, as passed to the ``on_compaction`` callback and logged."""

    session: str
    checkpoint_id: str
    trigger: Trigger
    tokens_before: int
    tokens_after: int
    summary: str
    ledger_size: int
    score: float | None
    latency_s: float
    cut: tuple[int, int]
    """Raw message indices: the summaries now stand for messages up to ``cut[1]`` (exclusive);
    ``cut[0]`` is where the previous checkpoint's summaries ended."""
    kept_indices: list[int]
    """Raw indices below ``cut[1]`` still sent verbatim (or with a tool output cut to fit)."""
    replaced: list[tuple[int, int]] = Field(default_factory=list)
    """The raw ranges ``[start, end)`` this compaction's new summaries replace, in order."""
    degraded: list[str] = Field(default_factory=list)
    verdicts: list[Literal["accepted", "repaired", "replaced"]] = Field(default_factory=list)
    """Per new summary a model was asked for, in order: the model's first answer used
    (``accepted``), its strict retry used (``repaired``), or the mechanical fallback in their
    place (``replaced``)."""
    problems: list[str] = Field(default_factory=list)
    """What the online check found wrong with each rejected answer (``echo``, ``cut_off``,
    ``invented``, ...), in order."""
    failure: str | None = None
    summary_prompt_tokens: int | None = None
    summary_cached_tokens: int | None = None
    policy: Policy = "self-summary"
    """The policy that made this compaction (``CompactionConfig.policy``)."""
    masked: int = 0
    """Tool outputs this compaction masked (``hybrid`` and ``masking``). When masking was
    enough, no summary was asked for: ``verdicts`` is empty and ``summary`` is ``""``."""
    masked_tokens: int = 0
    """Tokens (as counted, before calibration) those masks saved."""
    ledger_only: int = 0
    """Runs this compaction replaced by their fact ledger alone, with no model asked (the
    ``masking`` and ``ledger-only`` policies): a note saying so (``summary``) and the ledger.
    They are no failure and have no verdict: ``verdicts`` holds only summaries a model was
    asked for (none under these policies)."""
    ahead_of_time: bool = False
    """Whether its summaries were written ahead of the trigger, in the background, and the
    request that crossed the trigger only adopted them (``latency_s`` is then its wait)."""
    applied: bool = True
    """False when every summary failed while the request still fit: it went out unchanged, no
    checkpoint was written (``checkpoint_id`` and ``summary`` are empty, ``tokens_after`` is
    ``tokens_before``) and ``failure`` says why. ``verdicts`` and ``problems`` are the failed
    summaries'."""


class PrepareResult(BaseModel):
    """What to send upstream for one request."""

    messages: SkipValidation[list[Message]]
    """The caller's own message objects (not copies), plus any summarizer inserted."""
    compacted: bool
    """Whether this call performed a compaction (not merely reused an earlier one)."""
    rewritten: bool
    """Whether the messages differ from what the caller passed (an earlier or new checkpoint)."""
    session: str
    namespace: str = ""
    """The namespace the session lives in (e.g. a hashed credential in the proxy)."""
    checkpoint_id: str | None
    report: TokenReport
    event: CompactionEvent | None = None
    held_back: str | None = None
    """Why a request over its trigger went out uncompacted (None: it was not held back): its
    summary is still being written ahead of time, or the summary failed and it fits as is."""
    replaced: list[tuple[int, int]] = Field(default_factory=list)
    """The raw ranges ``[start, end)`` the messages do not carry as they are (the applied
    checkpoint's ``replaced``): what recall may read back (``core.spans``)."""
    summary_records: SkipValidation[list[SummaryRecord]] = Field(default_factory=list)
    """For a compaction a model wrote summaries for: each run's summary requests as sent and
    the answers, judged (what ``serve --record`` keeps for ``summarizer export``)."""
