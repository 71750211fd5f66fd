"""``summarizer --help`` and ``--version`` answer at once: the commands declared elsewhere
(``serve``, ``eval``, ``sessions``, ``show``, ``export``, ``convert``) are imported only when run or
asked for their own help, so neither the ``openai`` SDK, the evaluator, the proxy, the stores nor
pydantic is imported on the way. Each check runs in a fresh interpreter, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from context_summarizer.cli.help_format import first_paragraph
from context_summarizer.cli.lazy import load
from context_summarizer.cli.main import Commands, app

HEAVY = (
    "openai",
    "tiktoken",
    "starlette",
    "httpx",
    "httpx2",
    "pydantic",
    "rich",
    "orjson",
    "context_summarizer.proxy",
    "context_summarizer.core.engine",
    "context_summarizer.evaluation",
    "context_summarizer.library",
    "context_summarizer.stores",
)
"""What a top-level ``--help`` or ``--version`` imported before (about a second here)."""

RUN_AND_LIST_MODULES = """
import json, sys
sys.argv = ["summarizer", *sys.argv[1:]]
from context_summarizer.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def modules_after(*args: str) -> tuple[int, set[str], str]:
    """Run ``summarizer ARGS`` in a fresh interpreter: its exit code, the modules it imported,
    and what it printed (on either stream)."""
    result = subprocess.run(
        [sys.executable, "-c", RUN_AND_LIST_MODULES, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    printed, _, last = result.stdout.rstrip("\n").rpartition("\n")
    found = json.loads(last)
    return found["code"], set(found["modules"]), printed + result.stderr


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize(
    ("args", "says"),
    [(["--version"], "summarizer 0."), (["--help"], "Commands:"), ([], "Commands:")],
)
def test_help_and_version_import_nothing_heavy(args: list[str], says: str) -> None:
    code, modules, printed = modules_after(*args)
    assert code in (0, 2) and says in printed, printed  # no arguments: the help, exit 2
    assert heavy(modules) == [], f"summarizer {' '.join(args)} imported {heavy(modules)}"


def test_a_command_is_imported_when_asked_for_its_help() -> None:
    _, modules, printed = modules_after("sessions", "--help")
    assert "Usage: summarizer sessions [OPTIONS]" in printed
    assert "context_summarizer.cli.sessions" in modules
    assert not {"openai", "context_summarizer.evaluation"} & modules  # what it needs only
    _, modules, _ = modules_after("--help")
    assert "context_summarizer.cli.sessions" not in modules


def _console_script() -> list[str]:
    script = Path(sys.executable).parent / "summarizer"
    return [str(script)] if script.exists() else [sys.executable, "-m", "context_summarizer.cli"]


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_the_real_command_answers_well_under_a_second(args: list[str]) -> None:
    # The best of three: one slow run on a loaded machine says nothing about the start-up.
    # Before the commands were imported lazily this took about 1.0 s here, 3.3 s elsewhere.
    best = float("inf")
    for _ in range(3):
        started = time.monotonic()
        result = subprocess.run(
            [*_console_script(), *args], capture_output=True, text=True, timeout=60, check=True
        )
        best = min(best, time.monotonic() - started)
    assert result.stdout.startswith("summarizer ") or "Commands:" in result.stdout
    assert best < 1.5, f"summarizer {' '.join(args)} took {best:.2f} s"


def test_each_lazy_command_is_listed_by_its_own_first_paragraph() -> None:
    for name, lazy in Commands.lazy.items():
        command = load(name, lazy)
        assert command.name == name
        assert lazy.summary == first_paragraph(command.help or ""), name


def test_lazy_commands_run_and_a_mistyped_one_is_matched_against_them(tmp_path: Path) -> None:
    store = tmp_path / "none.db"
    missing = CliRunner().invoke(app, ["sessions", "--store", str(store)])
    assert missing.exit_code == 1 and "no store at" in missing.output
    typo = CliRunner().invoke(app, ["sesions"])
    assert typo.exit_code == 2
    assert "No such command 'sesions'. Did you mean 'sessions'?" in typo.output


def test_eval_help_imports_neither_the_strategies_nor_openai() -> None:
    _, modules, printed = modules_after("eval", "--help")
    assert "Usage: summarizer eval [OPTIONS]" in printed
    assert not {"openai", "context_summarizer.evaluation.strategies"} & modules


def test_the_strategy_names_eval_lists_are_the_strategies() -> None:
    from context_summarizer.evaluation import strategies, strategy_names
    from context_summarizer.evaluation.records import DEFAULT_MAX_SUMMARY_TOKENS

    assert tuple(strategies.STRATEGIES) == strategy_names.ALL
    assert strategy_names.MODEL == strategies.MODEL_STRATEGIES
    assert strategy_names.OFFLINE == strategies.OFFLINE_STRATEGIES
    assert strategy_names.ON_REQUEST == strategies.ON_REQUEST
    assert strategy_names.DEFAULT_MAX_SUMMARY_TOKENS == DEFAULT_MAX_SUMMARY_TOKENS
