"""The reports of a run: ``report.json``, ``report.md`` (tables) and ``report.html``.

All three are rebuilt from the rows of ``results.jsonl`` (and the price table, so costs follow
``--prices`` without recomputing rows). Markdown and HTML open with one verdict line per strategy
(``report_verdicts``), then the tables: strategies, missed gold facts by kind, the facts the
summaries missed by their text (``report_facts``), the cases. The HTML page is self-contained:
inline CSS and inline SVG charts (gold recall against compression per strategy; missed gold facts
by kind), no script, no external resource; every text from the data is escaped
(``report_tables``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from .charts import Point, grouped_bars, scatter
from .metrics import aggregate, priced_calls, row_cost, spread
from .pricing import Price, price_for
from .recommend import recommend
from .records import ResultRow, RunConfig
from .report_facts import facts_summary, facts_table, missed_facts, scored_labels
from .report_sections import (
    case_table,
    choice_table,
    kinds_table,
    recommendation_html,
    recommendation_markdown,
    strategy_table,
)
from .report_tables import Table, html_table, markdown_table, md_text
from .report_verdicts import verdicts

__all__ = [
    "COST_NOTE",
    "METRIC_NOTE",
    "Table",
    "case_table",
    "choice_table",
    "facts_sections",
    "html_table",
    "kinds_table",
    "markdown_table",
    "render_html",
    "render_markdown",
    "report_data",
    "strategy_table",
    "write_reports",
]

COST_NOTE = (
    "Cost is an estimate per case: the strategy's model calls plus the next request with the "
    "compacted context (its output not counted), at the list prices of the price table. Cached "
    "tokens are estimated, not measured: a self-summary request reuses the live prefix (all but "
    "the appended instruction is cached), a from-scratch request is a new prompt (uncached), and "
    "the next request reuses only its leading unchanged messages (tools, system prompt, task). "
    "OpenAI-style models cache automatically (1,024 tokens minimum, 128-token steps); "
    "Anthropic-style models at explicit breakpoints (writes 1.25x input, reads 0.1x)."
)
METRIC_NOTE = (
    "Gold recall: share of the dataset's facts the compacted context still mentions "
    "(normalised: case, whitespace, quoting, path separators, aliases). Extracted recall: share "
    "of the facts the project's extractor finds in what was removed or rewritten that are still "
    "mentioned; the ledger is built by the same extractor, so it favours ledger strategies. "
    "Compression: tokens after / tokens before (lower is smaller). A case already within budget "
    "is left unchanged by every strategy but `given`."
)


def report_data(
    rows: Sequence[ResultRow], *, config: RunConfig, prices: Mapping[str, Price]
) -> dict[str, Any]:
    """What ``report.json`` holds: the run's config, the verdict lines, per-strategy aggregates
    (with the spread of gold recall over runs), missed gold facts (every one, by text, with ids,
    kind and cases), per-case rows and the recommendation. Costs are null unless a priced model
    made calls."""
    aggregates = aggregate(rows, prices)
    priced = priced_calls(rows, prices)
    models = sorted({r.agent_model for r in rows} | {c.model for r in rows for c in r.calls})
    used = {m: price_for(m, prices) for m in models}
    cases = []
    for row in rows:
        cases.append(
            {
                "case_id": row.case_id,
                "strategy": row.label,
                "repeat": row.repeat,
                "status": row.status,
                "error": row.error,
                "tokens_before": row.tokens_before,
                "budget_tokens": row.budget_tokens,
                "tokens_after": row.tokens_after,
                "met_budget": row.met_budget,
                "compression_ratio": row.compression_ratio,
                "summary_tokens": row.summary_tokens,
                "gold_recall": row.gold.recall if row.gold else None,
                "missed_gold": [m.model_dump() for m in row.gold.missed] if row.gold else [],
                "recoverable_recall": row.recoverable.recall if row.recoverable else None,
                "extracted_recall": row.extracted.recall if row.extracted else None,
                "cost_usd": row_cost(row, prices) if priced else None,
                "latency_s": row.latency_s,
                "probe_accuracy": row.probe_accuracy,
                "probe_accuracy_full": row.probe_accuracy_full,
                "probe_gap": row.probe_gap,
                "probe_accuracy_recall": row.probe_accuracy_recall,
                "notes": row.notes,
                "failure": row.failure,
            }
        )
    return {
        "config": config.model_dump(),
        "prices": {m: (p.model_dump() if p else None) for m, p in used.items()},
        "verdicts": [v.line for v in verdicts(aggregates)],
        "strategies": [
            a.model_dump() | {"gold_recall_spread": _spread_json(a.gold_recall_runs)}
            for a in aggregates
        ],
        "missed_facts": {
            label: [e.model_dump() | {"count": e.count} for e in entries]
            for label, entries in missed_facts(rows).items()
        },
        "cases": cases,
        "recommendation": recommend(aggregates, config).to_json(),
        "notes": {"metrics": METRIC_NOTE, "cost": COST_NOTE if priced else None},
    }


def _spread_json(values: list[float]) -> dict[str, Any] | None:
    found = spread(values)
    return found.model_dump() if found is not None and found.runs > 1 else None


def _run_lines(config: RunConfig, rows: Sequence[ResultRow]) -> list[str]:
    base = (
        f"{config.context_window:,}-token window"
        if config.context_window
        else "each case's own token count"
    )
    runs = max((r.repeat + 1 for r in rows), default=1)
    repeats = (
        [
            f"Runs: each model strategy ran {runs} times over the cases (--repeat {runs}); "
            "offline strategies are deterministic and ran once."
        ]
        if runs > 1
        else []
    )
    return [
        f"Budget: {config.budget:.0%} of {base}.",
        f"Model: {config.model or 'none (offline strategies only)'}; probes: "
        f"{'yes' if config.probes else 'no'}; prompts {config.prompt_version} "
        f"({config.prompt_digest[:12]}).",
        f"Datasets: {', '.join(d[:12] for d in config.datasets)} (SHA-256); "
        f"{len({r.case_id for r in rows})} cases, {len(rows)} rows.",
        *repeats,
    ]


def facts_sections(rows: Sequence[ResultRow]) -> list[tuple[str, Table | None]]:
    """Per strategy, the sentence introducing its missed gold facts and their table (None when
    it missed none)."""
    scored = scored_labels(rows)
    return [
        (facts_summary(label, entries, label in scored), facts_table(entries) if entries else None)
        for label, entries in missed_facts(rows).items()
    ]


def render_markdown(
    rows: Sequence[ResultRow], *, config: RunConfig, prices: Mapping[str, Price]
) -> str:
    """``report.md``: the verdict lines first, then the tables, the notes, and last the
    recommendation."""
    aggregates = aggregate(rows, prices)
    cost = [COST_NOTE, ""] if priced_calls(rows, prices) else []
    facts: list[str] = []
    for sentence, table in facts_sections(rows):
        facts += [md_text(sentence), ""]
        if table is not None:
            facts += [markdown_table(table), ""]
    parts = [
        "# Summary-quality evaluation",
        "",
        *(f"- {md_text(v.line)}" for v in verdicts(aggregates)),
        "",
        *_run_lines(config, rows),
        "",
        "## Strategies",
        "",
        markdown_table(strategy_table(aggregates)),
        "",
        "## Missed gold facts by kind",
        "",
        markdown_table(kinds_table(aggregates)),
        "",
        "## Facts the summaries missed",
        "",
        *facts,
        "## Cases",
        "",
        markdown_table(case_table(rows)),
        "",
        "## Notes",
        "",
        METRIC_NOTE,
        "",
        *cost,
        *recommendation_markdown(aggregates, recommend(aggregates, config)),
    ]
    return "\n".join(parts)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.6rem}h2{font-size:1.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0;font-size:.85rem}
th,td{border:1px solid #ccc;padding:.25rem .5rem;text-align:right;vertical-align:top}
.text{text-align:left}
thead th{background:#f3f3f3}.note{color:#555;font-size:.85rem;max-width:900px}
figure{margin:1rem 0}code{white-space:pre-wrap;overflow-wrap:anywhere}
ul.verdicts{font-size:1.05rem;padding-left:1.2rem}ul.verdicts li{margin:.2rem 0}
"""


def render_html(
    rows: Sequence[ResultRow], *, config: RunConfig, prices: Mapping[str, Price]
) -> str:
    """``report.html``: self-contained, the verdict lines first, with the two charts, the
    recommendation last."""
    aggregates = aggregate(rows, prices)
    cost = f'<p class="note">{escape(COST_NOTE)}</p>' if priced_calls(rows, prices) else ""
    series: dict[str, list[Point]] = {a.label: [] for a in aggregates}
    for r in rows:
        recall = r.gold.recall if r.status == "ok" and r.gold is not None else None
        if recall is not None and r.compression_ratio is not None:
            title = (
                f"{r.case_id} / {r.label}: gold recall {recall:.3f}, "
                f"compression {r.compression_ratio:.3f}"
            )
            series[r.label].append(Point(r.compression_ratio, recall, title))
    recall_chart = scatter(
        series,
        x_label="compression: tokens after / tokens before",
        y_label="gold-fact recall",
        title="Gold-fact recall against compression",
        x_reference=None if config.context_window else config.budget,
        x_reference_label="budget",
    )
    kinds_chart = grouped_bars(
        {a.label: a.missed_by_kind for a in aggregates},
        title="Missed gold facts by kind",
        y_label="missed facts (all cases)",
    )
    meta = "".join(f"<p>{escape(line)}</p>" for line in _run_lines(config, rows))
    lines = "".join(
        f"<li><strong>{escape(v.label)}</strong>: {escape(v.text)}</li>"
        for v in verdicts(aggregates)
    )
    facts = "".join(
        f"<p>{escape(sentence)}</p>" + (html_table(table) if table is not None else "")
        for sentence, table in facts_sections(rows)
    )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        "<title>Summary-quality evaluation</title>"
        f"<style>{_CSS}</style></head><body>"
        "<h1>Summary-quality evaluation</h1>"
        f'<ul class="verdicts">{lines}</ul>'
        f"{meta}"
        "<h2>Strategies</h2>"
        f"{html_table(strategy_table(aggregates))}"
        f"<figure>{recall_chart}</figure>"
        "<h2>Missed gold facts by kind</h2>"
        f"{html_table(kinds_table(aggregates))}"
        f"<figure>{kinds_chart}</figure>"
        f"<h2>Facts the summaries missed</h2>{facts}"
        "<h2>Cases</h2>"
        f"{html_table(case_table(rows))}"
        f'<h2>Notes</h2><p class="note">{escape(METRIC_NOTE)}</p>{cost}'
        f"{recommendation_html(aggregates, recommend(aggregates, config))}"
        "</body></html>\n"
    )


def _write(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


def write_reports(
    out: Path,
    rows: Sequence[ResultRow],
    *,
    config: RunConfig,
    prices: Mapping[str, Price],
    extra_markdown: str = "",
) -> list[Path]:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``out``; their paths.
    ``extra_markdown``: a section appended to ``report.md`` (the candidates', say)."""
    paths = [out / "report.json", out / "report.md", out / "report.html"]
    data = report_data(rows, config=config, prices=prices)
    _write(paths[0], json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    markdown = render_markdown(rows, config=config, prices=prices)
    _write(paths[1], f"{markdown}\n{extra_markdown}" if extra_markdown else markdown)
    _write(paths[2], render_html(rows, config=config, prices=prices))
    return paths
