"""``summarizer eval --repeat N``: each model strategy runs N times per case against the real test
upstream (127.0.0.1, through the openai SDK), offline strategies once; the reports give the
spread of gold recall across runs, and resuming with a larger N adds only the missing runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.evaluation.dataset import write_dataset
from context_summarizer.evaluation.runner import RESULTS_FILE
from context_summarizer.testing import TestUpstream
from context_summarizer.testing.responders import Reply, is_summary_request

from .eval_responders import EvalResponder
from .test_eval_runner import invoke, rows_of
from .test_eval_strategies import make_case

FACTS = [
    {"id": "err", "text": "KeyError: 'discount_code'", "kind": "error"},
    {"id": "module", "text": "src/billing/module_0.py", "kind": "path"},
]
BLAND = "## Current state\nThe assistant worked on the task."


class Moody:
    """The test upstream's scripted model, whose summaries can be made to keep nothing: a model
    whose runs differ, as real ones do even at temperature 0."""

    def __init__(self) -> None:
        self.bland = False
        self.summaries = 0
        self.scripted = EvalResponder()

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body):
            self.summaries += 1
            if self.bland:
                return Reply(content=BLAND)
        return self.scripted(body)


def test_repeat_runs_model_strategies_n_times_reports_the_spread_and_resumes(
    tmp_path: Path,
) -> None:
    dataset = tmp_path / "cases.jsonl"
    write_dataset(
        [make_case(id=f"case-{i}", exchanges=10 + 2 * i, facts=FACTS) for i in range(2)], dataset
    )
    out = tmp_path / "run"
    model = Moody()
    with TestUpstream(responder=model) as upstream:
        args = [dataset, "--out", out, "-s", "self-summary-no-ledger,self-summary,truncate"]
        args += ["--model", "gpt-4o", "--upstream", upstream.base_url, "--api-key", "k"]
        args += ["--budget", "0.4", "--no-probes", "--no-progress"]

        model.bland = True  # the first run's summaries keep nothing
        first = invoke(*args)
        assert first.exit_code == 0, first.output
        # as a results file written before --repeat existed: rows without a repeat index
        lines = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
        assert all(line.pop("repeat") == 0 for line in lines)
        (out / RESULTS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
        written = (out / RESULTS_FILE).read_text()
        assert sorted((r.strategy, r.repeat) for r in rows_of(out)) == sorted(
            [("self-summary-no-ledger", 0), ("self-summary", 0), ("truncate", 0)] * 2
        )
        calls_per_run = model.summaries

        model.bland = False  # runs 2 and 3: the scripted summaries, which keep the facts
        second = invoke(*args, "--repeat", "3")
        assert second.exit_code == 0, second.output
        assert model.summaries == 3 * calls_per_run  # two more runs of each model strategy
        again = invoke(*args, "--repeat", "3")
        assert model.summaries == 3 * calls_per_run  # nothing left to compute

    assert again.exit_code == 0 and "0 rows computed, 14 already done" in again.stdout
    assert "8 rows computed, 6 already done" in second.stdout
    assert (
        "--repeat 3: self-summary-no-ledger, self-summary: 3 runs per case; "
        "truncate: deterministic, run once"
    ) in second.stderr
    assert (out / RESULTS_FILE).read_text().startswith(written)  # the first run's rows kept
    repeats: dict[tuple[str, str], list[int]] = {}
    for row in rows_of(out):
        repeats.setdefault((row.strategy, row.case_id), []).append(row.repeat)
    assert sorted(repeats["self-summary-no-ledger", "case-0"]) == [0, 1, 2]
    assert repeats["truncate", "case-0"] == [0]  # deterministic: once, whatever --repeat says

    report = json.loads((out / "report.json").read_text())
    strategies = {s["label"]: s for s in report["strategies"]}
    plain = strategies["self-summary-no-ledger"]
    assert plain["runs"] == 3 and plain["cases"] == 2 and plain["rows"] == 6
    bland_run, *scripted_runs = plain["gold_recall_runs"]
    assert bland_run == 0.0 and scripted_runs == [1.0, 1.0]
    spread = plain["gold_recall_spread"]
    assert (spread["runs"], spread["min"], spread["median"], spread["max"]) == (3, 0.0, 1.0, 1.0)
    assert spread["mean"] == pytest.approx(2 / 3) == plain["gold_recall"]
    assert spread["sd"] == pytest.approx(3**-0.5)  # sample sd of 0, 1, 1
    assert (
        strategies["truncate"]["runs"] == 1 and strategies["truncate"]["gold_recall_spread"] is None
    )

    verdict = next(v for v in report["verdicts"] if v.startswith("self-summary-no-ledger:"))
    assert "gold recall 0.0% to 100.0% over 3 runs (median 100.0%)" in verdict
    table = second.stdout[second.stdout.index("| strategy |") :]
    assert "| gold recall over runs: min / median / max |" in table
    assert "| 0.0% / 100.0% / 100.0% (66.7% ± 57.7%, 3 runs) |" in table
    assert "| deterministic: 1 run |" in table  # truncate
    markdown = (out / "report.md").read_text()
    assert "Runs: each model strategy ran 3 times over the cases (--repeat 3)" in markdown
    assert "| case-0 | self-summary-no-ledger #3 |" in markdown
