"""The tables of the reports (strategies, missed facts by kind, cases, choosing a policy) and the
recommendation section, as data (``report_tables.Table``) or Markdown/HTML text.

Columns appear only when the run measured them: cost when a priced model made calls (an offline
run has no money to report), probe accuracy when probes ran, the spread of gold recall over runs
when a strategy ran more than once (``--repeat``; offline strategies are deterministic and run
once, which the column says).
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from .metrics import StrategyAggregate, spread
from .recommend import (
    RULE,
    Recommendation,
    contenders,
    is_policy,
    needs_model,
    outside_budget,
    shortfall,
)
from .records import ResultRow
from .report_facts import missed_cell
from .report_tables import Cell, Table, html_table, markdown_table, md_text


def pct(value: float | None) -> str:
    """A share as a percentage with one decimal, or an en dash."""
    return "–" if value is None else f"{value:.1%}"


def num(value: float | None, digits: int = 0) -> str:
    """A number with thousands separators, or an en dash."""
    return "–" if value is None else f"{value:,.{digits}f}"


def usd(value: float | None) -> str:
    """US dollars to four decimals, or ``n/a``."""
    return "n/a" if value is None else f"${value:.4f}"


def repeated(aggregates: Sequence[StrategyAggregate]) -> bool:
    """Whether some strategy ran more than once over the cases (``--repeat``)."""
    return any(a.runs > 1 for a in aggregates)


def runs_cell(a: StrategyAggregate) -> str:
    """Gold recall over runs: ``min / median / max (mean ± sd, N runs)``, or why there is one."""
    if not needs_model(a.label):
        return "deterministic: 1 run"
    values = spread(a.gold_recall_runs)
    if values is None:
        return "–"
    if values.runs == 1:
        return f"{values.mean:.1%} (1 run)"
    return (
        f"{values.min:.1%} / {values.median:.1%} / {values.max:.1%} "
        f"({values.mean:.1%} ± {values.sd:.1%}, {values.runs} runs)"
    )


def strategy_table(aggregates: Sequence[StrategyAggregate]) -> Table:
    """One line per strategy: gold recall and recoverable recall (of the gold facts missed, the
    share one recall search gives back), compression, tokens, latency; cost when a priced model
    made calls, probes when they ran, gold recall over runs with ``--repeat``."""
    probes = any(a.probe_accuracy is not None for a in aggregates)
    costs = any(a.cost_usd is not None for a in aggregates)
    runs = repeated(aggregates)
    headers = ["strategy", "cases", "errors", "infeasible", "within budget", "gold recall"]
    headers.append("recoverable")
    if runs:
        headers.append("gold recall over runs: min / median / max")
    headers += ["extracted recall", "after/before", "tokens after", "summary tokens"]
    headers += ["cost per case"] if costs else []
    headers.append("latency (s)")
    if probes:
        headers += ["probe accuracy", "with recall", "full-context accuracy", "gap"]
    lines: list[list[Cell]] = []
    for a in aggregates:
        line: list[Cell] = [
            a.label,
            str(a.cases or a.rows),
            str(a.errors),
            str(a.infeasible),
            f"{a.met_budget}/{a.rows}",
            pct(a.gold_recall),
            pct(a.recoverable_recall),
        ]
        line += [runs_cell(a)] if runs else []
        line += [
            pct(a.extracted_recall),
            num(a.compression_ratio, 3),
            num(a.tokens_after),
            num(a.summary_tokens),
        ]
        line += [usd(a.cost_usd)] if costs else []
        line.append(num(a.latency_s, 2))
        if probes:
            line += [
                pct(a.probe_accuracy),
                pct(a.probe_accuracy_recall),
                pct(a.probe_accuracy_full),
                pct(a.probe_gap),
            ]
        lines.append(line)
    return headers, lines, 1


def recall_per_1k(a: StrategyAggregate) -> float | None:
    """Mean gold recall per 1,000 tokens after: recall at matched size."""
    if a.gold_recall is None or not a.tokens_after:
        return None
    return a.gold_recall / (a.tokens_after / 1000)


def choice_table(aggregates: Sequence[StrategyAggregate], recommendation: Recommendation) -> Table:
    """The strategies side by side at matched size: role (proxy policy or baseline), what each
    needs, gold recall next to tokens after, recall per 1k tokens, and where each stands."""
    runs = repeated(aggregates)
    field = contenders(aggregates)
    headers = ["strategy", "role", "needs", "standing", "gold recall", "tokens after"]
    headers += ["after/before", "gold recall per 1k tokens", "within budget"]
    headers += ["gold recall over runs"] if runs else []
    lines: list[list[Cell]] = []
    for a in aggregates:
        if not is_policy(a.label):
            standing = "never recommended"
        elif a.label == recommendation.policy:
            standing = "recommended"
        else:
            missing = shortfall(a, field)
            how = outside_budget(a)[1]
            standing = (
                f"not compared: {missing}"
                if missing
                else (f"compared ({how})" if how else "compared")
            )
        line: list[Cell] = [
            a.label,
            "proxy policy" if is_policy(a.label) else "baseline",
            "a model" if needs_model(a.label) else "nothing",
            standing,
            pct(a.gold_recall),
            num(a.tokens_after),
            num(a.compression_ratio, 3),
            pct(recall_per_1k(a)),
            f"{a.met_budget}/{a.rows}",
        ]
        line += [runs_cell(a)] if runs else []
        lines.append(line)
    return headers, lines, 4


def kinds_table(aggregates: Sequence[StrategyAggregate]) -> Table:
    """Missed gold facts by kind, one line per strategy."""
    kinds = sorted({k for a in aggregates for k in a.missed_by_kind})
    lines: list[list[Cell]] = [
        [
            a.label,
            *(str(a.missed_by_kind.get(k, 0)) for k in kinds),
            str(sum(a.missed_by_kind.values())),
        ]
        for a in aggregates
    ]
    return ["strategy", *kinds, "total"], lines, 1


def case_table(rows: Sequence[ResultRow]) -> Table:
    """One line per case and strategy (and run, with ``--repeat``: ``#2`` is the second)."""
    runs = any(r.repeat for r in rows)
    lines: list[list[Cell]] = []
    for r in rows:
        if r.status in ("error", "infeasible"):
            status = f"{r.status}: {r.error}"
        else:
            status = "; ".join([*r.notes, *([f"failure: {r.failure}"] if r.failure else [])])
        label = f"{r.label} #{r.repeat + 1}" if runs and needs_model(r.label) else r.label
        lines.append(
            [
                r.case_id,
                label,
                missed_cell(r.gold.missed if r.gold else []),
                status or "–",
                pct(r.gold.recall if r.gold else None),
                pct(r.extracted.recall if r.extracted else None),
                num(r.compression_ratio, 3),
                f"{num(r.tokens_after)} / {num(r.budget_tokens)}",
            ]
        )
    headers = [
        "case",
        "strategy",
        "missed gold facts",
        "notes",
        "gold recall",
        "extracted recall",
        "after/before",
        "tokens after / budget",
    ]
    return headers, lines, 4


def recommendation_markdown(
    aggregates: Sequence[StrategyAggregate], recommendation: Recommendation
) -> list[str]:
    """The report's last section: the choice table, then the recommendation and its block."""
    out = ["## Recommendation", "", markdown_table(choice_table(aggregates, recommendation)), ""]
    out += [f"**{md_text(recommendation.headline)}**", ""]
    for paragraph in recommendation.paragraphs:
        out += [md_text(paragraph), ""]
    if recommendation.block:
        fence = "````" if "```" in recommendation.block else "```"
        out += ["In the proxy's config file (`summarizer serve --config FILE`):", ""]
        out += [f"{fence}toml", recommendation.block, fence, ""]
    return [*out, md_text(f"Rule: {RULE}"), ""]


def recommendation_html(
    aggregates: Sequence[StrategyAggregate], recommendation: Recommendation
) -> str:
    """The same section as HTML, every text escaped."""
    parts = [
        "<h2>Recommendation</h2>",
        html_table(choice_table(aggregates, recommendation)),
        f"<p><strong>{escape(recommendation.headline)}</strong></p>",
        *(f"<p>{escape(paragraph)}</p>" for paragraph in recommendation.paragraphs),
    ]
    if recommendation.block:
        parts += [
            "<p>In the proxy's config file (<code>summarizer serve --config FILE</code>):</p>",
            f"<pre><code>{escape(recommendation.block)}</code></pre>",
        ]
    parts.append(f'<p class="note">{escape(f"Rule: {RULE}")}</p>')
    return "".join(parts)
