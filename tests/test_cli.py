"""The console script, run as a user would run it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import FACTS_LEGEND, app
from context_summarizer.proxy.settings import declared

runner = CliRunner()


def test_help_lists_the_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "demo" in result.output and "count" in result.output


def test_count_counts_a_conversation_offline(tmp_path: Path) -> None:
    path = tmp_path / "conversation.json"
    messages = [{"role": "user", "content": "hello world"}]
    path.write_text(json.dumps(messages))
    result = runner.invoke(app, ["count", str(path), "--model", "gpt-4o"])
    assert result.exit_code == 0, result.output
    # 3 per message + "user" (1) + "hello world" (2) + 3 reply priming
    assert result.output.startswith("9 tokens")


def test_count_reports_bad_input_clearly(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"content": "no role"}]))
    result = runner.invoke(app, ["count", str(path)])
    assert result.exit_code == 2
    assert "messages[0].role" in result.output


def test_demo_runs_end_to_end_as_a_console_script() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "context_summarizer.cli",
            "demo",
            "--turns",
            "40",
            "--context-window",
            "8000",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "through the proxy" in result.stdout
    assert "compaction  1:" in result.stdout
    # What each compaction line's figures are, said once, under the header.
    assert result.stdout.count(FACTS_LEGEND) == 1
    assert result.stdout.index(FACTS_LEGEND) < result.stdout.index("compaction  1:")
    assert re.search(r"tokens, facts named (\d+%|n/a), summary request cached", result.stdout)
    assert "fact score" not in result.stdout
    assert re.search(r"planted facts still in context\s+5/5", result.stdout)
    stored = re.search(r"checkpoints at GET /v1/summarizer/sessions/\{id\}\s+(\d+)", result.stdout)
    compactions = re.search(r"\ncompactions\s+(\d+)", result.stdout)
    assert stored and compactions and stored.group(1) == compactions.group(1)


def test_demo_runs_through_wrap_with_via_library() -> None:
    result = runner.invoke(
        app, ["demo", "--via", "library", "--turns", "30", "--context-window", "8000"]
    )
    assert result.exit_code == 0, result.output
    assert "through wrap()" in result.output
    assert "checkpoints at GET" not in result.output  # no proxy, no sessions endpoint
    assert re.search(r"planted facts still in context\s+5/5", result.output)


def test_demo_refuses_an_unknown_path() -> None:
    result = runner.invoke(app, ["demo", "--via", "carrier-pigeon"])
    assert result.exit_code == 2
    assert "Invalid value for '--via'" in result.output and "'proxy', 'library'" in result.output


@pytest.mark.parametrize(
    ("api", "route"),
    [("messages", "/v1/messages (anthropic SDK)"), ("responses", "/v1/responses (openai SDK")],
)
def test_demo_shows_the_same_session_table_for_each_api(api: str, route: str) -> None:
    result = runner.invoke(app, ["demo", "--api", api, "--turns", "40", "--context-window", "8000"])
    assert result.exit_code == 0, result.output
    assert route in result.output
    compactions = re.search(r"\ncompactions\s+(\d+)", result.output)
    stored = re.search(r"checkpoints at GET /v1/summarizer/sessions/\{id\}\s+(\d+)", result.output)
    assert compactions and int(compactions.group(1)) >= 2
    assert stored and stored.group(1) == compactions.group(1)
    pairs = re.search(r"append-only between compactions\s+(\d+)/(\d+)", result.output)
    assert pairs and pairs.group(1) == pairs.group(2)
    shared = re.search(r"summary requests sharing the live prefix\s+(\d+)/(\d+)", result.output)
    assert shared and shared.group(1) == shared.group(2)
    assert re.search(r"planted facts still in context\s+5/5", result.output)


def test_demo_refuses_another_api_through_wrap() -> None:
    result = runner.invoke(app, ["demo", "--api", "messages", "--via", "library"])
    assert result.exit_code == 2
    assert "through the proxy" in result.output


def help_of(*command: str) -> str:
    result = runner.invoke(
        app, [*command, "--help"], env={"COLUMNS": "200"}, prog_name="summarizer"
    )
    assert result.exit_code == 0, result.output
    return result.output


PYTHON_TYPE = re.compile(r"<(str|int|float|bool|path|list\[|tuple)[^>]*>|\{\w+\}")
"""How Typer 0.27 and later name a value (``<str>``, ``<list[Path]>``, ``{session}``)."""


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["demo"],
        ["count"],
        ["serve"],
        ["eval"],
        ["sessions"],
        ["show"],
        ["export"],
        ["convert"],
        ["convert", "chat"],
    ],
    ids=lambda command: " ".join(command) or "summarizer",
)
def test_help_names_values_as_click_does(command: list[str]) -> None:
    text = help_of(*command)
    assert not PYTHON_TYPE.search(text), PYTHON_TYPE.search(text)
    assert "--help  " in text or "--help\n" in text  # a switch: no value after it
    assert "<bool>" not in text and "BOOLEAN" not in text


def test_help_shows_metavars_and_choices() -> None:
    demo = help_of("demo")
    assert "--via [proxy|library]" in demo and "--api [chat|messages|responses]" in demo
    assert "--turns INTEGER" in demo and "--model TEXT" in demo and "--port INTEGER" in demo
    assert re.search(r"--keep-serving +After the session", demo)
    evaluation = help_of("eval")
    assert "Usage: summarizer eval [OPTIONS] FILE..." in evaluation
    assert re.search(r"\n  FILE\.\.\. +Files to evaluate", evaluation)
    assert "--out PATH" in evaluation and "-s, --strategy TEXT" in evaluation
    assert "--budget FLOAT" in evaluation and "--concurrency INTEGER" in evaluation
    assert re.search(r"--no-progress +No progress bar", evaluation)
    assert "Usage: summarizer show [OPTIONS] SESSION\n" in help_of("show")
    assert "Usage: summarizer export [OPTIONS] [SESSION]\n" in help_of("export")
    assert "Usage: summarizer count [OPTIONS] PATH\n" in help_of("count")
    assert "Usage: summarizer convert chat [OPTIONS] FILES...\n" in help_of("convert", "chat")
    serve = help_of("serve")
    chosen = [setting for setting in declared() if setting.flag and setting.choices]
    assert {s.name for s in chosen} >= {"policy", "log_format", "sessions_api"}
    for setting in chosen:
        assert f"{setting.flag} [{'|'.join(setting.choices)}]" in serve, setting.flag
    assert "--port INTEGER" in serve and re.search(r"--test-upstream +Forward", serve)
