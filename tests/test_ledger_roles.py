"""The ledger ranks by what the agent did: each tool vocabulary the converters read (Claude Code's
Edit/Write/Bash, OpenAI tool calls, mini-swe-agent's bash in text, SWE-agent's actions, tau-bench's
tool calls, Codex's shell and apply_patch) gives its facts their roles, and under a bound the
ledger keeps the edited files, failed runs, unresolved errors and the user's words first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.core.facts import (
    LEDGER_HEADER,
    Fact,
    extract_facts,
    importance,
    merge_ledger,
    rank_facts,
)
from context_summarizer.evaluation.compaction import CompactionInput, request_tokens
from context_summarizer.evaluation.converters import (
    read_chat,
    read_claude_code,
    read_mini_swe_agent,
    read_swe_agent,
)
from context_summarizer.evaluation.metrics import context_text, gold_fact_recall
from context_summarizer.evaluation.strategies import STRATEGIES
from context_summarizer.loaders.tokenizers import make_counter

FIXTURES = Path(__file__).parent / "fixtures" / "converters"
SHARED = Path("/work/shared/trajectories")
CWD = "/home/USER/projects/spotter-worktrees/spotter-gqc"


def roles(messages: list[dict[str, Any]]) -> dict[tuple[str, str], str | None]:
    return {(f.kind, f.text): f.role for f in extract_facts(messages)}


def call(name: str, arguments: Any, call_id: str = "c1", text: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": text,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def answer(content: str, call_id: str = "c1") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_claude_code_session_roles() -> None:
    case = read_claude_code(FIXTURES / "claude-code" / "session.jsonl")
    found = roles(case.messages)
    assert found[("path", f"{CWD}/lib/spotter/transcripts/annotation.ex")] == "edited"
    # The Write the user refused wrote nothing: the file is one the session only named.
    assert found[("path", f"{CWD}/config/test.exs")] is None
    mix = "mix test test/spotter_web/live/project_review_live_test.exs 2>&1"
    assert found[("command", mix)] == "failed"
    secret = "** (RuntimeError) no :secret_key_base configuration found in SpotterWeb.Endpoint."
    assert found[("error", secret)] == "unresolved"
    assert found[("command", "bd show spotter-gqc 2>/dev/null")] == "ran"
    ranked = rank_facts(case.messages)
    top = {(f.kind, f.text) for f in ranked if importance(f) == 0}
    assert ("constraint", "Set secret_key_base in config/test.exs instead, then continue.") in top
    edited = ("path", f"{CWD}/lib/spotter/transcripts/annotation.ex")
    assert {edited, ("command", mix), ("error", secret)} <= top
    assert importance(Fact(kind="command", text="bd show spotter-gqc 2>/dev/null", role="ran")) == 3


def test_mini_swe_agent_run_roles() -> None:
    case = read_mini_swe_agent(FIXTURES / "mini-swe-agent" / "django__django-13820.traj.json")
    found = roles(case.messages)
    # Edited in turns the excerpt cut; the final `git diff --cached` output names the file.
    assert found[("path", "django/db/migrations/loader.py")] == "edited"
    runtests = "cd /testbed && ./tests/runtests.py migrations.test_loader 2>&1 | tail -n 30"
    assert found[("command", runtests)] == "failed"  # <returncode>1</returncode>
    assert found[("test", "test_load_empty_dir")] == "failed"
    assert found[("command", "python3 reproduce_issue.py")] == "passed"
    # Seen in an earlier run of the reproduce script, which passed later: resolved.
    assert found[("error", "KeyError: 'namespace_app'")] == "resolved"
    # Observations come back as user turns, and are not the user's words.
    assert not any(kind == "constraint" for kind, _ in found)


def test_swe_agent_function_calling_roles() -> None:
    case = read_swe_agent(FIXTURES / "function-calling.traj")
    found = roles(case.messages)
    assert found[("command", "pytest -q")] == "failed"
    assert found[("command", "python reproduce.py")] == "failed"
    assert found[("test", "tests/test_layout.py::test_resize_zero")] == "failed"
    assert found[("error", "ValueError: width must be positive, got 0")] == "unresolved"
    assert ("constraint", "(Open file: n/a)") not in found  # SWE-agent's prompt, not the user


def test_swe_agent_text_actions_roles() -> None:
    case = read_swe_agent(FIXTURES / "text-actions.traj")
    found = roles(case.messages)
    assert found[("command", "python3 reproduce_parser.py")] == "failed"
    assert found[("test", "tests/test_parser.py::test_empty_input")] == "failed"


def test_tau_bench_ids_passed_to_tools() -> None:
    [case, *_] = read_chat(FIXTURES / "tau-bench.json")
    found = roles(case.messages)
    assert found[("identifier", "ZFA04Y")] == "argument"
    assert ("identifier", "HAT136") in found  # a flight number the assistant wrote


def test_editor_tools_and_codex_shapes() -> None:
    messages = [
        call("str_replace_based_edit_tool", {"command": "view", "path": "src/app.py"}, "a"),
        answer("1\tdef main():", "a"),
        call("str_replace_editor", {"command": "create", "path": "src/new.py"}, "b"),
        answer("File created successfully at: src/new.py", "b"),
        call("apply_patch", {"input": "*** Begin Patch\n*** Update File: lib/core.rs\n"}, "c"),
        answer("Success. Updated the following files:\nM lib/core.rs", "c"),
        call("shell", {"command": ["bash", "-lc", "cargo test"]}, "d"),
        answer('{"output": "test result: FAILED", "metadata": {"exit_code": 101}}', "d"),
        call("write_file", {"path": "notes/plan.md", "content": "x"}, "e"),
        answer("Error: permission denied", "e"),
    ]
    found = roles(messages)
    assert found[("path", "src/app.py")] == "read"
    assert found[("path", "src/new.py")] == "edited"
    assert found[("path", "lib/core.rs")] == "edited"
    assert found[("command", "cargo test")] == "failed"
    assert found[("path", "notes/plan.md")] is None  # the write failed
    assert ("command", "view") not in found and ("command", "create") not in found


def test_shell_commands_that_write_and_read() -> None:
    commands = [
        "sed -i 's/a/b/' src/x.py",
        "cat <<'EOF' > docs/plan.md",
        "echo done >> build.log && tee out.cfg < in.cfg",
        "cat src/y.py && grep -n foo src/z.py",
        "pytest tests/test_x.py -q",
    ]
    messages: list[dict[str, Any]] = []
    for n, command in enumerate(commands):
        messages += [call("Bash", {"command": command}, f"k{n}"), answer("", f"k{n}")]
    found = roles(messages)
    for path in ("src/x.py", "docs/plan.md", "build.log", "out.cfg"):
        assert found[("path", path)] == "edited", path
    for path in ("src/y.py", "src/z.py"):
        assert found[("path", path)] == "read", path


def test_a_heredocs_body_is_what_it_writes_not_commands() -> None:
    script = "cat <<'EOF' > gen.py\nif a > limits.txt:\n    pass\nEOF\npython gen.py > out.log"
    found = roles([call("Bash", {"command": script}), answer("")])
    assert found[("path", "gen.py")] == "edited"
    assert found[("path", "out.log")] == "edited"  # after the heredoc, commands again
    assert found[("path", "limits.txt")] is None  # code inside the file, not a redirect


def test_a_later_passing_run_resolves_its_errors() -> None:
    messages = [
        call("Bash", {"command": "pytest tests/test_a.py"}, "1"),
        answer("Exit code 1\nE   KeyError: 'user'\nFAILED tests/test_a.py::test_one", "1"),
        call("Bash", {"command": "go vet ./..."}, "2"),
        answer("Exit code 2\n./main.go:3:2: undefined: frob", "2"),
        call("Bash", {"command": "pytest tests/test_a.py -x"}, "3"),
        answer("3 passed in 0.12s", "3"),
    ]
    found = roles(messages)
    assert found[("error", "KeyError: 'user'")] == "resolved"
    assert found[("command", "pytest tests/test_a.py -x")] == "passed"
    assert found[("error", "./main.go:3:2: undefined: frob")] == "unresolved"
    assert found[("command", "go vet ./...")] == "failed"


def test_what_the_user_typed_is_a_constraint_and_ranks_first() -> None:
    messages = [
        {"role": "user", "content": "Fix the login bug."},
        call("Bash", {"command": "ls src"}, "1"),
        answer("a.py b.py", "1"),
        {"role": "user", "content": "Don't touch the public API, and keep Python 3.9 support."},
        call("Bash", {"command": "cat src/a.py"}, "2"),
        answer("import os", "2"),
    ]
    ranked = rank_facts(messages)
    assert ranked[0] == Fact(
        kind="constraint",
        text="Don't touch the public API, and keep Python 3.9 support.",
    )  # the most recent of the top tier first
    assert ranked[1] == Fact(kind="constraint", text="Fix the login bug.")
    assert ranked[-1].text == "ls src"  # an exploring command goes first under a bound


def test_ranked_ledger_keeps_edits_over_a_flood_of_listings() -> None:
    listing = "\n".join(f"pkg/module_{i}.py" for i in range(300))
    messages = [
        call("Edit", {"file_path": "src/core.py", "old_string": "a", "new_string": "b"}, "1"),
        answer("The file src/core.py has been updated.", "1"),
        call("Bash", {"command": "find pkg -name '*.py'"}, "2"),
        answer(listing, "2"),
    ]
    counter = make_counter("gpt-4o")
    ledger = merge_ledger([], rank_facts(messages), max_tokens=60, count_tokens=counter.count_text)
    assert ledger[0] == Fact(kind="path", text="src/core.py", role="edited")
    assert counter.count_text(LEDGER_HEADER) < 60 and len(ledger) < 300


@pytest.mark.skipif(not SHARED.is_dir(), reason="no shared trajectories here")
def test_on_the_shared_claude_code_sessions_the_ledger_keeps_as_much_as_claude_code() -> None:
    """The issue's bar, on the two real sessions: at a budget of 0.1, ledger-only keeps at least
    as many gold facts as the summary Claude Code wrote at its own compaction."""
    counter = make_counter("gpt-4o")
    kept = {"ledger-only": 0, "given": 0}
    for path in sorted((SHARED / "claude-code").glob("*.jsonl")):
        case = read_claude_code(path)
        budget = int(0.1 * request_tokens(counter, case.messages, case.tools))
        for name in kept:
            strategy = STRATEGIES[name]
            [variant] = strategy.variants(case)
            job = CompactionInput(case, budget, counter, "gpt-4o", variant=variant)
            compaction = strategy.compact(job)
            assert compaction.met_budget
            kept[name] += gold_fact_recall(context_text(compaction.messages), case.facts).kept
    assert kept["ledger-only"] >= kept["given"] > 0
