"""Recoverable recall: of the gold facts a compaction missed, the share one recall search gives
back from the replaced messages, within the recall tool's default bounds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.evaluation.dataset import GoldFact
from context_summarizer.evaluation.metrics import aggregate, context_text, gold_fact_recall
from context_summarizer.evaluation.records import FactRecall, ResultRow
from context_summarizer.evaluation.recoverable import query_for, recoverable_recall, replaced_spans
from context_summarizer.evaluation.runner import read_rows

Message = dict[str, Any]


def fact(text: str, kind: str, id: str = "f-1") -> GoldFact:
    return GoldFact(id=id, text=text, kind=kind)


@pytest.mark.parametrize(
    ("kind", "text", "query", "is_regex"),
    [
        ("path", "src/relay/api/pagination.py", "pagination.py", False),
        ("path", "C:\\work\\app\\main.rs", "main.rs", False),
        ("command", "python -m pytest tests/api/test_x.py -x -q", "python -m", False),
        ("command", "CI=1 FOO=bar npm test --watch", "npm test", False),
        ("error", "KeyError: 'user_id'", "KeyError", False),
        ("error", "django.db.utils.OperationalError: no such table: x", "OperationalError", False),
        ("error", "** (RuntimeError) no :secret_key_base configuration", "RuntimeError", False),
        ("error", "src/app.py:3:80: E501 line too long (88 > 79 characters)", "E501", False),
        ("error", "open failed: ENOENT: no such file or directory", "ENOENT", False),
        ("error", "request failed with HTTP 503", "503", False),
        ("error", "GET /items returned 404 Not Found", "404", False),
        (
            "error",
            "panic: runtime error: invalid memory address or nil pointer dereference",
            r"\bruntime\b.*?\binvalid\b.*?\bdereference\b",
            True,
        ),
        ("test", "tests/api/test_pages.py::TestPages::test_last_page", "test_last_page", False),
        ("test", "tests/t.py::test_mixin[earthlocation]", "test_mixin[earthlocation]", False),
        ("test", "TtlCache › expired entry is reloaded", "expired entry is reloaded", False),
        ("test", "TestRefreshesInsideSkewWindow", "TestRefreshesInsideSkewWindow", False),
        ("url", "https://example.com/docs/api/v2/pagination?page=2#top", "pagination", False),
        ("url", "https://example.com/", "example.com", False),
        ("identifier", "PageCursor", "PageCursor", False),
        ("commit", "7592c02", "7592c02", False),
        ("quantity", "900", "900", False),
        (
            "constraint",
            "must stay compatible with Python 3.9 and the migrations",
            r"\bcompatible\b.*?\bPython\b.*?\bmigrations\b",
            True,
        ),
        ("constraint", "do not touch it", "touch", False),
    ],
)
def test_one_query_per_kind_as_an_agent_would_type_it(
    kind: str, text: str, query: str, is_regex: bool
) -> None:
    assert query_for(fact(text, kind)) == (query, is_regex)


def conversation(middle: list[str], tail: str = "all done") -> list[Message]:
    """A system prompt, a task, one assistant turn per ``middle`` text, then a final turn."""
    return [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the pagination bug."},
        *({"role": "assistant", "content": text} for text in middle),
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": tail},
    ]


def compacted(original: list[Message], keep_last: int = 2) -> list[Message]:
    """The system prompt and task kept, a summary in place of the middle, the tail kept."""
    summary = {"role": "user", "content": "Summary: work is under way on pagination."}
    return [*original[:2], summary, *original[-keep_last:]]


def test_the_replaced_messages_are_the_runs_not_sent_unchanged() -> None:
    original = conversation(["one", "two", "three"])
    spans = replaced_spans(original, compacted(original))
    assert [(s.start, s.end) for s in spans] == [(2, 5)]


def test_a_fact_in_a_replaced_message_is_recovered() -> None:
    original = conversation(
        ["I read the code.", "Edited src/relay/api/pagination.py to fix the off-by-one.", "ok"]
    )
    small = compacted(original)
    path = fact("src/relay/api/pagination.py", "path")
    gold = gold_fact_recall(context_text(small), [path])
    assert gold.kept == 0  # missed by the compacted context
    result = recoverable_recall(original, small, [path])
    assert (result.kept, result.total, result.recall, result.missed) == (1, 1, 1.0, [])


def test_a_fact_only_in_a_kept_message_was_not_missed_and_is_not_counted() -> None:
    original = conversation(
        ["Edited src/relay/api/pagination.py.", "ok"], tail="Next: docs/configuration.md"
    )
    small = compacted(original)
    facts = [
        fact("src/relay/api/pagination.py", "path", "path-1"),
        fact("docs/configuration.md", "path", "path-2"),
    ]
    gold = gold_fact_recall(context_text(small), facts)
    missed = [f for f in facts if f.id in {m.id for m in gold.missed}]
    result = recoverable_recall(original, small, missed)
    assert (result.kept, result.total) == (1, 1)
    # Recall searches only what was replaced: a kept message is not there to be found.
    kept_only = recoverable_recall(original, small, [facts[1]])
    assert kept_only.kept == 0 and [m.id for m in kept_only.missed] == ["path-2"]


@pytest.mark.parametrize(("decoys", "recovered"), [(3, 1), (12, 0)])
def test_a_query_that_matches_too_many_places_does_not_bring_the_fact_back(
    decoys: int, recovered: int
) -> None:
    # Every decoy names another config.py, before the one that matters: past the tool's
    # eight excerpts, the fact is not in what one search returns.
    noise = [f"Looked at pkg{n}/settings/config.py: nothing there." for n in range(decoys)]
    original = conversation([*noise, "The bug is in lib/core/config.py line 40."])
    small = compacted(original)
    result = recoverable_recall(original, small, [fact("lib/core/config.py", "path")])
    assert (result.kept, result.total) == (recovered, 1)


def test_nothing_missed_means_no_recoverable_recall() -> None:
    original = conversation(["one"])
    result = recoverable_recall(original, compacted(original), [])
    assert (result.total, result.recall) == (0, None)


def test_nothing_replaced_recovers_nothing() -> None:
    original = conversation(["Edited a/b.py"])
    result = recoverable_recall(original, original, [fact("a/b.py", "path")])
    assert (result.kept, result.total, result.recall) == (0, 1, 0.0)


def row(case: str, recoverable: FactRecall | None, **update: object) -> ResultRow:
    return ResultRow(
        case_id=case,
        strategy="masking",
        status="ok",
        agent_model="gpt-4o",
        tokens_before=1000,
        budget_tokens=300,
        tokens_after=250,
        gold=FactRecall(total=4, kept=2, recall=0.5),
        recoverable=recoverable,
    ).model_copy(update=update)


def test_a_row_written_before_recoverable_recall_still_loads(tmp_path: Path) -> None:
    old = row("a", None).model_dump(mode="json")
    del old["recoverable"]
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps(old) + "\n", encoding="utf-8")
    (loaded,) = read_rows(results).values()
    assert loaded.recoverable is None and loaded.gold is not None
    assert aggregate([loaded])[0].recoverable_recall is None


def test_the_aggregate_is_the_mean_over_the_rows_that_missed_something() -> None:
    rows = [
        row("a", FactRecall(total=2, kept=1, recall=0.5)),
        row("b", FactRecall(total=1, kept=1, recall=1.0)),
        row("c", FactRecall(total=0, kept=0, recall=None)),
        row("d", FactRecall(total=1, kept=0, recall=0.0), status="error"),
    ]
    (masking,) = aggregate(rows)
    assert masking.recoverable_recall == pytest.approx(0.75)
