"""``summarizer eval`` says when a strategy has nothing to evaluate, and fails when it was asked
for and can evaluate no case (``-s given`` on a dataset without given summaries)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from context_summarizer.evaluation.dataset import write_dataset
from context_summarizer.evaluation.strategies import resolve_strategies

from .test_eval_runner import invoke, rows_of
from .test_eval_strategies import make_case

SUMMARY: dict[str, Any] = {"name": "mine", "text": "I read modules 0-4.", "covers": 6}


def dataset(tmp_path: Path, *with_summaries: bool) -> Path:
    cases = [
        make_case(id=f"case-{i}", summaries=[SUMMARY] if has else [])
        for i, has in enumerate(with_summaries)
    ]
    path = tmp_path / "cases.jsonl"
    write_dataset(cases, path)
    return path


def test_given_on_a_dataset_without_summaries_says_why_and_fails(tmp_path: Path) -> None:
    out = tmp_path / "run"
    for args in (["-s", "given"], ["-s", "given,truncate"]):
        result = invoke(dataset(tmp_path, False, False, False), "--out", out, *args)
        assert result.exit_code != 0, result.output
        assert "given" in result.output
        assert "none of the 3 cases" in result.output
        assert "summaries" in result.output
        assert "|" not in result.output, "no empty table"
        assert not out.exists(), "refused before any work"


def test_given_on_a_partly_covered_dataset_names_the_cases_it_skips(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = invoke(dataset(tmp_path, True, False, True, False), "--out", out, "-s", "given")
    assert result.exit_code == 0, result.output
    assert "given: 2 of 4 cases have no rows" in result.output
    assert "case-1, case-3" in result.output
    assert sorted(row.case_id for row in rows_of(out)) == ["case-0", "case-2"]


def test_the_default_strategies_skip_given_with_a_note_when_no_case_has_summaries(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    result = invoke(dataset(tmp_path, False, False), "--out", out)
    assert result.exit_code == 0, result.output
    assert "given: none of the 2 cases" in result.output
    assert {row.strategy for row in rows_of(out)} == {"masking", "truncate", "ledger-only"}


def test_cases_without_rows_lists_each_strategys_uncovered_cases() -> None:
    from context_summarizer.evaluation.evaluate import cases_without_rows

    cases = [make_case(id="a", summaries=[SUMMARY]), make_case(id="b")]
    missing = cases_without_rows(cases, resolve_strategies(["given", "truncate"]))
    assert missing == {"given": ["b"]}
