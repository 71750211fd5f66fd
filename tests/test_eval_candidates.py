"""``summarizer eval --candidates N`` and ``summaries.jsonl`` against the real test upstream on
127.0.0.1 through the openai SDK, its self-summary answers varied by the request's ``seed``
(``seeded_summary_responder``: seed s keeps the first 1/(s+1) of each section's lines)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.core.summary_records import SummaryRecord
from context_summarizer.evaluation.candidate_files import (
    CANDIDATES_FILE,
    REQUESTS_FILE,
    CandidateLine,
    CandidateRequest,
)
from context_summarizer.evaluation.candidates import CaseScorer, rescore_candidates
from context_summarizer.evaluation.dataset import Case, GoldFact, write_dataset
from context_summarizer.evaluation.evaluate import RowSettings
from context_summarizer.evaluation.summaries_file import SUMMARIES_FILE, read_summary_records
from context_summarizer.testing import Fault, TestUpstream, weak_summary_responder

from .eval_responders import EvalResponder, seeded_summary_responder
from .test_eval_runner import invoke
from .test_eval_strategies import exchange

NOTES = 8


def noted_case(k: int) -> Case:
    """Tool exchanges whose outputs each end with a ``NOTE:`` holding a gold fact the ledger
    does not extract (the summary carries it or nothing does), and one gold fact it does."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the discount bug in src/billing/invoice.py."},
    ]
    facts = [GoldFact(id="err", text="KeyError: 'discount_code'", kind="error")]
    for i in range(NOTES):
        call, output = exchange(i, 30)
        note = f"quokka{i}x{k}"
        messages += [call, {**output, "content": f"{output['content']}\nNOTE: keep {note}"}]
        facts.append(GoldFact(id=f"note{i}", text=note, kind="other"))
    messages.append({"role": "assistant", "content": "The discount is applied after tax."})
    messages.append({"role": "user", "content": "Please continue until the tests pass."})
    return Case(id=f"case-{k}", messages=messages, model="gpt-4o", facts=facts)


def dataset(tmp_path: Path, count: int = 3) -> Path:
    path = tmp_path / "noted.jsonl"
    write_dataset([noted_case(k) for k in range(count)], path)
    return path


def lines_of(out: Path) -> list[CandidateLine]:
    return [CandidateLine.model_validate_json(line) for line in (out / CANDIDATES_FILE).open()]


def seeded(upstream: TestUpstream) -> list[dict[str, Any]]:
    """The bodies of the requests that carried a seed (the candidates')."""
    return [r.body for r in upstream.requests if isinstance(r.body, dict) and "seed" in r.body]


def model_args(upstream: TestUpstream, out: Path, *more: str) -> list[str | Path]:
    return [
        *("--out", out, "--model", "gpt-4o", "--upstream", upstream.base_url),
        *("--no-probes", "--no-progress", "--budget", "0.4", *more),
    ]


def test_candidates_are_scored_and_ranked_as_the_fact_share_orders_them(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = dataset(tmp_path)
    with TestUpstream(responder=EvalResponder(summarize=seeded_summary_responder)) as upstream:
        result = invoke(
            path, *model_args(upstream, out, "-s", "self-summary", "--candidates", "3"),
            "--limit", "2", "--temperature", "0.7",
        )  # fmt: skip
        log = [r.body for r in upstream.requests if isinstance(r.body, dict)]
    assert result.exit_code == 0, result.output
    lines = lines_of(out)
    by_case: dict[str, list[CandidateLine]] = {}
    for line in lines:
        by_case.setdefault(line.case_id, []).append(line)
    assert sorted(by_case) == ["case-0", "case-1"]  # --limit 2
    unseeded = [body for body in log if "seed" not in body]
    for found in by_case.values():
        found.sort(key=lambda line: line.index)
        assert [line.index for line in found] == [0, 1, 2]
        (body,) = {json.dumps(line.request, sort_keys=True) for line in found}
        # the self-summary row's engine sent this very body; each candidate it with T and seed
        assert json.loads(body) in unseeded
        for line in found:
            assert {**line.request, "temperature": 0.7, "seed": line.index} in log
            assert line.temperature == 0.7 and line.seed == line.index and line.error is None
            assert line.model == "gpt-4o" and line.finish_reason == "stop"
            assert line.reward is not None and 0.0 <= line.reward <= 1.0
            assert line.parts is not None and line.parts["problem"] is None
        rewards = [line.reward or 0.0 for line in found]
        own = [line.summary_gold_recall or 0.0 for line in found]
        assert rewards == sorted(rewards, reverse=True) and len(set(rewards)) == 3
        assert own == sorted(own, reverse=True) and len(set(own)) == 3 and own[0] == 1.0
        # The summary message stands for all 9 gold facts (none is in a kept message). Every
        # candidate's text names the KeyError (its section's first line) as the ledger does, so
        # its own part equals the context's gold recall: (1 + the notes it kept) / 9; seed 2
        # keeps the first 3 of the 9 NOTE lines, one of them (exchange 1's) no gold fact.
        gold = [line.gold_recall or 0.0 for line in found]
        assert own == [pytest.approx(g) for g in gold]
        assert own == [pytest.approx((1 + notes) / (NOTES + 1)) for notes in (NOTES, 4, 2)]
    assert "mean per-case Spearman, reward vs summary gold recall: 1.00 (2 cases)" in result.output
    assert "pairs ordered alike by reward and summary gold recall: 100% (6 of 6 pairs)" in (
        result.output
    )
    assert "case-0: 3 candidates, reward" in result.output
    assert "## Candidate summaries" in (out / "report.md").read_text()

    # candidate 0's summary message, rebuilt, is the engine's own
    stored = [CandidateRequest.model_validate_json(t) for t in (out / REQUESTS_FILE).open()]
    for request in stored:
        case = noted_case(int(request.case_id[-1]))
        first = next(line for line in by_case[case.id] if line.index == 0)
        scorer = CaseScorer(case, request, RowSettings(budget=0.4, model="gpt-4o"))
        assert scorer.message(first.summary or "") == request.messages[request.position]


def test_a_rerun_asks_only_the_missing_or_failed_candidates(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = dataset(tmp_path, count=2)
    with TestUpstream(responder=EvalResponder(summarize=seeded_summary_responder)) as upstream:
        args = model_args(upstream, out, "-s", "truncate")
        assert invoke(path, *args, "--candidates", "2").exit_code == 0
        assert len(seeded(upstream)) == 4
        again = invoke(path, *args, "--candidates", "2")
        assert again.exit_code == 0, again.output
        assert len(seeded(upstream)) == 4 and len(upstream.requests) == 4  # nothing asked
        upstream.inject(Fault(kind="status", status=400, match="summary"))
        more = invoke(path, *args, "--candidates", "3")
        assert more.exit_code == 1 and "1 candidates failed" in more.output
        assert sorted(body["seed"] for body in seeded(upstream)[4:]) == [2, 2]
        retried = invoke(path, *args, "--candidates", "3")
        assert retried.exit_code == 0, retried.output
        assert [body["seed"] for body in seeded(upstream)[6:]] == [2]
        other = invoke(path, *args, "--candidates", "3", "--temperature", "0.5")
    assert other.exit_code == 2 and "temperature 1.0" in other.output
    latest = {(line.case_id, line.index): line for line in lines_of(out)}
    assert sorted(latest) == [(c, i) for c in ("case-0", "case-1") for i in range(3)]
    assert all(line.error is None for line in latest.values())
    assert sum(line.error is not None for line in lines_of(out)) == 1  # kept, superseded


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--candidates", "2", "--temperature", "0"], "--temperature must be above 0"),
        (["--candidates", "1"], "--candidates must be 0 (off) or at least 2"),
        (["--candidates", "-2"], "--candidates must be 0 (off) or at least 2"),
    ],
)
def test_candidate_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "run"
    model = ["--model", "gpt-4o", "--upstream", "http://127.0.0.1:9/v1"]
    result = invoke(dataset(tmp_path, 1), "--out", out, "-s", "truncate", *model, *args)
    assert result.exit_code == 2 and message in result.output
    assert not out.exists()


def test_candidates_need_a_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = invoke(dataset(tmp_path, 1), "--out", out, "-s", "truncate", "--candidates", "2")
    assert result.exit_code == 2
    assert "--candidates needs a model: pass --upstream URL and --model NAME" in result.output
    assert not out.exists()


def test_summary_records_are_written_and_a_recomputed_row_replaces_its_own(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    path = dataset(tmp_path, count=2)
    with TestUpstream(responder=EvalResponder()) as upstream:
        args = model_args(upstream, out, "-s", "self-summary,from-scratch,truncate")
        upstream.inject(Fault(kind="status", status=400, match="summary"))
        failed = invoke(path, *args)
        assert failed.exit_code == 1
        retried = invoke(path, *args)
        summary_bodies = [r.body for r in upstream.requests if r.is_summary]
    assert retried.exit_code == 0, retried.output
    written = [json.loads(line) for line in (out / SUMMARIES_FILE).open()]
    assert {line["row"]["strategy"] for line in written} == {"self-summary"}
    records = read_summary_records(out)
    assert sorted({key for key, _ in records}) == [
        ("case-0", "self-summary", "", 0),
        ("case-1", "self-summary", "", 0),
    ]
    # the failed row's record was written, then replaced by the recomputed row's on read
    failed_records = [
        SummaryRecord.model_validate(line["record"])
        for line in written
        if line["record"]["attempts"][0]["error"] is not None
    ]
    assert len(failed_records) == 1 and failed_records[0].verdict == "replaced"
    assert len(written) == len(records) + 1
    for _, record in records:
        assert record.verdict == "accepted" and record.facts
        (attempt,) = record.attempts
        assert attempt.error is None and attempt.summary
        assert attempt.request in summary_bodies  # exactly as sent
        assert attempt.request["max_completion_tokens"] == record.cap


def test_a_refused_candidate_costs_no_strict_retry_and_scores_zero(tmp_path: Path) -> None:
    # The candidates need only the first summary request: when its answer is refused (here an
    # echo of the instruction), the engine's strict retry is not sent to the model.
    out = tmp_path / "run"
    echo = weak_summary_responder("echo", repair=False)
    with TestUpstream(responder=EvalResponder(summarize=echo)) as upstream:
        result = invoke(
            dataset(tmp_path, count=1),
            *model_args(upstream, out, "-s", "truncate", "--candidates", "2"),
        )
        bodies = [json.dumps(r.body) for r in upstream.requests if r.body]
    assert result.exit_code == 0, result.output
    assert len(bodies) == 2 and not any("could not be used" in body for body in bodies)
    lines = lines_of(out)
    assert [line.index for line in sorted(lines, key=lambda x: x.index)] == [0, 1]
    for line in lines:
        assert line.parts is not None and line.parts["problem"] == "echo" and line.reward == 0.0


def test_stored_answers_are_scored_again_without_asking_the_model(tmp_path: Path) -> None:
    out = tmp_path / "run"
    path = dataset(tmp_path, count=1)
    with TestUpstream(responder=EvalResponder(summarize=seeded_summary_responder)) as upstream:
        result = invoke(path, *model_args(upstream, out, "-s", "truncate", "--candidates", "2"))
    assert result.exit_code == 0, result.output
    settings = RowSettings(budget=0.4, model="gpt-4o")
    case = noted_case(0)
    assert rescore_candidates(out, [case], settings) == 0  # nothing changed since
    # A line scored by some other (older) judgement is judged again from its stored answer.
    stale = lines_of(out)[0].model_copy(update={"reward": 0.0, "parts": {"problem": "invented"}})
    with (out / CANDIDATES_FILE).open("a") as handle:
        handle.write(stale.model_dump_json() + "\n")
    assert rescore_candidates(out, [case], settings) == 1
    fresh = {(c.case_id, c.index): c for c in lines_of(out)}[(stale.case_id, stale.index)]
    assert fresh.reward is not None and fresh.reward > 0 and fresh.parts
    assert fresh.parts["problem"] is None and fresh.summary == stale.summary
