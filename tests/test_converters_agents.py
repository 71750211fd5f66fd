"""The mini-swe-agent and Claude Code converters, on small excerpted fixtures (and, when the
shared trajectories are on this machine, on all of them)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from context_summarizer.cli.convert import convert_app
from context_summarizer.core.errors import ConversionError
from context_summarizer.evaluation.converters import (
    check_commands,
    convert_claude_code,
    failing_tests,
    key_commands,
    patch_identifiers,
    read_claude_code,
    read_mini_swe_agent,
)
from context_summarizer.evaluation.dataset import Case, load_dataset

from .test_converters import _assert_valid, _facts

FIXTURES = Path(__file__).parent / "fixtures" / "converters"
MINI = FIXTURES / "mini-swe-agent" / "django__django-13820.traj.json"
SESSION = FIXTURES / "claude-code" / "session.jsonl"
SHARED = Path("/work/shared/trajectories")


# --- mini-swe-agent ---------------------------------------------------------------------------


def test_mini_swe_agent_keeps_observations_as_the_user_turns_they_were() -> None:
    case = read_mini_swe_agent(MINI)
    _assert_valid(case)
    assert case.id == "django__django-13820"
    roles = [m["role"] for m in case.messages]
    assert roles == ["system", "user", *(["assistant", "user"] * 5)]
    assert all("extra" not in m for m in case.messages)  # the agent's own bookkeeping is gone
    assert case.messages[3]["content"].startswith("<returncode>0</returncode>")
    assert _facts(case) == [
        ("patch-file-1", "path", "django/db/migrations/loader.py"),
        ("patch-identifier-1", "identifier", "MigrationLoader"),  # the hunk's class
        ("test-1", "test", "test_load_empty_dir"),  # unittest's "FAIL: test_x (module.Class)"
        ("error-1", "error", "KeyError: 'namespace_app'"),
        (
            "error-2",
            "error",
            "LookupError: No installed app with label 'namespace_app'. "
            "Did you mean 'namespace_app'?",
        ),
        (
            "error-3",
            "error",
            "AssertionError: 'migrations' not found in {'staticfiles', 'messages'} : App missing "
            "__init__.py in migrations module not in unmigrated apps.",
        ),
        ("command-1", "command", "python3 reproduce_issue.py"),
        ("command-2", "command", "./tests/runtests.py migrations.test_loader"),  # cd, pipe off
    ]
    assert case.probes[0].answer == "django/db/migrations/loader.py"
    assert case.metadata["resolved"] is True  # from results_summary.json beside the file
    assert case.metadata["format"] == "mini-swe-agent"
    assert case.metadata["exit_status"] == "Submitted"


def test_mini_swe_agent_without_a_results_summary_leaves_resolved_unknown(tmp_path: Path) -> None:
    copy = tmp_path / MINI.name
    shutil.copy(MINI, copy)
    case = read_mini_swe_agent(copy)
    assert "resolved" not in case.metadata
    assert case.id == "django__django-13820"


def test_mini_swe_agent_rejects_what_is_not_a_trajectory(tmp_path: Path) -> None:
    path = tmp_path / "x.traj.json"
    path.write_text(json.dumps({"info": {}}), encoding="utf-8")
    with pytest.raises(ConversionError, match=r"x\.traj\.json: no 'messages' list"):
        read_mini_swe_agent(path)


def test_patch_identifiers_across_languages() -> None:
    patch = "\n".join(
        [
            "diff --git a/a.py b/a.py",
            "@@ -1,3 +1,4 @@ class Invoice(Base):",
            "+    def apply_discount(self, rate):",
            "-    def old_helper(self):",
            "     def unchanged(self):",
            "diff --git a/m.go b/m.go",
            "@@ -9,2 +9,2 @@ func (s *Server) Serve(ctx context.Context) error {",
            "+func NewServer() *Server {",
            "diff --git a/lib.rs b/lib.rs",
            "+pub fn parse_total(s: &str) -> u32 {",
            "diff --git a/lib/a.ex b/lib/a.ex",
            "+  defp valid?(x), do: x",
            "+export async function loadConfig(path) {",
            "+++ b/def fake(",
        ]
    )
    assert patch_identifiers(patch) == [
        "Invoice",
        "apply_discount",
        "old_helper",
        "Serve",
        "NewServer",
        "parse_total",
        "valid?",
        "loadConfig",
    ]


def test_check_commands_of_every_toolchain() -> None:
    lines = [
        "cd /repo && go test ./... 2>&1 | tail -5",
        "MIX_ENV=test mix test test/a_test.exs",
        "cargo clippy --all-targets; npm run lint",
        "./gradlew test > out.txt",
        "ls -la && git status && grep -n foo bar.py",
        "bundle exec rspec spec/a_spec.rb",
        "go test ./...",
    ]
    assert check_commands(lines) == [
        "go test ./...",
        "mix test test/a_test.exs",
        "cargo clippy --all-targets",
        "npm run lint",
        "./gradlew test",
        "bundle exec rspec spec/a_spec.rb",
    ]


def test_failing_tests_and_key_commands() -> None:
    log = "FAIL: test_a (pkg.tests.T)\nERROR: test_b (__main__.C)\nFAILED t/test_x.py::test_c"
    assert failing_tests(log) == ["test_a", "test_b", "t/test_x.py::test_c"]
    lines = [
        "cd /testbed && python3 reproduce_bug.py 2>&1 | head",
        "python -m pytest tests/test_a.py -q > out.txt; echo done",
        "python3 reproduce_other.py",
    ]
    assert key_commands(lines) == [
        "python3 reproduce_bug.py",
        "python -m pytest tests/test_a.py -q",
    ]


# --- Claude Code ------------------------------------------------------------------------------


def test_claude_code_session_before_its_compaction() -> None:
    case = read_claude_code(SESSION)
    _assert_valid(case)
    assert case.id == "258c7280-fixture"
    roles = [m["role"] for m in case.messages]
    assert roles == [
        *("user", "assistant", "tool", "tool"),  # one assistant message from four records
        *("assistant", "tool", "assistant", "tool", "assistant", "tool"),
        *("user", "user", "assistant"),  # interrupted; the sidechain record is not here
    ]
    first = case.messages[1]
    assert first["content"] == (
        'Let me start by understanding what "spotter-gqc" means and what work is planned.'
    )
    assert [c["function"]["name"] for c in first["tool_calls"]] == ["Bash", "Read"]
    assert json.loads(first["tool_calls"][0]["function"]["arguments"])["command"] == (
        "bd show spotter-gqc 2>/dev/null"
    )
    assert case.messages[6]["content"] == ""  # a call with no text: "" rather than null
    text = json.dumps(case.messages)
    assert "Let me look at the epic first" not in text  # thinking is dropped
    assert "sub-agent" not in text and "Continuing after the compaction" not in text
    assert case.messages[-1]["content"] == "Done: config/test.exs now sets `secret_key_base`."
    [given] = case.summaries
    assert given.name == "claude-code" and given.covers == len(case.messages)
    assert given.text.startswith("This session is being continued from a previous conversation")
    assert _facts(case) == [
        ("edited-1", "path", "lib/spotter/transcripts/annotation.ex"),  # the refused Write: no
        (
            "failed-command-1",
            "command",
            "mix test test/spotter_web/live/project_review_live_test.exs",
        ),
        (
            "error-1",
            "error",
            "** (RuntimeError) no :secret_key_base configuration found in SpotterWeb.Endpoint.",
        ),
        # What the user typed after the task; not "[Request interrupted by user for tool use]".
        ("user-1", "constraint", "Set secret_key_base in config/test.exs instead, then continue."),
    ]
    assert case.facts[0].aliases == [
        "/home/USER/projects/spotter-worktrees/spotter-gqc/lib/spotter/transcripts/annotation.ex"
    ]
    assert case.metadata["compactions"] == 1
    assert case.metadata["compact_pre_tokens"] == 167094
    assert case.metadata["dropped_thinking_blocks"] == 1
    assert case.probes[0].answer == "lib/spotter/transcripts/annotation.ex"


def test_claude_code_session_that_never_compacted_converts_whole() -> None:
    records: list[Any] = [
        {"type": "user", "message": {"role": "user", "content": "hi"}, "sessionId": "s1"},
        {"type": "assistant", "message": {"id": "m1", "role": "assistant", "content": "hello"}},
        {"type": "progress", "data": {}},
    ]
    case = convert_claude_code(records, source="s1.jsonl")
    assert case.messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    assert case.summaries == [] and case.facts == []
    assert case.metadata["compactions"] == 0


def test_claude_code_rejects_a_file_without_a_conversation(tmp_path: Path) -> None:
    path = tmp_path / "notes.jsonl"
    path.write_text('{"type": "summary", "summary": "x"}\n', encoding="utf-8")
    with pytest.raises(ConversionError, match=r"notes\.jsonl: no user or assistant records"):
        read_claude_code(path)


# --- the command ------------------------------------------------------------------------------


@pytest.mark.parametrize(("fmt", "path"), [("mini-swe-agent", MINI), ("claude-code", SESSION)])
def test_cli_converts_each_new_format(tmp_path: Path, fmt: str, path: Path) -> None:
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(convert_app, [fmt, str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    cases, errors = load_dataset([out])
    assert errors == [] and len(cases) == 1
    assert cases[0].metadata["format"] == fmt


def test_cli_help_names_every_format() -> None:
    result = CliRunner().invoke(convert_app, ["--help"])
    assert result.exit_code == 0
    for name in ("swe-agent", "chat", "mini-swe-agent", "claude-code"):
        assert name in result.stdout


# --- the shared trajectories, when this machine has them --------------------------------------

needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="no shared trajectories here")


@needs_shared
def test_all_31_mini_swe_agent_runs_convert() -> None:
    files = sorted((SHARED / "mini-swe-agent").glob("*.traj.json"))
    cases = [read_mini_swe_agent(path) for path in files]
    assert len(cases) == 31
    for case in cases:
        assert isinstance(case, Case)
        assert any(f.kind == "path" for f in case.facts), case.id
        assert case.metadata["resolved"] in (True, False), case.id
        assert {m["role"] for m in case.messages} == {"system", "user", "assistant"}


@needs_shared
def test_both_claude_code_sessions_convert_with_their_summary() -> None:
    files = sorted((SHARED / "claude-code").glob("*.jsonl"))
    cases = [read_claude_code(path) for path in files]
    assert len(cases) == 2
    for case in cases:
        [given] = case.summaries
        assert given.covers == len(case.messages) > 100
        assert given.text.startswith("This session is being continued")
        assert {"path", "command", "error"} <= {f.kind for f in case.facts}
        # Test, build and lint commands count whatever their outcome; Elixir's here.
        ran = [f.text for f in case.facts if f.id.startswith("ran-")]
        assert "mix test" in ran and any(c.startswith("mix credo --strict") for c in ran)
