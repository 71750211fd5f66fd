"""Converters from SWE-agent and chat logs to evaluation cases, on small hand-written fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from context_summarizer.cli.convert import convert_app
from context_summarizer.core.errors import ConversionError
from context_summarizer.core.messages import group_units
from context_summarizer.evaluation.converters import (
    action_identifiers,
    convert_chat,
    convert_swe_agent,
    error_lines,
    failing_tests,
    patch_files,
    read_chat,
    read_swe_agent,
)
from context_summarizer.evaluation.dataset import Case, dump_case, load_dataset, parse_lines

FIXTURES = Path(__file__).parent / "fixtures" / "converters"
OPENAI_KEYS = {
    "system": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "function_call"},
    "tool": {"role", "content", "tool_call_id"},
}


def _facts(case: Case) -> list[tuple[str, str, str]]:
    return [(fact.id, fact.kind, fact.text) for fact in case.facts]


def _assert_valid(case: Case) -> None:
    """The case survives a JSONL round trip, keeps only OpenAI keys, and pairs every call."""
    [(_, parsed)] = list(parse_lines([dump_case(case)]))
    assert isinstance(parsed, Case), parsed
    for message in case.messages:
        assert set(message) <= OPENAI_KEYS[message["role"]], message
    assert "tool" not in [unit.kind for unit in group_units(case.messages)]
    for index, message in enumerate(case.messages):
        calls = [call["id"] for call in message.get("tool_calls") or ()]
        answers = [m.get("tool_call_id") for m in case.messages[index + 1 : index + 1 + len(calls)]]
        assert sorted(answers, key=str) == sorted(calls)


def test_function_calling_traj() -> None:
    case = read_swe_agent(FIXTURES / "function-calling.traj")
    _assert_valid(case)
    assert case.id == "function-calling"
    assert _facts(case) == [
        ("patch-file-1", "path", "src/widgets/layout.py"),
        ("patch-file-2", "path", "tests/test_layout.py"),
        ("patch-identifier-1", "identifier", "resize"),  # the hunk's function, named in the run
        ("test-1", "test", "tests/test_layout.py::test_resize_zero"),
        ("test-2", "test", "tests/test_io.py::test_load_theme"),
        ("error-1", "error", "ValueError: width must be positive, got 0"),
        ("command-1", "command", "python reproduce.py"),
        ("command-2", "command", "pytest -q"),  # the first test run
    ]
    roles = [message["role"] for message in case.messages]
    # the demo is dropped, the stray observation becomes the user's, the unanswered submit goes
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "user",
        "assistant",
    ]
    assert not any("demonstration" in json.dumps(m) for m in case.messages)
    assert case.messages[-1] == {"role": "assistant", "content": "Submitting."}
    # tool_calls given as Python-literal text are parsed; tool_call_ids become tool_call_id
    assert case.messages[4]["tool_calls"][0]["id"] == "call_tests"
    assert case.messages[5]["tool_call_id"] == "call_tests"
    assert case.probes[0].answer == "src/widgets/layout.py"
    assert case.metadata["dropped_demos"] == 1
    assert case.metadata["exit_status"] == "submitted"
    assert case.metadata["messages_from"] == "history"


def test_text_actions_traj_drops_string_flagged_demos() -> None:
    case = read_swe_agent(FIXTURES / "text-actions.traj")
    _assert_valid(case)
    assert case.id == "acme__parser-42"
    assert case.metadata["instance_id"] == "acme__parser-42"
    assert case.metadata["dropped_demos"] == 1
    roles = [m["role"] for m in case.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert not any("DEMONSTRATION" in m["content"] for m in case.messages)
    assert _facts(case) == [
        ("patch-file-1", "path", "parser.py"),
        ("test-1", "test", "tests/test_parser.py::test_empty_input"),
        ("error-1", "error", "IndexError: list index out of range"),
        ("command-1", "command", "python3 reproduce_parser.py"),
    ]


def test_trajectory_steps_when_there_is_no_history() -> None:
    case = read_swe_agent(FIXTURES / "steps-only.traj")
    _assert_valid(case)
    assert case.metadata["messages_from"] == "trajectory"
    assert [m["role"] for m in case.messages] == [
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert (
        case.messages[0]["content"]
        == "Run the failing test.\n\n```\npytest tests/test_cache.py -x\n```"
    )
    assert case.messages[-1]["content"] == "Done, submitting.\n\n```\nsubmit\n```"
    assert _facts(case) == [
        ("patch-file-1", "path", "cache/store.py"),
        ("test-1", "test", "tests/test_cache.py::test_expiry"),
        ("error-1", "error", "KeyError: 'expires_at'"),
        ("command-1", "command", "pytest tests/test_cache.py -x"),
    ]


def test_convert_swe_agent_is_pure_on_a_mapping() -> None:
    data: dict[str, Any] = {
        "history": [
            {"role": "user", "content": "fix it", "agent": "main"},
            {"role": "assistant", "content": "done", "thought": "done", "action": "submit"},
        ],
        "info": {"exit_status": "exit_cost"},
    }
    case = convert_swe_agent(data, source="run.traj")
    assert case.messages == [
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "done"},
    ]
    assert case.facts == [] and case.probes == []
    assert case.metadata["exit_status"] == "exit_cost"


def test_fact_extractors() -> None:
    patch = "diff --git a/a.py b/a.py\n+x\ndiff --git a/b/c.py b/b/c.py\ndiff --git a/a.py b/a.py\n"
    assert patch_files(patch) == ["a.py", "b/c.py"]
    log = "FAILED t/test_x.py::test_a[1] - boom\nt/test_y.py::test_b ERROR\nERROR t/test_z.py\nok"
    assert failing_tests(log) == ["t/test_x.py::test_a[1]", "t/test_y.py::test_b", "t/test_z.py"]
    traceback = (
        "Traceback (most recent call last):\n  File 'x'\n    y()\nmod.CustomError: bad\n"
        "E       AssertionError: 1 != 2\nValueError: not in a traceback\n"
    )
    assert error_lines(traceback) == ["mod.CustomError: bad", "AssertionError: 1 != 2"]
    actions = [
        {"name": "book", "kwargs": {"user_id": "ann_1", "cabin": "economy", "amount": 250}},
        {"name": "pay", "kwargs": {"flights": [{"flight_number": "HAT001", "date": "2024-05-20"}]}},
        {"name": "note", "kwargs": {"summary": "two words", "code": "ABC", "ref": "X1Y2Z3"}},
    ]
    assert action_identifiers(actions) == ["ann_1", "HAT001", "ABC", "X1Y2Z3"]


def test_chat_json_keeps_tools_and_drops_unknown_keys() -> None:
    cases = read_chat(FIXTURES / "chat.json")
    for case in cases:
        _assert_valid(case)
    assert [case.id for case in cases] == ["weather-1", "chat-2"]
    weather = cases[0]
    assert weather.tools is not None and weather.tools[0]["function"]["name"] == "get_weather"
    assert "extra_vendor_key" not in weather.messages[2]
    assert weather.messages[3] == {
        "role": "tool",
        "content": '{"temp_c": -3}',
        "tool_call_id": "call_w1",
    }
    assert cases[1].tools is None


def test_chat_jsonl_numbers_conversations_through_the_file() -> None:
    cases = read_chat(FIXTURES / "chat.jsonl")
    assert [case.id for case in cases] == ["chat-1", "chat-task-7", "chat-3"]
    assert [case.messages[0]["content"] for case in cases] == ["first", "second", "third"]


def test_tau_bench_identifiers_become_facts_when_the_conversation_has_them() -> None:
    cases = read_chat(FIXTURES / "tau-bench.json")
    for case in cases:
        _assert_valid(case)
    assert [case.id for case in cases] == ["tau-bench-task-0-trial-0", "tau-bench-task-1-trial-0"]
    first = cases[0]
    assert _facts(first) == [
        ("identifier-1", "identifier", "ZFA04Y"),
        ("identifier-2", "identifier", "HAT136"),
    ]
    assert first.metadata["identifiers_not_in_conversation"] == ["credit_card_4421486"]
    assert first.metadata["instruction"] == "You are mia_li_3668. Change reservation ZFA04Y."
    assert first.metadata["reward"] == 1.0
    assert [(p.question, p.answer) for p in first.probes] == [
        ("What is the customer's user id?", "mia_li_3668")
    ]
    assert "name" not in first.messages[3]  # tau-bench's tool-message name is not OpenAI's


def test_repeated_ids_in_one_file_get_suffixes() -> None:
    data = [{"id": "x", "messages": [{"role": "user", "content": str(n)}]} for n in range(3)]
    assert [case.id for case in convert_chat(data, source="dup.json")] == ["x", "x-2", "x-3"]


@pytest.mark.parametrize(
    ("read", "name", "expected"),
    [
        (read_chat, "not-json.json", "invalid JSON"),
        (read_swe_agent, "chat.json", "must hold one JSON object"),
        (read_swe_agent, "missing.traj", "cannot read"),
        (read_chat, "function-calling.traj", "no 'messages' or 'traj' key"),
    ],
)
def test_a_bad_file_is_an_error_naming_it(read: Any, name: str, expected: str) -> None:
    path = FIXTURES / name
    with pytest.raises(ConversionError) as caught:
        read(path)
    assert str(caught.value).startswith(str(path))
    assert expected in str(caught.value)


def test_an_unknown_role_is_an_error_naming_the_message() -> None:
    data = {"messages": [{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}]}
    with pytest.raises(ConversionError, match=r"^odd\.json: conversation 1: message 1 .*'robot'"):
        list(convert_chat(data, source="odd.json"))


def test_cli_writes_valid_jsonl(tmp_path: Path) -> None:
    out = tmp_path / "swe.jsonl"
    files = [str(path) for path in sorted(FIXTURES.glob("*.traj"))]
    result = CliRunner().invoke(convert_app, ["swe-agent", *files, "--out", str(out)])
    assert result.exit_code == 0, result.output
    cases, errors = load_dataset([out])
    assert errors == []
    assert [case.id for case in cases] == ["function-calling", "steps-only", "acme__parser-42"]
    assert "converted 3 case(s) from 3 of 3 file(s)" in result.stderr


def test_cli_reports_a_bad_file_continues_and_exits_1() -> None:
    bad, good = FIXTURES / "not-json.json", FIXTURES / "chat.json"
    result = CliRunner().invoke(convert_app, ["chat", str(bad), str(good), str(good)])
    assert result.exit_code == 1
    assert f"error: {bad}: invalid JSON" in result.stderr
    lines = [line for line in result.stdout.splitlines() if line]
    parsed = [item for _, item in parse_lines(lines)]
    assert all(isinstance(item, Case) for item in parsed)
    # ids stay unique across the files of one run
    assert [item.id for item in parsed if isinstance(item, Case)] == [
        "weather-1",
        "chat-2",
        "weather-1-2",
        "chat-2-2",
    ]
