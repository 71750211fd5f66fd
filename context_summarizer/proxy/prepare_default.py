"""The proxy drafts compactions ahead of time by default (``prepare_ratio``), the library not.

``summarizer serve`` (``Settings``) sets ``prepare_ratio`` when it is not given: midway between
the target and the trigger (0.6 with the default 0.4 and 0.8), so it always lies between them
whatever thresholds are chosen. ``off`` (or ``0``) as a flag, ``SUMMARIZER_PREPARE_RATIO``, a
config-file value or a ``[[models]]`` entry's turns it off; ``Settings(prepare_ratio=None)`` too.
``CompactionConfig`` itself keeps None (off) as its default: in a library user's process, drafts
are background threads (or tasks) making summary calls, which the user asks for.

The model-free policies (``masking``, ``ledger-only``) compact at once, with no model call, so
nothing is gained by drafting them: their default is off. A ratio given with them is still
taken (and a draft is then as correct as any). A ``[[models]]`` entry whose policy is
model-free drafts only with its own ratio, or with the top level's when that one's policy is
model-free too (so the ratio was chosen for such a policy); an entry with a model policy under
a model-free top level that set no ratio drafts at the default, midway.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.config import CompactionConfig
from ..core.results import MODEL_FREE_POLICIES

OFF = "off"
"""The value (``--prepare-ratio off``) that turns drafting ahead of time off."""


def is_off(value: Any) -> bool:
    """Whether ``value`` turns drafting off: ``off`` (any case) or zero."""
    if isinstance(value, str):
        value = value.strip().lower()
        return value == OFF or _number(value) == 0
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value == 0


def midway(target_ratio: float, trigger_ratio: float) -> float:
    """The default prepare ratio for these thresholds: midway between them."""
    return round((target_ratio + trigger_ratio) / 2, 4)


def with_prepare_default(compaction: Any) -> Any:
    """``compaction`` (the ``compaction`` value given to ``Settings``: None, a mapping of its
    fields, or a ``CompactionConfig``) with ``prepare_ratio`` resolved: ``off`` (or 0) becomes
    None, and an unset one is ``midway`` between its thresholds. Anything invalid is left for
    the validation to name. A model-free policy's unset one stays unset (off)."""
    if compaction is None:
        compaction = {}
    if isinstance(compaction, CompactionConfig):
        if "prepare_ratio" in compaction.model_fields_set:
            return compaction
        if compaction.policy in MODEL_FREE_POLICIES:
            return compaction
        ratio = midway(compaction.target_ratio, compaction.trigger_ratio)
        return compaction.model_copy(update={"prepare_ratio": ratio})
    if not isinstance(compaction, Mapping):
        return compaction
    if "prepare_ratio" in compaction:
        if is_off(compaction["prepare_ratio"]):
            return {**compaction, "prepare_ratio": None}
        return compaction
    fields = CompactionConfig.model_fields
    if compaction.get("policy", fields["policy"].default) in MODEL_FREE_POLICIES:
        return compaction
    target = _number(compaction.get("target_ratio", fields["target_ratio"].default))
    trigger = _number(compaction.get("trigger_ratio", fields["trigger_ratio"].default))
    if target is None or trigger is None or not 0 < target < trigger <= 1:
        return compaction
    return {**compaction, "prepare_ratio": midway(target, trigger)}


def entry_prepare_ratio(given: Any, base: CompactionConfig, merged: dict[str, Any]) -> Any:
    """The prepare ratio of a ``[[models]]`` entry: its own (``off``: None), else the top-level
    one when it still lies between the entry's thresholds, else midway between them (an entry
    that moves the thresholds keeps drafting, at a point that fits them). A model-free entry
    under a top level with a model policy: None; an entry with a model policy under a
    model-free top level that set no ratio: midway (see the module docstring)."""
    if given is not None:
        return None if is_off(given) else given
    ratio = base.prepare_ratio
    target, trigger = _number(merged["target_ratio"]), _number(merged["trigger_ratio"])
    if merged.get("policy") in MODEL_FREE_POLICIES:
        if base.policy not in MODEL_FREE_POLICIES:
            return None  # the top level's ratio was for a policy that calls a model
    elif base.policy in MODEL_FREE_POLICIES and "prepare_ratio" not in base.model_fields_set:
        # Off at the top level only as its policy's default: midway for this one.
        if target is not None and trigger is not None and 0 < target < trigger <= 1:
            return midway(target, trigger)
        return None
    if ratio is None or target is None or trigger is None or target < ratio < trigger:
        return ratio
    return midway(target, trigger) if 0 < target < trigger <= 1 else ratio


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
