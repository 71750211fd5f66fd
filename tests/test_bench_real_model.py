"""The real-model benchmark section's machinery, against the project's test upstream: cutting
real runs to a window, the cache clock's request order, resuming, and carrying a section over
into a rewritten RESULTS.md. (The section itself runs the real model: ``--only 6``.)"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import real_model
from benchmarks.__main__ import render
from benchmarks.real_model_cases import FLUSH, cut_case, load_runs
from benchmarks.real_model_report import at_risk
from benchmarks.results import Floor, Section
from benchmarks.results_file import carried_sections
from context_summarizer.evaluation.metrics import context_text, fact_kept
from context_summarizer.loaders.tokenizers import make_counter
from context_summarizer.testing import TestUpstream

RUNS = Path(__file__).parent / "fixtures" / "converters" / "mini-swe-agent"
COUNTER = make_counter("gpt-4o")


def test_a_run_is_cut_at_an_observation_within_the_window_with_the_facts_it_states() -> None:
    (run,) = load_runs(RUNS)
    cut = cut_case(run, 700, COUNTER)
    assert cut is not None
    assert 3 < len(cut.messages) < len(run.messages)
    assert cut.messages == run.messages[: len(cut.messages)]
    assert cut.messages[-1]["role"] == "user"
    assert COUNTER.count_messages(cut.messages) <= 700
    text = context_text(cut.messages)
    assert cut.facts and all(fact_kept(text, fact) for fact in cut.facts)
    assert [f for f in run.facts if fact_kept(text, f)] == cut.facts
    assert len(cut.facts) < len(run.facts)  # the final patch's files are not stated yet
    assert cut.probes == []
    assert cut_case(run, 200, COUNTER) is None  # not even the task and one exchange


def _section(upstream: TestUpstream, work: Path) -> Section:
    return real_model.run(
        quick=True, out_dir=work, trajectories=RUNS, work=work, upstream=upstream.base_url
    )


def test_each_self_summary_call_is_made_cold_then_warm_after_the_agents_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(real_model, "CUT_TOKENS", 1_200)
    with TestUpstream() as upstream:
        section = _section(upstream, tmp_path / "work")
        bodies: list[dict[str, Any]] = [r.body for r in upstream.requests]
    (run,) = load_runs(RUNS)
    case = cut_case(run, 1_200, COUNTER)
    assert case is not None
    # Summary requests carry the summary's cap; the clock's own requests ask for one token.
    summaries = [i for i, b in enumerate(bodies) if b.get("max_tokens", 1) > 1]
    first_summary = summaries[0]
    flush, cold, agent, warm = bodies[first_summary - 1 : first_summary + 3]
    assert flush["messages"] == FLUSH["messages"]
    assert cold == warm and "max_completion_tokens" not in cold  # llama.cpp reads max_tokens
    assert cold["messages"][:-1] == case.messages[: len(cold["messages"]) - 1]
    assert agent["messages"] == case.messages and agent["max_tokens"] == 1
    # Later first summary requests that extend the conversation follow the agent's request too;
    # the others (strict retries, hybrid's masked view, from-scratch's transcript) do not.
    assert sum(b["messages"] == FLUSH["messages"] for b in bodies) == 1
    instruction = cold["messages"][-1]
    for index in summaries[2:]:
        sent = bodies[index]["messages"]
        extends = sent[:-1] == case.messages[: len(sent) - 1]
        primed = bodies[index - 1]["messages"] == case.messages
        assert primed == (extends and sent[-1] == instruction), index
    assert "| self-summary |" in section.body and "| truncate |" in section.body
    assert "cold (cache flushed)" in section.body
    timings = (tmp_path / "work" / "timings.jsonl").read_text().splitlines()
    assert [json.loads(line)["case_id"] for line in timings] == [case.id]


def test_a_run_of_some_strategies_without_timing_never_flushes_the_cache(tmp_path: Path) -> None:
    with TestUpstream() as upstream:
        section = real_model.run(
            quick=True,
            out_dir=tmp_path,
            trajectories=RUNS,
            work=tmp_path / "work",
            upstream=upstream.base_url,
            strategies=("self-summary", "ledger-only"),
            timing=False,
        )
        bodies: list[dict[str, Any]] = [r.body for r in upstream.requests]
    assert not any(b["messages"] == FLUSH["messages"] for b in bodies)
    assert "| self-summary |" in section.body and "| ledger-only |" in section.body
    assert "| truncate |" not in section.body and "| hybrid |" not in section.body
    assert "was not timed in this run" in section.body
    assert "cold (cache flushed)" not in section.body
    assert section.command.endswith("--strategies self-summary,ledger-only --no-timing")
    assert not (tmp_path / "work" / "timings.jsonl").exists()


def test_a_rerun_resumes_from_the_rows_written(tmp_path: Path) -> None:
    work = tmp_path / "work"
    with TestUpstream() as upstream:
        first = _section(upstream, work)
        asked = len(upstream.requests)
        again = _section(upstream, work)
        assert len(upstream.requests) == asked  # nothing was computed again
    assert again.body == first.body
    (work / "settings.json").write_text("{}")  # other settings: the rows are not mixed in
    with TestUpstream() as upstream:
        _section(upstream, work)
        assert len(upstream.requests) == asked


def test_a_report_of_the_rows_written_runs_nothing_and_covers_only_complete_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    # Written under the label a llama.cpp run has, by the test upstream.
    monkeypatch.setattr(real_model, "_settings", lambda server, strategies: {"fixed": True})
    with TestUpstream() as upstream:
        full = _section(upstream, work)
    written = real_model.run(
        quick=True, out_dir=tmp_path, trajectories=RUNS, work=work, written=True
    )
    assert written.body.split("\n\n")[2:] == full.body.split("\n\n")[2:]  # the same tables
    rows = (work / "rows.jsonl").read_text().splitlines()
    (work / "rows.jsonl").write_text("\n".join(rows[:-1]) + "\n")  # one strategy's row missing
    partial = real_model.run(
        quick=True, out_dir=tmp_path, trajectories=RUNS, work=work, written=True
    )
    assert "on 0 of the 1 mini-swe-agent" in partial.body


def test_facts_at_risk_are_those_stated_only_where_a_compaction_may_replace() -> None:
    (run,) = load_runs(RUNS)
    risky = at_risk(run)
    pinned = context_text([run.messages[0], run.messages[1], run.messages[-1]])
    assert risky and len(risky) < len(run.facts)
    assert all(not fact_kept(pinned, fact) for fact in risky)
    assert all(fact_kept(pinned, fact) for fact in run.facts if fact not in risky)


def test_without_the_trajectories_the_section_says_it_did_not_run(tmp_path: Path) -> None:
    section = real_model.run(quick=True, out_dir=tmp_path, trajectories=tmp_path / "none")
    assert section.body.startswith("Not run: the trajectories are not here")
    assert section.floors == []


def test_sections_not_run_are_carried_over_with_their_floors() -> None:
    old = Path(__file__).resolve().parent.parent / "benchmarks" / "RESULTS.md"
    carried = carried_sections(old.read_text(encoding="utf-8"))
    assert set(carried) >= {"1", "2", "3", "4", "5"}
    new = Section(title="2. Cost", command="python -m benchmarks.prepare_scaling", body="New.")
    new.floors = [Floor("prepare ratio", "1.00×", "≤ 3×", True)]
    new.seconds = 4
    text = render(
        [new],
        quick=False,
        command="python -m benchmarks --only 2",
        started=dt.datetime(2026, 12, 3, tzinfo=dt.UTC),
        elapsed=4,
        revision="abc1234",
        carried={n: c for n, c in carried.items() if n != "2"},
    )
    again = carried_sections(text)
    assert again["2"].text.startswith("## 2. Cost\n")
    assert "`python -m benchmarks.prepare_scaling` (4 s; commit abc1234, 2026-12-03)" in text
    assert again["2"].floor_rows == [["2", "prepare ratio", "1.00×", "≤ 3×", "met"]]
    for number in ("1", "3", "4", "5"):
        assert again[number].text == carried[number].text
        assert again[number].floor_rows == carried[number].floor_rows
    assert "did not run this time" in text
    # Numbered in order, §10 after §9 (not as a string after §1).
    assert "§1, §3, §4, §5, §6, §7, §8, §9, §10, §11, §12 did not run" in text
    positions = [text.index(f"## {n}.") for n in ("1", "2", "3", "4", "5")]
    assert positions == sorted(positions)
