"""The synthetic dataset: deterministic, valid, realistic in size, with its facts really present."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic_sessions import GENERATOR, generate_cases

from context_summarizer.core.messages import (
    group_units,
    message_text,
    tool_call_ids,
    validate_messages,
)
from context_summarizer.evaluation.dataset import Case, dump_case, load_dataset, write_dataset
from context_summarizer.loaders.tokenizers import make_counter

SHIPPED = Path(__file__).resolve().parents[1] / "datasets" / "coding-sessions.jsonl"
KINDS = {
    *("path", "error", "test", "identifier", "command"),
    *("decision", "constraint", "quantity", "open_work"),
}


@pytest.fixture(scope="module")
def cases() -> list[Case]:
    """The shipped configuration: seed 2026, 20 cases."""
    return generate_cases(seed=2026, count=20)


def _texts(case: Case) -> list[str]:
    return [message_text(message) for message in case.messages]


def _first_index(texts: list[str], needle: str) -> int | None:
    return next((i for i, text in enumerate(texts) if needle in text), None)


def test_same_seed_gives_identical_bytes_and_another_seed_differs(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a.jsonl", tmp_path / "b.jsonl", tmp_path / "c.jsonl"
    write_dataset(generate_cases(seed=11, count=3), first)
    write_dataset(generate_cases(seed=11, count=3), second)
    write_dataset(generate_cases(seed=12, count=3), other)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()


def test_a_larger_count_extends_a_smaller_one() -> None:
    small = [dump_case(case) for case in generate_cases(seed=5, count=2)]
    large = [dump_case(case) for case in generate_cases(seed=5, count=4)]
    assert large[:2] == small
    assert len(set(large)) == 4


def test_every_case_validates_through_load_dataset(cases: list[Case], tmp_path: Path) -> None:
    path = tmp_path / "cases.jsonl"
    assert write_dataset(cases, path) == 20
    loaded, errors = load_dataset([path])
    assert errors == []
    assert [case.id for case in loaded] == [case.id for case in cases]
    assert len({case.id for case in loaded}) == 20


def test_tool_calls_and_results_pair_up(cases: list[Case]) -> None:
    parallel = 0
    for case in cases:
        validate_messages(case.messages)
        assert [unit.kind for unit in group_units(case.messages)].count("tool") == 0, case.id
        for index, message in enumerate(case.messages):
            ids = tool_call_ids(message)
            if not ids:
                continue
            parallel += len(ids) > 1
            answers = case.messages[index + 1 : index + 1 + len(ids)]
            assert [m.get("tool_call_id") for m in answers] == ids, (case.id, index)
            assert all(m["role"] == "tool" for m in answers)
        declared = {tool["function"]["name"] for tool in case.tools or []}
        used = {
            call["function"]["name"]
            for message in case.messages
            for call in message.get("tool_calls") or ()
        }
        assert used <= declared, case.id
    assert parallel >= 20  # parallel calls appear throughout, not once


def test_facts_and_probe_answers_occur_verbatim(cases: list[Case]) -> None:
    for case in cases:
        texts = _texts(case)
        assert 8 <= len(case.facts) <= 15, case.id
        assert 3 <= len(case.probes) <= 6, case.id
        for fact in case.facts:
            assert fact.kind in KINDS, (case.id, fact.id)
            assert _first_index(texts, fact.text) is not None, (case.id, fact.id, fact.text)
        for probe in case.probes:
            assert _first_index(texts, probe.answer) is not None, (case.id, probe.question)


def test_most_facts_are_planted_in_the_part_a_compaction_replaces(cases: list[Case]) -> None:
    for case in cases:
        texts = _texts(case)
        cut = 0.6 * len(case.messages)
        positions = [_first_index(texts, fact.text) or 0 for fact in case.facts]
        early = sum(position < cut for position in positions)
        assert early >= 2 * len(positions) / 3, (case.id, positions)
        assert early < len(positions), case.id  # and a few late ones


def test_sizes_are_in_the_intended_range(cases: list[Case]) -> None:
    counter = make_counter("gpt-4o")
    sizes = [counter.count_messages(case.messages) for case in cases]
    assert all(15_000 <= size <= 60_000 for size in sizes), sizes
    assert all(40 <= len(case.messages) <= 150 for case in cases)
    assert sum(len(dump_case(case).encode()) + 1 for case in cases) < 8_000_000


def test_cases_vary_and_say_where_they_come_from(cases: list[Case]) -> None:
    languages = {case.metadata["language"] for case in cases}
    scenarios = {case.metadata["scenario"] for case in cases}
    assert languages == {"python", "typescript", "go", "rust"}
    assert len(scenarios) >= 6
    main_paths = {next(f.text for f in case.facts if f.id == "path-1") for case in cases}
    assert len(main_paths) >= 15
    for index, case in enumerate(cases):
        assert case.metadata["generator"] == GENERATOR
        assert (case.metadata["seed"], case.metadata["index"]) == (2026, index)
        assert case.model == "gpt-4o"
        roles = [message["role"] for message in case.messages]
        assert roles[:2] == ["system", "user"]
        assert roles.count("user") >= 2  # the task, then a constraint added mid-way
        assert any(m["role"] == "assistant" and not m.get("tool_calls") for m in case.messages)


def test_the_shipped_dataset_is_what_the_generator_produces(cases: list[Case]) -> None:
    expected = "".join(dump_case(case) + "\n" for case in cases)
    assert SHIPPED.read_text(encoding="utf-8") == expected, (
        "datasets/coding-sessions.jsonl is stale: run "
        "python datasets/generate.py --seed 2026 --count 20 --out datasets/coding-sessions.jsonl"
    )
