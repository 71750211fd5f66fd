"""``summarizer eval`` end to end: the command, the outputs, resuming, and the model strategies
against the real test upstream on 127.0.0.1 through the openai SDK."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from context_summarizer.evaluation.command import eval_command
from context_summarizer.evaluation.dataset import Case, load_dataset, write_dataset
from context_summarizer.evaluation.records import ResultRow
from context_summarizer.evaluation.runner import (
    RESULTS_FILE,
    EvalSettings,
    RunConfigMismatch,
    read_rows,
    run_eval,
)
from context_summarizer.loaders.prompts import load_prompt
from context_summarizer.testing import Fault, TestUpstream

from .eval_responders import EvalResponder
from .test_eval_strategies import make_case

SHIPPED = Path(__file__).resolve().parent.parent / "datasets" / "coding-sessions.jsonl"
OUTPUTS = ("results.jsonl", "report.json", "report.md", "report.html")
VOLATILE = {"latency_s", "probe_latency_s"}

runner = CliRunner()


def cli() -> typer.Typer:
    """A Typer app with the command as ``eval`` (as ``context_summarizer.cli.main`` registers
    it)."""
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """summarizer"""

    app.command("eval")(eval_command)
    return app


def invoke(*args: str | Path) -> Any:
    return runner.invoke(cli(), ["eval", *map(str, args)])


def rows_of(out: Path) -> list[ResultRow]:
    return [ResultRow.model_validate_json(line) for line in (out / RESULTS_FILE).open()]


def stable(rows: list[ResultRow]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Rows by key without timings, for comparing two runs."""
    out = {}
    for row in rows:
        data = row.model_dump(exclude=VOLATILE)
        for call in data["calls"]:
            call.pop("latency_s")
        out[row.key] = data
    return out


def small_dataset(tmp_path: Path, count: int = 4) -> Path:
    cases = [
        make_case(
            exchanges=8 + 2 * i, id=f"case-{i}", summaries=[{"name": "s", "text": "x", "covers": 6}]
        )
        for i in range(count)
    ]
    path = tmp_path / "small.jsonl"
    write_dataset(cases, path)
    return path


def test_offline_strategies_on_the_shipped_dataset_write_the_four_outputs(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = invoke(SHIPPED, "--out", out, "--no-progress")
    assert result.exit_code == 0, result.output
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0, name

    cases, errors = load_dataset([SHIPPED])
    assert errors == [] and len(cases) >= 20
    rows = rows_of(out)
    given = sum(len({s.name for s in case.summaries}) for case in cases)
    assert len(rows) == 3 * len(cases) + given
    assert all(row.status == "ok" for row in rows)
    mechanical = [row for row in rows if row.strategy in ("masking", "truncate", "ledger-only")]
    assert all(row.met_budget and row.gold is not None for row in mechanical)
    assert all(row.calls == [] for row in rows)
    for row in mechanical:  # recoverable recall is over exactly the gold facts missed
        assert row.gold is not None and row.recoverable is not None
        assert row.recoverable.total == len(row.gold.missed)

    report = json.loads((out / "report.json").read_text())
    labels = {entry["label"] for entry in report["strategies"]}
    assert {"masking", "truncate", "ledger-only"} <= labels
    assert len(report["cases"]) == len(rows)
    markdown = (out / "report.md").read_text()
    assert (
        "| strategy | cases | errors | infeasible | within budget | gold recall | recoverable |"
        in markdown
    )
    assert "## Missed gold facts by kind" in markdown
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<svg") == 2
    assert "<script" not in page and "<link" not in page and "src=" not in page
    assert "| masking |" in result.output  # the summary table is printed too


def test_resume_after_an_interrupt_computes_only_the_missing_rows(tmp_path: Path) -> None:
    dataset = small_dataset(tmp_path)
    cases, _ = load_dataset([dataset])
    strategies = ["truncate", "masking", "ledger-only", "given"]
    out = tmp_path / "interrupted"
    settings = EvalSettings(
        datasets=[dataset],
        strategies=strategies,
        budget=0.4,
        out=out,
        concurrency=1,
        progress=False,
    )

    class Stop(Exception):
        pass

    first: list[tuple[str, str, str]] = []

    def stop_after_three(row: ResultRow) -> None:
        first.append(row.key)
        if len(first) == 3:
            raise Stop

    with pytest.raises(Stop):
        run_eval(settings, cases, on_row=stop_after_three)
    written = (out / RESULTS_FILE).read_text()
    assert len(written.splitlines()) == 3
    # As if killed in the middle of writing the fourth row.
    with (out / RESULTS_FILE).open("a") as handle:
        handle.write('{"case_id": "case-3", "strategy": "trunc')

    second: list[tuple[str, str, str]] = []
    resumed = run_eval(settings, cases, on_row=lambda row: second.append(row.key))
    total = len(cases) * len(strategies)
    assert resumed.skipped == 3 and resumed.computed == total - 3
    assert not set(first) & set(second)
    assert (out / RESULTS_FILE).read_text().startswith(written)  # earlier rows untouched

    fresh = run_eval(dataclasses.replace(settings, out=tmp_path / "fresh"), cases)
    assert fresh.computed == total
    assert stable(resumed.rows) == stable(fresh.rows)
    assert set(read_rows(out / RESULTS_FILE)) == {row.key for row in fresh.rows}

    again = run_eval(settings, cases)
    assert again.computed == 0 and again.skipped == total


def test_a_directory_of_a_run_with_other_settings_is_refused(tmp_path: Path) -> None:
    dataset = small_dataset(tmp_path, count=1)
    out = tmp_path / "run"
    assert invoke(dataset, "--out", out, "-s", "truncate", "--budget", "0.3").exit_code == 0
    result = invoke(dataset, "--out", out, "-s", "truncate", "--budget", "0.5")
    assert result.exit_code == 2
    assert "budget was 0.3, now 0.5" in result.output and "new --out" in result.output
    capped = invoke(dataset, "--out", out, "-s", "truncate", "--max-summary-tokens", "500")
    assert capped.exit_code == 2
    assert "max_summary_tokens was 2000, now 500" in capped.output

    cases, _ = load_dataset([dataset])
    settings = EvalSettings(datasets=[dataset], strategies=["truncate"], budget=0.5, out=out)
    with pytest.raises(RunConfigMismatch):
        run_eval(settings, cases)
    assert len(rows_of(out)) == 1  # nothing was mixed in


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-s", "summarise"], "unknown strategy 'summarise'; valid strategies: self-summary"),
        (["-s", "truncate,self-summary"], "self-summary needs a model: pass --upstream"),
        (["-s", "from-scratch", "--model", "gpt-4o"], "needs a model"),
        (["--budget", "1.5"], "--budget must be in (0, 1]"),
        (["--repeat", "0"], "--repeat must be at least 1"),
        (["--max-summary-tokens", "0"], "--max-summary-tokens must be positive"),
        (["--summary-cap-field", "max_output"], "--summary-cap-field must be auto, max_tokens"),
    ],
)
def test_usage_errors_are_reported_before_any_work(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = tmp_path / "run"
    result = invoke(small_dataset(tmp_path, count=1), "--out", out, *args)
    assert result.exit_code == 2
    assert message in result.output
    assert not out.exists()


def test_bad_dataset_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    good = small_dataset(tmp_path, count=1).read_text()
    path = tmp_path / "mixed.jsonl"
    path.write_text(good + "{not json\n" + json.dumps({"id": "x", "messages": []}) + "\n")
    result = invoke(path, "--out", tmp_path / "run", "-s", "truncate")
    assert result.exit_code == 0, result.output
    assert f"{path}:2: invalid JSON" in result.output
    assert f"{path}:3: messages" in result.output
    assert [row.case_id for row in rows_of(tmp_path / "run")] == ["case-0"]

    empty = tmp_path / "bad.jsonl"
    empty.write_text("{not json\n")
    result = invoke(empty, "--out", tmp_path / "other", "-s", "truncate")
    assert result.exit_code == 2
    # one line: the file, what it looked like, where the formats are listed
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: {empty}: not a file eval can read")
    assert "JSON that does not parse" in line and "summarizer convert --help" in line


def test_model_strategies_and_probes_against_the_test_upstream(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with TestUpstream(responder=EvalResponder()) as upstream:
        result = invoke(
            SHIPPED,
            "--out",
            out,
            "--limit",
            "2",
            "--model",
            "gpt-4o-mini",
            "--upstream",
            upstream.base_url,
            "--api-key",
            "test-key",
            "-s",
            "self-summary,self-summary-no-ledger,from-scratch,truncate",
        )
        log = upstream.requests
    assert result.exit_code == 0, result.output
    assert "test-key" not in (out / "run.json").read_text() + (out / RESULTS_FILE).read_text()
    rows = rows_of(out)
    assert len(rows) == 8 and all(row.status == "ok" for row in rows)
    cases, _ = load_dataset([SHIPPED])
    by_id = {case.id: case for case in cases[:2]}

    instruction = load_prompt("self_summary")
    summary_requests = [r for r in log if r.messages and r.messages[-1]["content"] == instruction]
    assert len(summary_requests) == 4  # two strategies, two cases, one request each
    since = load_prompt("self_summary_since").split("«")[0]
    later = [r for r in log if r.messages and str(r.messages[-1]["content"]).startswith(since)]
    assert len(later) == 4  # and one for the turns after each case's follow-up message
    for request in summary_requests:
        # the case's own conversation, up to the end of the turns the summary replaces
        sent = request.messages[:-1]
        assert any(
            2 < len(sent) < len(case.messages) and sent == case.messages[: len(sent)]
            for case in by_id.values()
        )
        assert request.body["tool_choice"] == "none" and request.body["model"] == "gpt-4o-mini"

    for row in rows:
        assert row.agent_model == "gpt-4o-mini"
        assert row.probes is not None and len(row.probes) == len(by_id[row.case_id].probes)
        assert row.probe_accuracy is not None and row.probe_accuracy_full is not None
        assert row.probe_gap == pytest.approx(row.probe_accuracy_full - row.probe_accuracy)
        if row.strategy == "truncate":
            assert row.calls == []
        else:
            # one call per run replaced: these cases have a follow-up user message that stays
            # in place, with the history before and after it summarized apart
            assert len(row.calls) == 2
            for call in row.calls:
                purpose = "from-scratch" if row.strategy == "from-scratch" else "summary"
                assert call.purpose == purpose
                assert call.prompt_tokens > 0 and call.output_tokens > 0
            assert row.summary and row.summary_tokens > 0
    report = json.loads((out / "report.json").read_text())
    assert all(entry["cost_usd"] is not None for entry in report["cases"])
    assert (
        "| probe accuracy | with recall | full-context accuracy | gap |"
        in (out / "report.md").read_text()
    )


def test_probes_measure_what_compaction_lost(tmp_path: Path) -> None:
    case = make_case(
        probes=[
            {
                "question": "Which staging database URL does the service use?",
                "answer": "postgres://db.internal:5432/billing",
            }
        ]
    )
    dataset = tmp_path / "probe.jsonl"
    write_dataset([case], dataset)
    with TestUpstream(responder=EvalResponder()) as upstream:
        settings = EvalSettings(
            datasets=[dataset],
            strategies=["truncate", "self-summary"],
            budget=0.4,
            out=tmp_path / "run",
            model="gpt-4o",
            upstream=upstream.base_url,
            progress=False,
        )
        outcome = run_eval(settings, [case])
    rows = {row.strategy: row for row in outcome.rows}
    # The URL is only in an early tool output: truncation drops it; the summary carries it.
    assert rows["truncate"].probe_accuracy == 0.0 and rows["truncate"].probe_accuracy_full == 1.0
    assert rows["truncate"].probe_gap == 1.0
    assert rows["self-summary"].probe_accuracy == 1.0 and rows["self-summary"].probe_gap == 0.0
    # With the recall tool offered, the model reads the URL back from what truncation replaced.
    assert rows["truncate"].probe_accuracy_recall == 1.0
    (probe,) = rows["truncate"].probes or []
    assert probe.recall_calls == 1 and probe.recall_correct is True
    assert "postgres://db.internal:5432/billing" in (probe.recall_answer or "")
    # A summary that carries it answers without asking.
    (carried,) = rows["self-summary"].probes or []
    assert carried.recall_calls == 0 and carried.recall_correct is True


def test_a_failed_model_call_makes_an_error_row_that_the_next_run_retries(tmp_path: Path) -> None:
    dataset = small_dataset(tmp_path, count=1)
    out = tmp_path / "run"
    with TestUpstream(responder=EvalResponder()) as upstream:
        args = ["--out", out, "-s", "self-summary", "--model", "gpt-4o", "--no-probes"]
        args += ["--budget", "0.8"]  # room for the 2,000-token summary allowance
        upstream.inject(Fault(kind="status", status=400, match="summary"))
        failed = invoke(dataset, *args, "--upstream", upstream.base_url)
        assert failed.exit_code == 1
        assert "model call failed: upstream returned HTTP 400" in (out / RESULTS_FILE).read_text()
        retried = invoke(dataset, *args, "--upstream", upstream.base_url)
    assert retried.exit_code == 0, retried.output
    assert "1 rows computed, 0 already done, 0 errors" in retried.output
    (row,) = read_rows(out / RESULTS_FILE).values()
    assert row.status == "ok" and row.calls[0].error is None


def test_a_case_that_fits_is_not_compacted(tmp_path: Path) -> None:
    dataset = small_dataset(tmp_path, count=1)
    cases: list[Case] = load_dataset([dataset])[0]
    before = run_eval(
        EvalSettings(
            datasets=[dataset],
            strategies=["truncate"],
            budget=0.5,
            out=tmp_path / "run",
            context_window=1_000_000,
            progress=False,
        ),
        cases,
    )
    (row,) = before.rows
    assert row.budget_tokens == 500_000 and row.compacted is False and row.compression_ratio == 1.0


def test_the_html_report_escapes_everything_from_the_data() -> None:
    from context_summarizer.evaluation.pricing import default_prices
    from context_summarizer.evaluation.records import FactRecall, MissedFact, RunConfig
    from context_summarizer.evaluation.report import render_html, render_markdown

    hostile = "<script>alert('x')</script>"
    row = ResultRow(
        case_id=hostile,
        strategy="given",
        variant="a|b<i>",
        status="ok",
        agent_model="gpt-4o",
        tokens_before=100,
        budget_tokens=30,
        tokens_after=20,
        met_budget=True,
        compression_ratio=0.2,
        gold=FactRecall(
            total=1, kept=0, recall=0.0, missed=[MissedFact(id=hostile, kind=hostile, text="t")]
        ),
    )
    config = RunConfig(
        budget=0.3,
        context_window=None,
        model=None,
        probes=False,
        prompt_version="v1",
        prompt_digest="0" * 64,
        datasets=["1" * 64],
    )
    page = render_html([row], config=config, prices=default_prices())
    assert "<script" not in page and "<i>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page
    markdown = render_markdown([row], config=config, prices=default_prices())
    # a pipe cannot break the table, nor a tag become markup
    assert "given:a\\|b\\<i>" in markdown
    assert "<i>" not in markdown.replace("\\<i>", "")


def test_a_budget_the_strategy_cannot_meet_is_infeasible_and_not_retried(tmp_path: Path) -> None:
    dataset = small_dataset(tmp_path, count=1)
    out = tmp_path / "run"
    first = invoke(dataset, "--out", out, "-s", "ledger-only", "--budget", "0.02", "--no-progress")
    assert first.exit_code == 0, first.output
    (row,) = rows_of(out)
    assert row.status == "infeasible"
    assert row.met_budget is False
    assert row.error and "must be kept" in row.error
    report = json.loads((out / "report.json").read_text())
    (strategy,) = report["strategies"]
    assert strategy["infeasible"] == 1 and strategy["errors"] == 0
    again = invoke(dataset, "--out", out, "-s", "ledger-only", "--budget", "0.02", "--no-progress")
    assert again.exit_code == 0, again.output
    assert "0 rows computed, 1 already done" in again.output


def test_hybrid_next_to_self_summary_and_masking_against_the_test_upstream(
    tmp_path: Path,
) -> None:
    """``summarizer eval -s hybrid -s self-summary -s masking``: the hybrid rows ask the model
    only for the cases masking cannot bring under the budget."""
    out = tmp_path / "run"
    with TestUpstream(responder=EvalResponder()) as upstream:
        result = invoke(
            SHIPPED,
            "--out",
            out,
            "--limit",
            "3",
            "--model",
            "gpt-4o-mini",
            "--upstream",
            upstream.base_url,
            "--api-key",
            "test-key",
            "--no-probes",
            "-s",
            "hybrid,self-summary,masking",
        )
    assert result.exit_code == 0, result.output
    rows = rows_of(out)
    assert len(rows) == 9 and all(row.status == "ok" and row.met_budget for row in rows)
    by = {(row.strategy, row.case_id): row for row in rows}
    cases = sorted({row.case_id for row in rows})
    hybrid_calls = sum(len(by["hybrid", case].calls) for case in cases)
    summary_calls = sum(len(by["self-summary", case].calls) for case in cases)
    assert summary_calls >= len(cases) and hybrid_calls < summary_calls
    for case in cases:
        hybrid = by["hybrid", case]
        assert any(note.startswith("masked=") for note in hybrid.notes)
        assert (hybrid.summary is None) == (hybrid.calls == [])
    assert "| hybrid |" in result.output
