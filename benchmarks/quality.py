"""Summary quality per strategy: the table ``summarizer eval`` writes, on the shipped dataset.

The offline strategies always run. The model strategies (self-summary and the others that call
a model) run when an upstream and a model are given, with the key from ``$OPENAI_API_KEY``:

    python -m benchmarks.quality [--quick] [--upstream URL --model NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from context_summarizer.evaluation.dataset import load_dataset
from context_summarizer.evaluation.metrics import aggregate
from context_summarizer.evaluation.pricing import load_prices
from context_summarizer.evaluation.recommend import recommend
from context_summarizer.evaluation.report import (
    choice_table,
    kinds_table,
    markdown_table,
    strategy_table,
)
from context_summarizer.evaluation.runner import EvalSettings, run_eval
from context_summarizer.evaluation.strategies import MODEL_STRATEGIES, OFFLINE_STRATEGIES

from . import real_sessions
from .results import Floor, Section, print_section
from .results import markdown_table as results_table

TITLE = "Quality"
COMMAND = "python -m benchmarks.quality"

DATASET = Path(__file__).resolve().parent.parent / "datasets" / "coding-sessions.jsonl"
BUDGET = 0.3
QUICK_CASES = 3


def run(
    *,
    quick: bool,
    out_dir: Path,
    upstream: str | None = None,
    model: str | None = None,
) -> Section:
    """Evaluate every strategy that can run here (``quick``: the first three cases)."""
    del out_dir  # the eval's own reports go to a temporary folder; the table goes in RESULTS.md
    with_model = upstream is not None and model is not None
    strategies = list(OFFLINE_STRATEGIES) + (list(MODEL_STRATEGIES) if with_model else [])
    cases, line_errors = load_dataset([DATASET])
    if line_errors:
        raise RuntimeError(f"the shipped dataset has bad lines: {line_errors}")
    limit = QUICK_CASES if quick else None
    with tempfile.TemporaryDirectory() as folder:
        settings = EvalSettings(
            datasets=[DATASET],
            strategies=strategies,
            budget=BUDGET,
            out=Path(folder) / "eval",
            model=model if with_model else None,
            upstream=upstream if with_model else None,
            api_key=os.environ.get("OPENAI_API_KEY"),
            limit=limit,
            progress=False,
        )
        outcome = run_eval(settings, cases)
    aggregates = aggregate(outcome.rows, load_prices())
    recommendation = recommend(aggregates, outcome.config)
    cases_run = len({row.case_id for row in outcome.rows})
    if with_model:
        models = f"The model strategies ran against `{model}` at the configured upstream."
    else:
        models = (
            "The model strategies (" + ", ".join(f"`{name}`" for name in MODEL_STRATEGIES) + ") "
            "need a model and ran only when `--upstream` and `--model` are given; this run had "
            "none, so only the offline strategies are shown."
        )
    command = f"summarizer eval {DATASET.relative_to(DATASET.parent.parent)} --budget {BUDGET}"
    body = "\n\n".join(
        [
            f"`{command} --out DIR` over {cases_run} cases: every strategy compacts each case to "
            f"{BUDGET:.0%} of its own tokens; gold recall is the share of the case's gold facts "
            "still stated in what would be sent next; *recoverable*, of the gold facts it "
            "missed, the share one search of the recall tool gives back from the replaced "
            "messages (mean over the cases that missed some; see below). " + models,
            markdown_table(strategy_table(aggregates)),
            "Missed gold facts by kind:",
            markdown_table(kinds_table(aggregates)),
            "Choosing a policy (the report's last section: proxy policies can be recommended, "
            "baselines never; gold recall next to tokens after, and per 1k tokens, compares "
            "strategies of different sizes):",
            markdown_table(choice_table(aggregates, recommendation)),
            f"**{recommendation.headline}** " + " ".join(recommendation.paragraphs),
        ]
    )
    floors: list[Floor] = []
    if not quick and real_sessions.SHARED.is_dir():
        sessions, floors = _real_sessions()
        body += "\n\n" + sessions
    return Section(title=TITLE, command=COMMAND, body=body, floors=floors)


def _real_sessions() -> tuple[str, list[Floor]]:
    """The dev set of real sessions (``real_sessions``): the table, precision and floors."""
    found, items = real_sessions.measure(real_sessions.SHARED)
    before = [(converter, text) for converter, text in real_sessions.recorded()["items"]]
    labels = json.loads(real_sessions.LABELS.read_text(encoding="utf-8"))
    converters = sorted({converter for converter, _ in items} | {c for c, _ in before})
    now = real_sessions.precision_by_converter(items, labels)
    then = real_sessions.precision_by_converter(before, labels)

    def cell(pair: tuple[int, int] | None) -> str:
        return f"{pair[0]}/{pair[1]} ({pair[0] / pair[1]:.0%})" if pair and pair[1] else "–"

    def pooled(per: dict[str, tuple[int, int]]) -> tuple[int, int]:
        return sum(k for k, _ in per.values()), sum(t for _, t in per.values())

    precision_rows = [[c, cell(then.get(c)), cell(now.get(c))] for c in converters]
    precision_rows.append(["all", cell(pooled(then)), cell(pooled(now))])
    text = "\n\n".join(
        [
            "**Real sessions** (`python -m benchmarks.real_sessions`): every trajectory in "
            "`../shared/trajectories` the converters read (2 Claude Code sessions with the "
            "summary Claude Code wrote at its own compaction, 31 mini-swe-agent SWE-bench runs, "
            "SWE-agent runs, the first trial of each tau-bench task), a third of it held aside "
            "by a hash of the case id (never the two Claude Code sessions). Gold facts are the "
            "converters' own, from what each run did, not the ledger's extractor. Each strategy "
            "compacts each case to 0.1 and to 0.3 of its tokens; each cell pools the cases every "
            "strategy could compact (*left out*: a case some strategy could not fit, mostly "
            "tau-bench's 3k-token policy prompt and mini-swe-agent's task, which no strategy "
            "may compact). *Ledger-only before* is the fact ledger before it ranked by what the "
            f"agent did (commit {real_sessions.BEFORE_COMMIT}, recorded per case in "
            "`benchmarks/ledger_before.json`); `masking` is the proxy's policy (masking, then "
            "the ledger where masking is not enough), `observation-masking` the published "
            "baseline (masking, then the oldest turns dropped).",
            real_sessions.table(found),
            "Recoverable recall beside gold recall, on the same cases: of the gold facts a "
            "strategy's compacted contexts missed, how many one search of the recall tool "
            "(`context_summarizer.core.recall`, default bounds: 8 excerpts, 4,000 characters) "
            "gives back "
            "from the messages the compaction replaced, the query being what an agent would type "
            "for the fact's kind (a file name, a command's program and first argument, an error's "
            "class or code, a test's name, an identifier itself, a sentence's three longest "
            "uncommon words; `context_summarizer/evaluation/recoverable.py`). A query that matches "
            "too "
            "many places to bring the fact back within the bounds counts as not recovered.",
            real_sessions.recoverable_table(found),
            "Ledger precision, before and after: the share of ledger items a reader would call "
            f"a fact, on a fixed sample of up to {real_sessions.SAMPLE_SIZE} distinct items per "
            "converter (seeded) of every ledger the ledger-only rows wrote (before: recorded "
            "in `benchmarks/ledger_before.json`). The verdicts, one reader's, are in "
            "`benchmarks/ledger_precision.json`; what failed before were attribute names read "
            "as dotfiles (`.netloc`, `.close`), regex and escape fragments (`\\w+`), bare "
            "extensions (`.exs`), URL routes (`/heatmap`), one-word code spans (`keys`).",
            results_table(["converter", "before", "after"], precision_rows),
        ]
    )
    return text, real_sessions.floors(found)


def main() -> None:
    """Command line: print the section's Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: three cases")
    parser.add_argument("--upstream", help="OpenAI-compatible base URL for the model strategies")
    parser.add_argument("--model", help="the model the model strategies call")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        section = run(
            quick=args.quick, out_dir=Path(folder), upstream=args.upstream, model=args.model
        )
    print_section(section)


if __name__ == "__main__":
    main()
