"""The console script, run as a user would run it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import app

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
    assert "--via must be" in result.output


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
