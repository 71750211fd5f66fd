"""The real-model section's Markdown: recall per strategy and kind, the model's summaries'
verdicts, and the self-summary call cold against warm."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from context_summarizer.evaluation.dataset import Case, GoldFact
from context_summarizer.evaluation.metrics import StrategyAggregate, context_text, fact_kept
from context_summarizer.evaluation.records import ResultRow

from .real_model_cases import CacheTiming
from .results import Floor, markdown_table

FLOOR_NOTE = (
    "A 0.5B model quantized to 4 bits is a floor, not a forecast: it shows what the online check "
    "and the fallbacks must survive, and what the cache saves on hardware this small. A frontier "
    "model writes far better summaries; these recall figures say nothing about it."
)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _seconds(values: Sequence[float]) -> str:
    return f"{statistics.median(values):.1f} s" if values else "–"


def at_risk(case: Case) -> list[GoldFact]:
    """The case's gold facts stated nowhere every strategy keeps verbatim (the system prompt,
    the task, the latest message): the ones a compaction can lose."""
    system = [m for m in case.messages if m.get("role") in ("system", "developer")]
    task = next((m for m in case.messages if m.get("role") == "user"), None)
    pinned = context_text([*system, *([task] if task else []), case.messages[-1]])
    return [fact for fact in case.facts if not fact_kept(pinned, fact)]


def recall_by_kind(
    rows: Sequence[ResultRow], cases: Sequence[Case]
) -> dict[str, dict[str, tuple[int, int]]]:
    """Per strategy, per kind of fact at risk (``at_risk``): (kept, total) over the rows that
    ran; kind ``all`` sums them."""
    facts = {case.id: at_risk(case) for case in cases}
    table: dict[str, dict[str, tuple[int, int]]] = {}
    for row in rows:
        if row.status != "ok" or row.gold is None:
            continue
        kinds = table.setdefault(row.label, {})
        missed = {fact.id for fact in row.gold.missed}
        for fact in facts[row.case_id]:
            for kind in (fact.kind, "all"):
                kept, seen = kinds.get(kind, (0, 0))
                kinds[kind] = (kept + (fact.id not in missed), seen + 1)
    return table


def strategy_lines(
    rows: Sequence[ResultRow],
    aggregates: Sequence[StrategyAggregate],
    risky: Mapping[str, Mapping[str, tuple[int, int]]],
) -> list[list[str]]:
    """One line per strategy: rows, recall, summary tokens, model tokens and calls, call time,
    verdicts."""
    lines = []
    for a in aggregates:
        mine = [r for r in rows if r.label == a.label]
        ran = [r for r in mine if r.status == "ok"]
        calls = [c.latency_s for r in ran for c in r.calls]
        prompt = sum(c.prompt_tokens for r in ran for c in r.calls) / len(ran) if ran else 0.0
        output = sum(c.output_tokens for r in ran for c in r.calls) / len(ran) if ran else 0.0
        verdicts = Counter(v for r in mine for v in r.verdicts)
        lines.append(
            [
                a.label,
                f"{a.rows - a.errors - a.infeasible}/{a.rows}",
                str(a.infeasible),
                str(a.errors),
                _pct(a.gold_recall),
                _fraction(risky.get(a.label, {}).get("all")),
                "–" if a.summary_tokens is None else f"{a.summary_tokens:.0f}",
                f"{prompt:,.0f} / {output:,.0f}",
                str(len(calls)),
                _seconds(calls),
                " / ".join(str(verdicts[v]) for v in ("accepted", "repaired", "replaced")),
            ]
        )
    return lines


def report(
    rows: Sequence[ResultRow],
    timings: Sequence[CacheTiming],
    *,
    aggregates: Sequence[StrategyAggregate],
    runs: int,
    cases: Sequence[Case],
    server: str,
    settings: Mapping[str, float | int],
) -> tuple[str, list[Floor]]:
    """The section's body and floors."""
    intro = (
        f"Qwen2.5-Coder-0.5B-Instruct (Q4_K_M) behind {server}, on {len(cases)} of the {runs} "
        "mini-swe-agent SWE-bench runs in `../shared/trajectories/mini-swe-agent`: each run cut "
        f"at its last observation within {settings['cut']:,} tokens, and kept with the gold "
        "facts that part already states (files, failing tests, error lines, commands). Every "
        f"strategy compacts each cut run to {settings['budget']:.0%} of its tokens; summaries "
        f"are capped at {settings['max_summary_tokens']} tokens. A row is *infeasible* when what "
        "must stay verbatim (system prompt, task, latest message) leaves no room at that budget. "
        "Each self-summary request is made right after the agent's own request, as in "
        "production, so it extends the conversation llama.cpp just cached; the other calls meet "
        "the cache as the call before left it (hybrid's masked conversation shares its start; "
        "from-scratch's request opens with its own system prompt and a transcript, which no "
        "cache holds). *Model tokens* are what the model calls read and wrote, the cost; *ran* "
        "counts rows computed (not infeasible, no error)."
    )
    header = [
        "strategy", "ran", "infeasible", "errors", "gold recall", "facts at risk kept",
        "summary tokens",
        "model tokens in / out per case", "model calls", "call time (median)",
        "accepted / repaired / replaced",
    ]  # fmt: skip
    labels = {row.label for row in rows}
    ran = {(row.case_id, row.label) for row in rows if row.status == "ok"}
    common = [c for c in cases if all((c.id, label) in ran for label in labels)]
    kinds = recall_by_kind([row for row in rows if row.case_id in {c.id for c in common}], common)
    names = sorted({kind for per in kinds.values() for kind in per} - {"all"})
    kind_lines = [
        [label, *(_fraction(per.get(kind)) for kind in names)] for label, per in kinds.items()
    ]
    cold = [t.cold_s for t in timings]
    warm = [t.warm_s for t in timings]
    ratios = [t.warm_s / t.cold_s for t in timings if t.cold_s > 0]
    cold_tokens = _tokens(t.cold_output_tokens for t in timings)
    warm_tokens = _tokens(t.warm_output_tokens for t in timings)
    timing_lines = [
        ["cold (cache flushed)", _seconds(cold), cold_tokens],
        ["warm (after the agent's request)", _seconds(warm), warm_tokens],
    ]
    ratio = statistics.median(ratios) if ratios else None
    busy = sum(r.latency_s for r in rows) + sum(cold)
    work = (
        f"The rows took {busy / 60:.0f} minutes of compaction and summary calls, cold calls "
        "included (a rerun resumes from the rows already written, so the section's own time "
        "above can be far shorter)."
    )
    body = "\n\n".join(
        [
            intro,
            FLOOR_NOTE,
            markdown_table(header, strategy_lines(rows, aggregates, kinds)),
            f"*Gold recall* is the mean over runs of the share of a run's gold facts still stated "
            "in what would be sent next. Many of these facts sit in the task statement, which "
            "every strategy keeps, so the figure to compare is *facts at risk kept*: the facts "
            "stated only in turns a compaction may replace, pooled over the "
            f"{len(common)} runs every strategy could compact "
            f"({sum(len(at_risk(case)) for case in common)} of their "
            f"{sum(len(case.facts) for case in common)} gold facts). By kind:",
            markdown_table(["strategy", *names], kind_lines),
            *(
                [
                    "The self-summary call of each case, made twice on the same server: cold, "
                    "after an unrelated request flushed llama.cpp's cache, and warm, right after "
                    "the agent's own request (the cut conversation), as when compaction starts "
                    f"in production. Whole calls, prefill and decode, over {len(timings)} cases"
                    + (f"; median warm/cold per case {ratio:.2f}×." if ratio is not None else "."),
                    markdown_table(
                        ["self-summary call", "median time", "output tokens"], timing_lines
                    ),
                ]
                if timings
                else ["The cold self-summary call was not timed in this run (`--no-timing`)."]
            ),
            work,
        ]
    )
    floors = []
    if ratio is not None:
        name = "self-summary call warm / cold (median per case)"
        floors.append(Floor(name, f"{ratio:.2f}×", "< 1×", ratio < 1))
    return body, floors


def _fraction(pair: tuple[int, int] | None) -> str:
    if pair is None or pair[1] == 0:
        return "–"
    kept, total = pair
    return f"{kept / total:.0%} ({kept}/{total})"


def _tokens(values: Iterable[int | None]) -> str:
    numbers = [v for v in values if v is not None]
    return f"{statistics.median(numbers):.0f}" if numbers else "–"
