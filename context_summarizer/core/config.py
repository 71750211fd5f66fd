"""Compaction configuration: the public contract of keyword names shared by every entry point.

``CompactionConfig`` holds what a user sets; ``budgets.resolve_budget`` turns it, the model's
registry entry and one request into the concrete token figures a compaction works with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from .errors import ConfigurationError
from .messages import tool_names
from .model_limits import ModelLimits
from .results import Policy
from .setting import Setting


class ConfigurationModel(BaseModel):
    """A model of settings: invalid input raises ``ConfigurationError`` naming each field.

    Never pydantic's ``ValidationError``, and without chaining it: its text repeats every input
    value, and a setting may be a secret.
    """

    _described_as: ClassVar[str] = "configuration"
    """What the error message calls the model (``invalid <this>: ...``)."""
    _flattened: ClassVar[frozenset[str]] = frozenset()
    """Fields holding a nested model whose own fields the user sets as if they were ours: their
    name is left out of an error's path."""

    def __init__(self, /, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            problems = tuple(p for error in exc.errors() for p in self._problems(error))
            listed = "; ".join(
                f"{field}: {problem}" if field else problem for field, problem in problems
            )
            raise ConfigurationError(
                f"invalid {self._described_as}: {listed}", problems=problems
            ) from None

    @classmethod
    def _problems(cls, error: ErrorDetails) -> list[tuple[str, str]]:
        """``(field, problem)`` for one pydantic error; a nested model's own, under its path."""
        path = ""
        for step in error["loc"]:
            if path or step not in cls._flattened:
                path = _join(path, f"[{step}]" if isinstance(step, int) else step)
        cause = error.get("ctx", {}).get("error")
        if isinstance(cause, ConfigurationError) and cause.problems:  # a nested model's error
            return [(_join(path, field), problem) for field, problem in cause.problems]
        if error["type"] == "value_error":  # the validator's own words, not "Value error, ..."
            return [(path, str(cause) if cause is not None else error["msg"])]
        if error["type"] == "extra_forbidden":
            return [(path, "not a known setting")]
        return [(path, error["msg"])]


def _join(path: str, field: str) -> str:
    """``field`` under ``path``: ``pin[0]`` and ``tool`` make ``pin[0].tool``."""
    if not path or not field:
        return path or field
    return f"{path}{field}" if field.startswith("[") else f"{path}.{field}"


class PinRule(ConfigurationModel):
    """Keep the newest ``keep`` messages matching this rule verbatim (each with its whole unit).

    A rule matches when *all* its set fields match: ``role`` (exact), ``tool`` (a tool name the
    message calls or answers), ``pattern`` (a regular expression searched in the message text).
    Older matches are summarized like any other turn, so a pinned tool called on every turn
    cannot fill the window.
    """

    model_config = ConfigDict(frozen=True)
    _described_as = "pin rule"

    role: str | None = None
    tool: str | None = None
    pattern: str | None = None
    keep: int = Field(default=1, ge=1)
    """How many of the newest matching units stay verbatim."""

    @model_validator(mode="after")
    def _not_empty(self) -> PinRule:
        if self.role is None and self.tool is None and self.pattern is None:
            raise ValueError("a pin rule needs at least one of role, tool, pattern")
        if self.pattern is not None:
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"invalid pin pattern {self.pattern!r}: {exc}") from exc
        return self

    def matches(self, message: Mapping[str, Any], text: str, answered_tool: str | None) -> bool:
        """Whether ``message`` (whose text is ``text``) is pinned by this rule."""
        if self.role is not None and message.get("role") != self.role:
            return False
        if self.tool is not None:
            called = tool_names(message)
            if self.tool not in called and answered_tool != self.tool:
                return False
        return self.pattern is None or re.search(self.pattern, text) is not None


SummaryCapField = Literal["auto", "max_tokens", "max_completion_tokens"]
"""Where a summary request carries its completion cap (``CompactionConfig.summary_cap_field``)."""


class CompactionConfig(ConfigurationModel):
    """When to compact and what to keep. Keyword names are part of the public contract.

    Ratios are fractions of the *usable* window: ``context_window - reserve_output_tokens``.
    Invalid values raise ``ConfigurationError``. The fields marked ``Setting`` are settings of
    the proxy too (flags, ``SUMMARIZER_*`` variables, config-file keys, each also per model).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    _described_as = "compaction configuration"

    context_window: Annotated[
        int | None,
        Setting(per_model=True, metavar="TOKENS", default_text="each model's known window"),
    ] = Field(default=None, gt=0, description="Tokens the model accepts (its window).")
    trigger_ratio: Annotated[float, Setting(per_model=True)] = Field(
        default=0.8,
        gt=0,
        le=1,
        description="Compact when a request would exceed this share of the usable window (the "
        "window less the room kept for the reply).",
    )
    target_ratio: Annotated[float, Setting(per_model=True)] = Field(
        default=0.4,
        gt=0,
        le=1,
        description="A compaction brings the request under this share of the usable window.",
    )
    trigger_tokens: Annotated[
        int | None,
        Setting(per_model=True, metavar="TOKENS", default_text="trigger_ratio alone"),
    ] = Field(
        default=None,
        gt=0,
        description="Compact when a request would exceed this many tokens, or trigger_ratio of "
        "the usable window if that is lower: for large windows, where a share comes too late "
        "(80% of 1M tokens). The target and the ahead-of-time threshold come down in proportion.",
    )
    target_tokens: Annotated[
        int | None,
        Setting(per_model=True, metavar="TOKENS", default_text="target_ratio alone"),
    ] = Field(
        default=None,
        gt=0,
        description="A compaction brings the request under this many tokens, or target_ratio "
        "of the usable window if that is lower.",
    )
    prepare_ratio: Annotated[
        float | None,
        Setting(
            per_model=True,
            off=True,
            default_text="{default}, midway between the target and the trigger; off under the "
            "masking and ledger-only policies",
        ),
    ] = Field(
        default=None,
        gt=0,
        lt=1,
        description="Ahead-of-time compaction: above this share of the usable window (between "
        "the target and the trigger) the summary is written in the background while requests "
        "go out as they are, and the request that crosses the trigger uses it instead of "
        "waiting for the model.",
    )
    """None (the library's default): compactions happen when the trigger is crossed, as that
    request waits. The proxy's default is midway between the target and the trigger
    (``proxy.prepare_default``). Must lie between ``target_ratio`` and ``trigger_ratio``."""
    keep_recent_tokens: Annotated[
        int | None,
        Setting(per_model=True, metavar="TOKENS", default_text="as many as fit under the target"),
    ] = Field(
        default=None,
        ge=0,
        description="The newest turns (each with its tool results) are kept verbatim, up to "
        "this many tokens.",
    )
    """Its default: as many as fit under the target beside the kept parts and the summary."""
    max_summary_tokens: Annotated[int, Setting(per_model=True, metavar="TOKENS")] = Field(
        default=2_000, gt=0, description="Completion cap of the summary request."
    )
    summary_cap_field: Annotated[SummaryCapField, Setting(per_model=True)] = Field(
        default="auto",
        description="The field of the summary request that carries its cap: auto (the one the "
        "agent's request uses, else max_completion_tokens), max_tokens (a server that ignores "
        "max_completion_tokens, such as llama-cpp-python's, needs it, or its summaries run on "
        "unbounded) or max_completion_tokens.",
    )
    reserve_output_tokens: Annotated[
        int | None,
        Setting(
            per_model=True,
            top_level=False,
            metavar="TOKENS",
            default_text="the request's max_completion_tokens or max_tokens, else the model's "
            "output limit capped at a quarter of the window",
        ),
    ] = Field(default=None, ge=0, description="Room kept for the reply, in tokens.")
    compact: Annotated[bool, Setting(per_model=True)] = Field(
        default=True,
        description="Manage the context of this model's requests. Off: they are forwarded "
        "exactly as sent, never counted, compacted or offered recall (a request turns it off "
        "for itself with the header x-summarizer-compact: off).",
    )
    recall: Annotated[bool, Setting(per_model=True)] = Field(
        default=True,
        description="Once a conversation has a compaction, offer the model the recall tool "
        "(each summary lists the spans it replaced; the tool reads them back exactly).",
    )
    """Where the caller runs the tool loop (the proxy, ``wrap``). Off, or never compacted: the
    requests go out with the agent's own tools alone."""
    pin: tuple[PinRule, ...] = ()
    """Rules that keep messages verbatim."""
    summary_model: Annotated[
        str | None, Setting(per_model=True, metavar="MODEL", default_text="the request's model")
    ] = Field(
        default=None,
        description="Model that writes the summaries (a cheaper one, say). The provider's "
        "prompt cache is per model, so its summary requests are not served from the cache the "
        "agent's requests built: every one pays its whole prompt uncached.",
    )
    summary_instructions: Annotated[
        str | None, Setting(per_model=True, metavar="TEXT", default_text="none")
    ] = Field(
        default=None,
        min_length=1,
        max_length=4000,
        description="Instructions added to every summary request of this model, after the "
        "versioned summary prompt (what to keep, a section to add...). A request's "
        "x-summarizer-instructions header, or a session's compact endpoint, adds its own.",
    )
    ledger_max_tokens: int = Field(default=600, ge=0)
    """Bound on the fact ledger appended to each summary (and of the ledger that stands alone
    for a run under the ``masking`` and ``ledger-only`` policies)."""
    min_summary_score: float = Field(default=0.0, ge=0, le=1)
    """Below this fact score the summary is retried once with a stricter instruction."""
    tokenizer: str | None = None
    """A tiktoken encoding name, ``"approximate"`` (explicit opt-in), or None to choose by model."""
    model_limits: dict[str, ModelLimits] = Field(default_factory=dict)
    """Registry additions or overrides, by model-name prefix."""
    encodings: dict[str, str] = Field(default_factory=dict)
    """tiktoken encoding per model-name prefix, for models the built-in table does not know."""
    prompt_version: str = "v2"
    """Which version of the prompts in ``prompts/`` to use."""
    on_failure: Literal["fallback", "raise"] = "fallback"
    """When summarization fails: compact deterministically (``fallback``) or raise."""
    policy: Annotated[Policy, Setting(per_model=True)] = Field(
        default="self-summary",
        description="How a compaction makes room: self-summary (the model summarizes the old "
        "turns), hybrid (old tool outputs masked first, a summary if needed), masking (masked "
        "first, the fact ledger if needed) or ledger-only (the fact ledger); the last two call "
        "no model.",
    )
    """In detail:

    - ``self-summary``: the model summarizes the old turns (the fact ledger appended).
    - ``hybrid``: observation masking first: old tool outputs (outside the newest
      ``mask_keep_turns`` turns, the final turn and pinned turns) become a one-line placeholder,
      oldest first, until the request is under the target, with no model call; only when
      masking every such output is not enough does the model summarize (the masked view).
    - ``masking``: the same masking first; when it is not enough, the runs planned on the
      masked view are compacted as ``ledger-only``. No model call, ever.
    - ``ledger-only``: planned as ``self-summary``, but no model is asked: each run becomes a
      note saying it was compacted mechanically (how many messages and tokens) and its fact
      ledger (up to ``ledger_max_tokens``), extracted verbatim from the run's turns.

    The two model-free policies compact at once, so the proxy does not draft them ahead of
    time unless ``prepare_ratio`` is given."""
    mask_keep_turns: int = Field(default=3, ge=0)
    """With ``policy="hybrid"`` or ``"masking"``: the tool outputs of this many newest assistant
    turns are never masked (nor the final turn's, whatever this is)."""

    @field_validator("pin", mode="before")
    @classmethod
    def _coerce_pins(cls, value: Any) -> Any:
        if isinstance(value, (PinRule, Mapping)):
            return (value,)
        return value

    @model_validator(mode="after")
    def _ratios(self) -> CompactionConfig:
        if self.target_ratio >= self.trigger_ratio:
            raise ValueError(
                f"target_ratio ({self.target_ratio}) must be below trigger_ratio "
                f"({self.trigger_ratio}): a compaction has to leave room before the next one"
            )
        if (
            self.trigger_tokens is not None
            and self.target_tokens is not None
            and self.target_tokens >= self.trigger_tokens
        ):
            raise ValueError(
                f"target_tokens ({self.target_tokens}) must be below trigger_tokens "
                f"({self.trigger_tokens}): a compaction has to leave room before the next one"
            )
        if self.prepare_ratio is not None and not (
            self.target_ratio < self.prepare_ratio < self.trigger_ratio
        ):
            raise ValueError(
                f"prepare_ratio ({self.prepare_ratio}) must lie between target_ratio "
                f"({self.target_ratio}) and trigger_ratio ({self.trigger_ratio})"
            )
        return self
