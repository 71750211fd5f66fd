"""The evaluator's metrics on hand-made cases whose answers are known."""

from __future__ import annotations

import pytest

from context_summarizer.evaluation.dataset import GoldFact
from context_summarizer.evaluation.metrics import (
    aggregate,
    compacted_span,
    compression_ratio,
    context_text,
    extracted_fact_recall,
    fact_kept,
    gold_fact_recall,
    mean,
    missed_by_kind,
    row_cost,
)
from context_summarizer.evaluation.pricing import Price
from context_summarizer.evaluation.records import FactRecall, MissedFact, ModelCall, ResultRow

FIVE_FACTS = [
    GoldFact(id="path", text="src/billing/invoice.py", kind="path"),
    GoldFact(id="error", text="KeyError: 'discount_code'", kind="error"),
    GoldFact(id="commit", text="4f2a9c1e7b", kind="commit"),
    GoldFact(id="port", text="port 5432", kind="quantity"),
    GoldFact(id="rule", text="keep Python 3.9 compatibility", kind="constraint"),
]


def fact(text: str, *aliases: str, kind: str = "other") -> GoldFact:
    return GoldFact(id="f", text=text, aliases=list(aliases), kind=kind)


def test_a_summary_that_drops_one_of_five_facts_scores_0_8() -> None:
    summary = (
        "Fixed src/billing/invoice.py after KeyError: 'discount_code'. The last green build was "
        "4f2a9c1e7b. We must keep Python 3.9 compatibility."
    )
    recall = gold_fact_recall(summary, FIVE_FACTS)
    assert recall.total == 5 and recall.kept == 4
    assert recall.recall == pytest.approx(0.8)
    assert recall.missed == [MissedFact(id="port", kind="quantity", text="port 5432")]


def test_all_facts_kept_scores_1_and_none_kept_scores_0() -> None:
    everything = (
        "src/billing/invoice.py KeyError: 'discount_code' 4f2a9c1e7b port 5432 "
        "keep Python 3.9 compatibility"
    )
    assert gold_fact_recall(everything, FIVE_FACTS).recall == 1.0
    nothing = gold_fact_recall("we made progress", FIVE_FACTS)
    assert nothing.recall == 0.0
    assert [m.id for m in nothing.missed] == ["path", "error", "commit", "port", "rule"]


def test_a_case_without_facts_has_no_recall_rather_than_a_perfect_one() -> None:
    recall = gold_fact_recall("anything", [])
    assert recall.recall is None and recall.total == 0


def test_an_alias_counts_as_the_fact() -> None:
    rule = fact("discounts are applied before tax", "apply discounts before tax")
    assert fact_kept("Decision: apply discounts before tax.", rule)
    assert not fact_kept("Decision: apply tax first.", rule)


@pytest.mark.parametrize(
    ("text", "fact_text"),
    [
        ("edited src\\billing\\invoice.py", "src/billing/invoice.py"),
        ("edited src/billing/invoice.py", "src\\billing\\invoice.py"),
        ("edited ./src/billing/invoice.py", "src/billing/invoice.py"),
    ],
)
def test_paths_match_whatever_the_separator(text: str, fact_text: str) -> None:
    assert fact_kept(text, fact(fact_text, kind="path"))


@pytest.mark.parametrize(
    "text",
    [
        "keyerror: 'discount_code' in the discounts module",  # case
        "KeyError:\n   'discount_code'",  # whitespace
        'KeyError: "discount_code"',  # other quotes
        "KeyError: `discount_code`",  # backticks
        "KeyError: discount_code",  # no quotes
        "KeyError: \u2018discount_code\u2019",  # typographic quotes
    ],
)
def test_case_whitespace_and_quoting_do_not_matter(text: str) -> None:
    assert fact_kept(text, fact("KeyError: 'discount_code'", kind="error"))


def test_a_fact_inside_a_longer_word_is_not_kept() -> None:
    assert not fact_kept("listening on port 54321", fact("port 5432", kind="quantity"))
    assert not fact_kept("see syntax.py", fact("tax.py", kind="path"))
    assert not fact_kept("KeyError: 'discount_codes'", fact("KeyError: 'discount_code'"))


def tool_exchange(call_id: str, command: str, output: str) -> list[dict[str, object]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "run", "arguments": '{"command": "' + command + '"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def test_extracted_recall_counts_the_facts_of_what_was_removed_that_are_still_mentioned() -> None:
    system = {"role": "system", "content": "You are an agent."}
    task = {"role": "user", "content": "Fix the bug."}
    removed = tool_exchange(
        "c1", "ls", "src/billing/tax.py\nModuleNotFoundError: No module named 'billing.rates'"
    )
    last = {"role": "user", "content": "Go on."}
    original = [system, task, *removed, last]
    summary = {"role": "user", "content": "Summary: looked at src/billing/tax.py."}
    compacted = [system, task, summary, last]

    assert compacted_span(original, compacted) == removed
    recall = extracted_fact_recall(original, compacted)
    # The extractor finds the command, the path and the error line in the removed turn.
    assert recall.total == 3 and recall.kept == 1
    assert {(m.kind, m.text) for m in recall.missed} == {
        ("command", "ls"),
        ("error", "ModuleNotFoundError: No module named 'billing.rates'"),
    }


def test_extracted_recall_is_undefined_when_nothing_was_removed() -> None:
    messages = [{"role": "user", "content": "see src/app.py"}]
    recall = extracted_fact_recall(messages, list(messages))
    assert recall.total == 0 and recall.recall is None


def test_a_rewritten_message_is_part_of_the_compacted_span() -> None:
    output = {"role": "tool", "tool_call_id": "c1", "content": "long output"}
    masked = {"role": "tool", "tool_call_id": "c1", "content": "[omitted]"}
    assert compacted_span([output], [masked]) == [output]


def test_compression_ratio_is_tokens_after_over_tokens_before() -> None:
    assert compression_ratio(1000, 250) == 0.25
    assert compression_ratio(1000, 1000) == 1.0


def test_context_text_reads_tool_calls_too() -> None:
    text = context_text(tool_exchange("c1", "pytest -x", "1 failed"))
    assert "pytest -x" in text and "1 failed" in text


def test_mean_skips_missing_values() -> None:
    assert mean([1.0, None, 0.0]) == 0.5
    assert mean([None]) is None


def row(strategy: str, case: str, recall: float | None, **update: object) -> ResultRow:
    missed = (
        [MissedFact(id="x", kind="path", text="a.py")] if recall is not None and recall < 1 else []
    )
    base = ResultRow(
        case_id=case,
        strategy=strategy,
        status="ok",
        agent_model="gpt-4o",
        tokens_before=1000,
        budget_tokens=300,
        tokens_after=250,
        met_budget=True,
        compression_ratio=0.25,
        gold=FactRecall(total=2, kept=2 - len(missed), recall=recall, missed=missed),
    )
    return base.model_copy(update=update)


def test_aggregate_takes_means_per_strategy_and_counts_errors_apart() -> None:
    rows = [
        row("truncate", "a", 0.5),
        row("truncate", "b", 1.0, tokens_after=350, met_budget=False, compression_ratio=0.35),
        row("truncate", "c", None, status="error", error="boom"),
        row("given", "a", 0.5, variant="mine"),
    ]
    truncate, given = aggregate(rows)
    assert truncate.label == "truncate" and truncate.rows == 3 and truncate.errors == 1
    assert truncate.gold_recall == pytest.approx(0.75)
    assert truncate.compression_ratio == pytest.approx(0.30)
    assert truncate.tokens_after == pytest.approx(300)
    assert truncate.met_budget == 1
    assert truncate.missed_by_kind == {"path": 1}
    assert given.label == "given:mine" and given.gold_recall == 0.5


def test_missed_by_kind_counts_every_case() -> None:
    rows = [row("masking", "a", 0.5), row("masking", "b", 0.5), row("masking", "c", 1.0)]
    assert missed_by_kind(rows) == {"path": 2}


PRICES = {
    "gpt-4o": Price(input=2.5, cached_input=1.25, cache_write=2.5, output=10.0),
}


def test_row_cost_adds_the_model_calls_and_the_next_request() -> None:
    call = ModelCall(
        purpose="summary",
        model="gpt-4o",
        prompt_tokens=10_000,
        reusable_prefix_tokens=9_000,
        output_tokens=500,
    )
    priced = row("self-summary", "a", 1.0, calls=[call], tokens_after=3_000)
    # The call: 8,960 cached of 10,000 (1,024 + 62 steps of 128); the next request: none cached.
    expected = (1_040 * 2.5 + 8_960 * 1.25 + 500 * 10.0 + 3_000 * 2.5) / 1e6
    assert row_cost(priced, PRICES) == pytest.approx(expected)


def test_row_cost_is_unknown_without_a_price_or_for_an_error() -> None:
    assert row_cost(row("truncate", "a", 1.0, agent_model="mystery-model"), PRICES) is None
    assert row_cost(row("truncate", "a", 1.0, status="error"), PRICES) is None
