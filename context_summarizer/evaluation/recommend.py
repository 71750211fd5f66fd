"""What to choose: the proxy policy, ratios and ``[[models]]`` block a run's figures point to.

Strategies that are proxy policies (``PROXY_POLICIES``: what ``summarizer serve --policy`` and a
``[[models]]`` entry's ``policy`` take; the eval strategy of the same name runs that policy) can be
recommended; the others (``truncate``, ``given``, ``from-scratch``, ``self-summary-no-ledger``)
are baselines, shown beside them and never recommended. ``RULE`` states how one is chosen.

The ratios translate the run's budget into the proxy's terms. Without ``--context-window`` each
case was compacted to ``budget`` of its own tokens; a proxy that compacts when a request crosses
``trigger_ratio`` of the window reaches the same proportion with ``target_ratio = budget x
trigger_ratio`` (the trigger left at the proxy's default). With ``--context-window`` the budget
already is a share of the window, so ``target_ratio = budget``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, get_args

from ..core.config import CompactionConfig
from ..core.results import Policy
from .metrics import StrategyAggregate, spread
from .records import DEFAULT_MAX_SUMMARY_TOKENS, RunConfig
from .strategies import STRATEGIES

PROXY_POLICIES: tuple[str, ...] = get_args(Policy)
"""The strategies that are proxy policies (the engine's own list, so the two cannot drift);
every other strategy is a baseline."""
_BASELINES = [name for name in STRATEGIES if name not in PROXY_POLICIES]

MARGIN = 0.02
"""Gold recalls within this much (2 percentage points) of the best are a near-tie."""

DEFAULT_TRIGGER: float = CompactionConfig.model_fields["trigger_ratio"].default
"""The proxy's trigger ratio, kept in the recommended block."""

RULE = (
    f"The proxy policies ({', '.join(PROXY_POLICIES)}) without errors are compared; "
    "of them, those with the fewest cases outside the budget (infeasible or over it; normally "
    "none) compete, and the one with the best mean gold recall is recommended. Any within "
    f"{MARGIN * 100:.0f} percentage points of it is a near-tie, won by one that needs no model, "
    f"then by fewer tokens after. Baselines ({', '.join(_BASELINES)}) are shown, never "
    "recommended."
)
"""The recommendation rule, as the reports state it."""


def strategy_name(label: str) -> str:
    """The strategy of a report label (``given:claude-code`` is ``given``)."""
    return label.split(":", 1)[0]


def is_policy(label: str) -> bool:
    """Whether the strategy is a proxy policy (else it is a baseline)."""
    return strategy_name(label) in PROXY_POLICIES


def needs_model(label: str) -> bool:
    """Whether the strategy calls a model."""
    strategy = STRATEGIES.get(strategy_name(label))
    return strategy is not None and strategy.needs_model


def outside_budget(a: StrategyAggregate) -> tuple[int, str | None]:
    """How many of the strategy's rows did not fit the budget (infeasible, or over it), and
    which way, e.g. ``1 infeasible at this budget``; ``(0, None)`` when every one fit."""
    over = a.rows - a.errors - a.infeasible - a.met_budget
    parts = [
        *([f"{a.infeasible} infeasible at this budget"] if a.infeasible else []),
        *([f"{over} over budget"] if over > 0 else []),
    ]
    return a.infeasible + max(over, 0), ", ".join(parts) or None


def disqualified(a: StrategyAggregate) -> str | None:
    """Why a policy cannot be compared at all (errors, no gold fact scored), or None."""
    if a.errors:
        return f"{a.errors} error{'s' if a.errors != 1 else ''} (run again to retry)"
    if a.gold_recall is None:
        how = outside_budget(a)[1]
        return "no gold facts scored" + (f" ({how})" if how else "")
    return None


def contenders(aggregates: Sequence[StrategyAggregate]) -> list[StrategyAggregate]:
    """The policies ``RULE`` compares: not disqualified, and with the fewest rows outside the
    budget (normally none)."""
    usable = [a for a in aggregates if is_policy(a.label) and disqualified(a) is None]
    if not usable:
        return []
    fewest = min(outside_budget(a)[0] for a in usable)
    return [a for a in usable if outside_budget(a)[0] == fewest]


def shortfall(a: StrategyAggregate, field: Sequence[StrategyAggregate]) -> str | None:
    """Why a policy is not among the ``field`` of contenders, or None when it is."""
    if any(a is other for other in field):
        return None
    return disqualified(a) or outside_budget(a)[1] or "not compared"


@dataclass(frozen=True)
class Recommendation:
    """The run's recommendation (``policy`` None: none could be made, ``reason`` says why)."""

    policy: str | None
    reason: str
    trigger_ratio: float | None = None
    target_ratio: float | None = None
    ratios: str | None = None
    """How the ratios follow from the run's budget."""
    block: str | None = None
    """A ``[[models]]`` table for ``summarizer serve --config FILE``."""
    note: str | None = None
    """A caveat, e.g. that this proxy version does not accept the policy yet."""

    @property
    def flags(self) -> str | None:
        """The same choice as ``summarizer serve`` flags."""
        if self.policy is None:
            return None
        return (
            f"--policy {self.policy} --trigger-ratio {self.trigger_ratio:g} "
            f"--target-ratio {self.target_ratio:g}"
        )

    @property
    def headline(self) -> str:
        """``Recommendation: --policy ... (needs no model)``, or ``Recommendation: none.``"""
        if self.policy is None:
            return "Recommendation: none."
        needs = "needs a model" if needs_model(self.policy) else "needs no model"
        return f"Recommendation: {self.flags} ({needs})"

    @property
    def paragraphs(self) -> list[str]:
        """The reason, how the ratios follow from the budget, and any caveat."""
        return [text for text in (self.reason, self.ratios, self.note) if text]

    def lines(self) -> list[str]:
        """The recommendation as plain lines, as the terminal ends with it."""
        out = [self.headline, *self.paragraphs]
        if self.block:
            out += ["In the proxy's config file (summarizer serve --config FILE):", ""]
            out += [*self.block.splitlines(), ""]
        return [*out, f"Rule: {RULE}"]

    def to_json(self) -> dict[str, Any]:
        """What ``report.json`` holds under ``recommendation``."""
        return {
            "policy": self.policy,
            "reason": self.reason,
            "trigger_ratio": self.trigger_ratio,
            "target_ratio": self.target_ratio,
            "ratios": self.ratios,
            "models_block": self.block,
            "note": self.note,
            "rule": RULE,
            "margin": MARGIN,
        }


def _ratios(config: RunConfig) -> tuple[float, float, str]:
    """``(trigger, target, explanation)`` for the run's budget."""
    budget = config.budget
    if config.context_window:
        target = round(min(budget, 0.95), 2)
        trigger = max(DEFAULT_TRIGGER, round(min(1.0, target + 0.05), 2))
        why = (
            f"Ratios: the run compacted to {budget:.0%} of a {config.context_window:,}-token "
            f"window, so target_ratio {target:g}; trigger_ratio {trigger:g}"
            + (" is the proxy's default." if trigger == DEFAULT_TRIGGER else ".")
        )
        return trigger, target, why
    trigger = DEFAULT_TRIGGER
    target = max(0.01, round(budget * trigger, 2))
    why = (
        f"Ratios: the run compacted each case to {budget:.0%} of its tokens; a proxy compacting "
        f"at the default trigger_ratio {trigger:g} keeps that proportion with target_ratio "
        f"{target:g} ({budget:g} x {trigger:g})."
    )
    return trigger, target, why


def _toml(value: str | float | int) -> str:
    return json.dumps(value) if isinstance(value, str) else f"{value:g}"


def models_block(policy: str, trigger: float, target: float, config: RunConfig) -> str:
    """The ``[[models]]`` table for ``policy`` at these ratios (keys of
    ``proxy.config_file.ModelEntry``), with the run's window and summary cap when it set them."""
    name = config.model or "*"
    lines = [
        "[[models]]",
        f"name = {_toml(name)}"
        + ("  # every model; or the model name your agent sends" if name == "*" else ""),
        f"policy = {_toml(policy)}",
        f"trigger_ratio = {_toml(trigger)}",
        f"target_ratio = {_toml(target)}",
    ]
    if config.context_window:
        lines.append(f"context_window = {config.context_window}")
    if needs_model(policy) and config.max_summary_tokens != DEFAULT_MAX_SUMMARY_TOKENS:
        lines.append(f"max_summary_tokens = {config.max_summary_tokens}")
    if needs_model(policy) and config.summary_cap_field != "auto":
        lines.append(f"summary_cap_field = {_toml(config.summary_cap_field)}")
    return "\n".join(lines)


def _figures(a: StrategyAggregate) -> str:
    """``kept 83.5% of the gold facts in 31,870 tokens (0.29 of the tokens before)``, with the
    spread across runs in the brackets when there were several."""
    size = f"{a.tokens_after:,.0f} tokens" if a.tokens_after is not None else "its tokens"
    notes = []
    if a.compression_ratio is not None:
        notes.append(f"{a.compression_ratio:.2f} of the tokens before")
    runs = spread(a.gold_recall_runs) if a.runs > 1 else None
    if runs is not None:
        notes.append(f"gold recall {runs.min:.1%} to {runs.max:.1%} across {runs.runs} runs")
    bracket = f" ({'; '.join(notes)})" if notes else ""
    return f"kept {a.gold_recall or 0.0:.1%} of the gold facts in {size}{bracket}"


def _group(field: Sequence[StrategyAggregate], best: StrategyAggregate) -> str:
    """How the contenders did against the budget: who ``best`` was the best of."""
    count, how = outside_budget(best)
    if not count:
        return "kept every case within the budget"
    rows = "rows" if best.runs > 1 else "cases"
    each = " each" if len(field) > 1 else ""
    return f"missed the budget on the fewest {rows} ({count}{each}; {best.label}: {how})"


def choose(aggregates: Sequence[StrategyAggregate]) -> tuple[StrategyAggregate | None, str]:
    """The policy ``RULE`` picks, and the reason in a sentence or two (or why there is none)."""
    policies = [a for a in aggregates if is_policy(a.label)]
    if not policies:
        return None, (
            "no proxy policy was evaluated; run with -s masking,ledger-only (no model) or "
            "-s self-summary,hybrid (with --model and --upstream)."
        )
    field = contenders(policies)
    left_out = "; ".join(
        f"{a.label}: {shortfall(a, field)}" for a in policies if shortfall(a, field)
    )
    if not field:
        return None, f"no proxy policy can be compared ({left_out})."
    top = max(a.gold_recall or 0.0 for a in field)
    near = [a for a in field if (a.gold_recall or 0.0) >= top - MARGIN - 1e-9]
    best = min(
        near,
        key=lambda a: (needs_model(a.label), a.tokens_after or 0.0, -(a.gold_recall or 0.0)),
    )
    leader = max(field, key=lambda a: a.gold_recall or 0.0)
    if best is not leader and (leader.gold_recall or 0.0) > (best.gold_recall or 0.0):
        why = (
            "needs no model"
            if needs_model(leader.label) and not needs_model(best.label)
            else "keeps fewer tokens"
        )
        reason = (
            f"{best.label} {_figures(best)}, within {MARGIN * 100:.0f} points of "
            f"{leader.label}'s {leader.gold_recall or 0.0:.1%}, and {why}, so it wins the "
            "near-tie."
        )
    elif len(policies) == 1:
        reason = f"{best.label} {_figures(best)}, the only proxy policy evaluated"
        how = outside_budget(best)[1]
        reason += f" ({how})." if how else "; every case within the budget."
    elif len(field) == 1:
        reason = f"{best.label} {_figures(best)}, the only proxy policy that {_group(field, best)}."
    else:
        others = sorted((a for a in field if a is not best), key=lambda a: -(a.gold_recall or 0))
        reason = (
            f"{best.label} {_figures(best)}, the best gold recall of the {len(field)} proxy "
            f"policies that {_group(field, best)}; next: {others[0].label}, "
            f"{others[0].gold_recall or 0.0:.1%}."
        )
    if left_out:
        reason += f" Not compared: {left_out}."
    return best, reason


def recommend(aggregates: Sequence[StrategyAggregate], config: RunConfig) -> Recommendation:
    """The run's recommendation under ``RULE``, in the proxy's terms."""
    best, reason = choose(aggregates)
    if best is None:
        return Recommendation(policy=None, reason=reason[:1].upper() + reason[1:])
    policy = strategy_name(best.label)
    trigger, target, why = _ratios(config)
    note = None
    if policy not in get_args(Policy):
        note = (
            f"Note: this version of the proxy does not accept policy {policy!r} yet "
            f"(it takes {', '.join(get_args(Policy))})."
        )
    return Recommendation(
        policy=policy,
        reason=reason,
        trigger_ratio=trigger,
        target_ratio=target,
        ratios=why,
        block=models_block(policy, trigger, target, config),
        note=note,
    )
