"""The real-session dev set's arithmetic: columns pooled over the same cases, the recorded
ledger set beside today's on exactly those, the held-aside split fixed, the floors judged."""

from __future__ import annotations

from benchmarks.real_sessions import Outcome, floors, groups, held_aside, precision, table


def outcome(case: str, strategy: str, kept: int | None, *, part: str = "dev") -> Outcome:
    return Outcome(0.1, part, "claude-code", case, strategy, kept, 10)


def test_columns_pool_only_the_cases_every_strategy_and_the_record_could_compact() -> None:
    outcomes = [
        outcome("a", "ledger-only", 9),
        outcome("a", "given", 7),
        outcome("b", "ledger-only", None),  # infeasible: left out of every column
        outcome("b", "given", 5),
        outcome("c", "ledger-only", 8),
        outcome("c", "given", 8),
    ]
    before = {"0.1|a": 4, "0.1|b": 3, "0.1|c": None}  # c was infeasible before: left out too
    [group] = groups(outcomes, before)
    assert (group.cases, group.left_out) == (1, 2)
    assert group.kept == {"ledger-only": (9, 10), "given": (7, 10), "before": (4, 10)}
    assert "| 0.1 | dev | claude-code | 1 | 2 | 4/10 (40.0%) | 7/10 (70.0%) |" in table([group])


def test_floors_compare_the_ledger_with_claude_codes_summary_and_held_aside_masking() -> None:
    outcomes = [
        outcome("a", "ledger-only", 6),
        outcome("a", "given", 7),
        outcome("x", "ledger-only", 5, part="held aside"),
        outcome("x", "masking", 5, part="held aside"),
        outcome("x", "observation-masking", 6, part="held aside"),
    ]
    found = groups(outcomes, {})
    judged = {(f.name, f.limit): f.met for f in floors(found)}
    assert (
        judged[
            (
                "Claude Code sessions at 0.1: gold facts ledger-only keeps",
                "≥ Claude Code's own summary (7)",
            )
        ]
        is False
    )
    assert judged[("held aside at 0.1: gold facts ledger-only keeps", "≥ masking (5)")] is True
    assert (
        judged[("held aside at 0.1: gold facts ledger-only keeps", "≥ observation-masking (6)")]
        is False
    )


def test_the_held_aside_third_is_fixed_by_the_case_id() -> None:
    ids = [f"case-{n}" for n in range(300)]
    aside = [i for i in ids if held_aside(i)]
    assert aside == [i for i in ids if held_aside(i)]  # deterministic
    assert 70 < len(aside) < 130  # about a third


def test_precision_counts_only_judged_items_and_lists_the_rest() -> None:
    items = [("claude-code", f"path: src/m{n}.py") for n in range(5)]
    labels = {"path: src/m0.py": True, "path: src/m1.py": False}
    facts, judged, unjudged = precision(items, labels)
    assert (facts, judged) == (1, 2)
    assert sorted(unjudged) == [f"path: src/m{n}.py" for n in range(2, 5)]
