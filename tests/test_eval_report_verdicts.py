"""The one-line verdict per strategy that opens the eval reports: true for every combination of
the metrics a run has (probes or not, prices or not, summaries or not, failed rows or not)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from context_summarizer.evaluation.dataset import write_dataset
from context_summarizer.evaluation.metrics import aggregate
from context_summarizer.evaluation.pricing import Price
from context_summarizer.evaluation.records import FactRecall, MissedFact, ModelCall, ResultRow
from context_summarizer.evaluation.report_verdicts import verdicts
from context_summarizer.testing import TestUpstream

from .eval_responders import EvalResponder
from .test_eval_runner import invoke, rows_of
from .test_eval_strategies import make_case

PRICES = {"gpt-4o": Price(input=2.5, cached_input=1.25, cache_write=2.5, output=10.0)}
CALL = ModelCall(purpose="summary", model="gpt-4o", prompt_tokens=200, output_tokens=50)
"""A summary call to a priced model: $0.0005 in, $0.0005 out."""


def row(
    case: str = "a", strategy: str = "truncate", recall: float | None = 0.5, **update: object
) -> ResultRow:
    """A successful row of an unpriced model: 250 of 1,000 tokens kept, within budget."""
    missed = [MissedFact(id="x", kind="path", text="a.py")] if recall == 0.5 else []
    gold = (
        FactRecall(total=0, kept=0, recall=None)
        if recall is None
        else FactRecall(total=2, kept=2 - len(missed), recall=recall, missed=missed)
    )
    base = ResultRow(
        case_id=case,
        strategy=strategy,
        status="ok",
        agent_model="mystery-model",
        tokens_before=1000,
        budget_tokens=300,
        tokens_after=250,
        met_budget=True,
        compression_ratio=0.25,
        gold=gold,
    )
    return base.model_copy(update=update)


def error_row(case: str, strategy: str = "truncate", status: str = "error") -> ResultRow:
    return ResultRow(
        case_id=case,
        strategy=strategy,
        status=status,  # type: ignore[arg-type]
        error="boom",
        agent_model="mystery-model",
        tokens_before=1000,
        budget_tokens=300,
    )


def lines(rows: list[ResultRow]) -> list[str]:
    return [v.line for v in verdicts(aggregate(rows, PRICES))]


def test_an_offline_strategy_without_prices_or_probes_says_recall_and_size_only() -> None:
    assert lines([row("a"), row("b", recall=1.0)]) == [
        "truncate: kept 75.0% of gold facts at 0.25x tokens"
    ]


def test_every_measure_present_makes_its_clause() -> None:
    rows = [
        row(
            "a",
            "self-summary",
            agent_model="gpt-4o",
            calls=[CALL],
            verdicts=["accepted", "repaired"],
            probe_accuracy=0.5,
            probe_accuracy_full=1.0,
        ),
        row(
            "b",
            "self-summary",
            recall=1.0,
            agent_model="gpt-4o",
            verdicts=["replaced"],
            probe_accuracy=1.0,
            probe_accuracy_full=1.0,
            met_budget=False,
            compression_ratio=0.35,
        ),
        error_row("c", "self-summary"),
        error_row("d", "self-summary", status="infeasible"),
    ]
    # 250 uncached input tokens of the next request at $2.50 per million ($0.000625), and
    # case a's summary call ($0.001): ($0.001625 + $0.000625) / 2
    assert lines(rows) == [
        "self-summary: kept 75.0% of gold facts at 0.30x tokens; 2 of 4 cases scored (1 error, "
        "1 infeasible at this budget); 1 over budget; 1 of 3 summaries repaired, 1 replaced; "
        "answered 75% of probes (100% with the full context); $0.0011 per case (estimated)"
    ]


@pytest.mark.parametrize(
    ("probes", "priced", "summaries", "failures"),
    list(itertools.product([False, True], repeat=4)),
)
def test_each_clause_appears_exactly_when_its_measure_exists(
    probes: bool, priced: bool, summaries: bool, failures: bool
) -> None:
    update: dict[str, object] = {}
    if probes:
        update |= {"probe_accuracy": 0.5, "probe_accuracy_full": 1.0}
    if priced:
        update |= {"agent_model": "gpt-4o", "calls": [CALL]}
    if summaries:
        update["verdicts"] = ["accepted"]
    rows = [row("a", "s", **update), row("b", "s", **update)]
    if failures:
        rows.append(error_row("c", "s"))
    (line,) = lines(rows)
    assert line.startswith("s: kept 50.0% of gold facts at 0.25x tokens")
    assert ("probes" in line) == probes
    assert ("$" in line) == priced
    assert ("0 of 2 summaries repaired, 0 replaced" in line) == summaries
    assert ("summar" in line) == summaries
    assert ("2 of 3 cases scored (1 error)" in line) == failures
    assert "None" not in line and "nan" not in line and "best" not in line


def test_no_money_without_a_priced_model_that_made_calls() -> None:
    """An offline run prices nothing, even when the agent model has a list price; a model with
    no price that made calls does not make one either."""
    offline = [row("a", agent_model="gpt-4o"), row("b", "masking", agent_model="gpt-4o")]
    assert not any("$" in line for line in lines(offline))
    assert all(a.cost_usd is None for a in aggregate(offline, PRICES))
    unpriced = ModelCall(purpose="summary", model="mystery-model", prompt_tokens=200)
    assert not any("$" in line for line in lines([row("a", calls=[unpriced])]))
    # one priced call anywhere in the run: every strategy's cost is shown, next requests included
    priced = [*offline, row("c", "self-summary", agent_model="gpt-4o", calls=[CALL])]
    assert all("per case (estimated)" in line for line in lines(priced))


def test_a_strategy_that_scored_no_case_says_so_and_nothing_else() -> None:
    rows = [
        error_row("a", "self-summary"),
        error_row("b", "self-summary"),
        error_row("a", "ledger-only", status="infeasible"),
    ]
    assert lines(rows) == [
        "self-summary: no case scored (2 errors)",
        "ledger-only: no case scored (1 infeasible at this budget)",
    ]


def test_cases_without_gold_facts_give_the_size_alone() -> None:
    assert lines([row("a", recall=None)]) == ["truncate: 0.25x tokens (no gold facts to score)"]


def test_one_summary_is_singular() -> None:
    (line,) = lines([row(verdicts=["repaired"])])
    assert line.endswith("; 1 of 1 summary repaired, 0 replaced")


def test_the_best_recall_is_marked_ties_going_to_fewer_tokens() -> None:
    rows = [
        row("a", "truncate", recall=0.5),
        row("a", "masking", recall=1.0, compression_ratio=0.28),
        row("a", "ledger-only", recall=1.0, compression_ratio=0.26),
        row("a", "given", recall=None),
    ]
    best = [v.label for v in verdicts(aggregate(rows)) if v.best]
    assert best == ["ledger-only"]
    assert lines(rows)[2] == "ledger-only: kept 100.0% of gold facts at 0.26x tokens; best recall"
    assert not lines(rows)[1].endswith("best recall")


def test_a_full_tie_marks_every_tied_strategy_and_a_lone_strategy_is_not_marked() -> None:
    tied = [row("a", "masking", recall=1.0), row("a", "truncate", recall=1.0)]
    assert [v.best for v in verdicts(aggregate(tied))] == [True, True]
    alone = [row("a", "masking", recall=1.0), row("a", "given", recall=None)]
    assert [v.best for v in verdicts(aggregate(alone))] == [False, False]


def test_strategies_over_different_numbers_of_cases_say_how_many() -> None:
    rows = [
        row("a", "truncate"),
        row("b", "truncate"),
        row("a", "given", recall=1.0, variant="mine"),
    ]
    assert lines(rows) == [
        "truncate: kept 50.0% of gold facts at 0.25x tokens; 2 cases",
        "given:mine: kept 100.0% of gold facts at 0.25x tokens; 1 case; best recall",
    ]


def test_a_run_with_a_model_reports_its_summaries_and_probes(tmp_path: Path) -> None:
    """Through ``summarizer eval`` against the test upstream: the counts in the verdict lines are
    those of the rows written."""
    case = make_case(
        probes=[{"question": "Which port does the service listen on?", "answer": "8123"}]
    )
    dataset = tmp_path / "one.jsonl"
    write_dataset([case], dataset)
    out = tmp_path / "run"
    with TestUpstream(responder=EvalResponder()) as upstream:
        result = invoke(
            dataset,
            "--out",
            out,
            "-s",
            "self-summary,truncate",
            "--budget",
            "0.4",
            "--model",
            "gpt-4o",
            "--upstream",
            upstream.base_url,
            "--api-key",
            "test-key",
        )
    assert result.exit_code == 0, result.output
    rows = {r.strategy: r for r in rows_of(out)}
    summary_row = rows["self-summary"]
    written = len(summary_row.verdicts)
    assert written >= 1 and summary_row.probe_accuracy is not None
    first, second = result.stdout.splitlines()[:2]
    noun = "summary" if written == 1 else "summaries"
    repaired = summary_row.verdicts.count("repaired")
    replaced = summary_row.verdicts.count("replaced")
    assert f"; {repaired} of {written} {noun} repaired, {replaced} replaced;" in first
    assert first.startswith("self-summary: kept ")
    assert f"answered {summary_row.probe_accuracy:.0%} of probes" in first
    assert "per case (estimated)" in first  # gpt-4o has a list price
    assert second.startswith("truncate: kept ") and "summar" not in second
    assert "answered" in second
    markdown = (out / "report.md").read_text()
    assert f"- {first}\n- {second}\n" in markdown
    assert json.loads((out / "report.json").read_text())["verdicts"] == [first, second]
