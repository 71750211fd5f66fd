"""The concrete token figures of one request (``Budget``), resolved from a ``CompactionConfig``,
the model's registry entry and the request itself (``resolve_budget``, ``turn_budget``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from .config import CompactionConfig
from .errors import ReplyReserveTooLarge
from .model_limits import ModelLimits, lookup_limits


class Budget(BaseModel):
    """The concrete token figures for one request."""

    model_config = ConfigDict(frozen=True)

    context_window: int
    reserve_output_tokens: int
    trigger_tokens: int
    target_tokens: int
    prepare_tokens: int | None = None
    """Above this, a compaction is drafted in the background (None: never ahead of time)."""

    @property
    def usable(self) -> int:
        """Window minus the reply reserve."""
        return self.context_window - self.reserve_output_tokens

    def lowered_to(self, trigger: int) -> Budget:
        """This budget with its trigger at most ``trigger`` tokens, and its target lowered in
        the same proportion (a client's own compaction threshold; the window is unchanged)."""
        if trigger >= self.trigger_tokens:
            return self
        trigger = max(1, trigger)
        target = min(self.target_tokens, self.target_tokens * trigger // self.trigger_tokens)
        prepare = self.prepare_tokens
        if prepare is not None:
            prepare = min(prepare, prepare * trigger // self.trigger_tokens)
        return self.model_copy(
            update={"trigger_tokens": trigger, "target_tokens": target, "prepare_tokens": prepare}
        )


def summary_cap_key(config: CompactionConfig, request: Mapping[str, Any]) -> str:
    """The field the summary request's completion cap goes in (``summary_cap_field``)."""
    if config.summary_cap_field != "auto":
        return config.summary_cap_field
    return "max_tokens" if "max_tokens" in request else "max_completion_tokens"


def requested_output_tokens(body: Mapping[str, Any]) -> int | None:
    """The completion cap a request asks for, if any."""
    for key in ("max_completion_tokens", "max_tokens", "max_output_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def resolve_budget(
    config: CompactionConfig,
    model: str,
    *,
    requested_output: int | None = None,
    compact_threshold: int | None = None,
) -> Budget:
    """Token figures for a request to ``model``; raises ``UnknownModelError`` when unknowable.
    ``compact_threshold``: a client's own trigger for this request (``Budget.lowered_to``)."""
    limits: ModelLimits | None = None
    if config.context_window is None or (
        config.reserve_output_tokens is None and requested_output is None
    ):
        limits = lookup_limits(model, config.model_limits)
    window = config.context_window if config.context_window is not None else limits.context_window  # type: ignore[union-attr]
    if config.reserve_output_tokens is not None:
        reserve = config.reserve_output_tokens
    elif requested_output is not None:
        reserve = requested_output
    else:
        assert limits is not None
        reserve = min(limits.max_output_tokens, window // 4)
    if reserve >= window:
        raise ReplyReserveTooLarge(
            reserve=reserve,
            window=window,
            asked=config.reserve_output_tokens is None and requested_output is not None,
        )
    usable = window - reserve
    budget = Budget(
        context_window=window,
        reserve_output_tokens=reserve,
        trigger_tokens=int(usable * config.trigger_ratio),
        target_tokens=int(usable * config.target_ratio),
        prepare_tokens=(
            int(usable * config.prepare_ratio) if config.prepare_ratio is not None else None
        ),
    )
    if config.trigger_tokens is not None:
        budget = budget.lowered_to(config.trigger_tokens)
    if config.target_tokens is not None and config.target_tokens < budget.target_tokens:
        budget = budget.model_copy(update={"target_tokens": config.target_tokens})
    return budget if compact_threshold is None else budget.lowered_to(compact_threshold)


def turn_budget(
    config: CompactionConfig,
    model: str,
    request: Mapping[str, Any],
    compact_threshold: int | None = None,
) -> Budget:
    """``resolve_budget`` for one request: its own reply cap, and the client's threshold."""
    return resolve_budget(
        config,
        model,
        requested_output=requested_output_tokens(request),
        compact_threshold=compact_threshold,
    )
