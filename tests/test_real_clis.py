"""The real coding-agent CLIs, unchanged, through the proxy (``.ci/run``'s real-CLI stage).

Claude Code, Codex CLI and Gemini CLI from npm (pinned in ``tests/agent-clis/package.json``;
``.ci/run`` installs them there) run real tool-using sessions through ``summarizer``'s proxy in
front of the test upstream, whose tool script makes them call their own tools (Claude Code's
Bash, Read, Write and Edit; Codex's shell and apply_patch; Gemini CLI's read_file,
run_shell_command, write_file and replace), so the tools really run in a scratch project and
their outputs come back through the proxy. Each session crosses the trigger at least twice.

What must hold: every run exits 0 with no error result; the proxy compacts only when the
trigger is crossed (never on the request after a compaction, since no single step adds the
distance from the target back to the trigger), or when the agent asks (Codex's own compaction);
one summary call per summary, none retried, one summary per compaction bar one; every request
fits the window; nothing the upstream received was refused. The cached share of prompt tokens
is printed (``-s``) and held to a floor.

Run with ``pytest -m real_cli -n 0 -s``; without the CLIs these tests are skipped, saying why
(under ``CI=true`` they fail instead).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.cli.test_upstream_serve import describe_request, for_test_model
from context_summarizer.core.results import CompactionEvent
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import RoutingResponder, TestUpstream
from context_summarizer.testing.tool_script import ToolScript, parse_tool_script

from .conftest import wait_until_serving
from .redis_server import free_port

pytestmark = pytest.mark.real_cli

CLIS = Path(os.environ.get("SUMMARIZER_AGENT_CLIS", Path(__file__).parent / "agent-clis"))
WINDOW = 64_000
REPLY_CAP = 8_000
RUN_TIMEOUT = 180


def cli(name: str) -> Path:
    """The installed CLI ``name``, or skip (fail under CI) saying how to install it."""
    path = CLIS / "node_modules" / ".bin" / name
    if not path.exists():
        reason = f"{name} is not installed: npm install --prefix {CLIS} (see .ci/run)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return path


class Session:
    """The test upstream walking a tool script, the proxy in front of it, and what happened,
    in order: ``("agent", n)`` for each agent request the upstream answered, ``("compaction",
    event)`` for each compaction."""

    def __init__(
        self, steps: list[dict[str, Any]], tmp_path: Path, *, gemini: bool = False
    ) -> None:
        """``gemini``: the upstream is the test upstream's Gemini API (``/v1beta``), and every
        model has the test model's limits, as under ``serve --test-upstream`` (Gemini CLI's
        models are not in the registry, and it sends no reply cap)."""
        self.script = ToolScript(parse_tool_script(steps), fallback=describe_request)
        self.log: list[tuple[str, Any]] = []
        self.upstream = TestUpstream(
            context_window=WINDOW, responder=RoutingResponder(self._agent)
        ).__enter__()
        settings = Settings(
            upstream=f"{self.upstream.root_url}/v1beta" if gemini else self.upstream.base_url,
            port=0,
            db=tmp_path / "checkpoints.db",
            context_window=WINDOW,
            prepare_ratio=None,  # each summary call where its compaction is (drafts: §8)
        )
        if gemini:
            settings = for_test_model(settings)
        self.proxy = ProxyServer(settings, on_compaction=self._compacted).start()

    def _agent(self, body: dict[str, Any]) -> Any:
        self.log.append(("agent", len(body.get("messages") or ())))
        return self.script(body)

    def _compacted(self, event: CompactionEvent) -> None:
        self.log.append(("compaction", event))

    def close(self) -> None:
        self.proxy.stop()
        self.upstream.__exit__(None, None, None)

    @property
    def compactions(self) -> list[CompactionEvent]:
        return [event for kind, event in self.log if kind == "compaction"]

    def check(self, row: str, *, runs: int, reserve: int, trigger: str = "threshold") -> None:
        """What must hold of any session through the proxy (see the module docstring), and the
        figures docs/agents.md gives for it (the table row whose first cell starts with ``row``,
        ``runs`` runs); ``reserve``: the reply reserve of its requests; ``trigger``: what starts its
        compactions (``"manual"``: the agent asks for each)."""
        assert self.script.finished, f"{self.script.taken} of {len(self.script.steps)} steps"
        requests = self.upstream.requests
        assert requests and all(r.status == 200 for r in requests), [
            (r.path, r.status) for r in requests if r.status != 200
        ]
        assert len(self.compactions) >= 2, "the session must cross the trigger twice"
        usable = WINDOW - reserve
        for event in self.compactions:
            assert event.trigger == trigger
            if trigger == "threshold":
                assert event.tokens_before > 0.8 * usable * 0.9  # the trigger, less calibration
            assert event.tokens_after <= usable
        # Never a compaction on the request after one: the agent answered at least twice
        # between two compactions.
        kinds = [kind for kind, _ in self.log]
        positions = [n for n, kind in enumerate(kinds) if kind == "compaction"]
        for before, after in itertools.pairwise(positions):
            assert kinds[before + 1 : after].count("agent") >= 2, kinds
        summaries = [r for r in requests if r.is_summary]
        # One summary call per summary: none retried, none replaced by the fallback. (A
        # compaction writes one summary per run it replaces: two when the latest user message
        # stands amid the agent's work, as when Codex compacts before a turn.)
        verdicts = [v for event in self.compactions for v in event.verdicts]
        assert len(summaries) == len(verdicts), "one summary call per summary"
        assert set(verdicts) == {"accepted"}, verdicts
        assert len(verdicts) <= len(self.compactions) + 1, verdicts
        prompt = sum(r.prompt_tokens or 0 for r in requests)
        cached = sum(r.cached_tokens or 0 for r in requests)
        share = cached / prompt
        print(
            f"\n{len(requests)} upstream requests, {len(self.compactions)} compactions, "
            f"{len(summaries)} summary calls; cached share of prompt tokens {share:.1%} "
            f"({cached:,} of {prompt:,})"
        )
        assert share > 0.5
        figures = documented_row(row)
        assert figures[:4] == [runs, len(requests), len(self.compactions), len(summaries)], (
            f"docs/agents.md's table says {figures} for {row!r}"
        )
        assert abs(figures[4] - 100 * share) < 1.0, figures


def documented_row(first_cell: str) -> list[float]:
    """The figures of the table row of docs/agents.md (the coding agents' page) starting with
    ``first_cell``."""
    page = (Path(__file__).parent.parent / "docs" / "agents.md").read_text()
    for line in page.splitlines():
        if line.startswith(f"| {first_cell}"):
            cells = [cell.strip() for cell in line.strip("|").split("|")][1:]
            return [float(cell.rstrip("%").replace(",", "")) for cell in cells]
    raise AssertionError(f"no table row for {first_cell!r} in docs/agents.md")


@pytest.fixture
def session_for(tmp_path: Path) -> Iterator[Callable[..., Session]]:
    started: list[Session] = []

    def start(steps: list[dict[str, Any]], **options: Any) -> Session:
        session = Session(steps, tmp_path, **options)
        started.append(session)
        return session

    yield start
    for session in started:
        session.close()


def scratch_project(root: Path, batches: int) -> Path:
    """A small project with one log file per batch (about 2,500 tokens each) to read."""
    project = root / "project"
    project.mkdir()
    (project / "app.py").write_text("def value():\n    return 1\n")
    for batch in range(batches):
        lines = (
            f"batch {batch} record {n}: status={'ok' if n % 7 else 'FAILED'} "
            f"module=src/mod{n % 13}.py took={(n * 37) % 900}ms"
            for n in range(150)
        )
        (project / f"log_{batch}.txt").write_text("\n".join(lines) + "\n")
    return project


# -- Claude Code ------------------------------------------------------------------------------


def claude_code_steps(project: Path, batches: int) -> list[dict[str, Any]]:
    """Per batch (one ``claude -p`` run): read its log twice over (Read, then Bash), run a
    command, write a note, edit app.py, then answer; app.py is read first, as Edit requires."""
    steps: list[dict[str, Any]] = [
        {"tool": "Read", "arguments": {"file_path": str(project / "app.py")}}
    ]
    for batch in range(batches):
        log = str(project / f"log_{batch}.txt")
        steps += [
            {"tool": "Read", "arguments": {"file_path": log}},
            {"tool": "Bash", "arguments": {"command": f"grep -n FAILED {log}; wc -l {log}"}},
            {"tool": "Bash", "arguments": {"command": f"cat {log}", "description": "show log"}},
            {
                "tool": "Write",
                "arguments": {
                    "file_path": str(project / f"note_{batch}.md"),
                    "content": f"batch {batch}: failures every 7th record\n",
                },
            },
            {
                "tool": "Edit",
                "arguments": {
                    "file_path": str(project / "app.py"),
                    "old_string": f"return {batch + 1}",
                    "new_string": f"return {batch + 2}",
                },
            },
            {"text": f"Batch {batch} reviewed: notes in note_{batch}.md, app.py updated."},
        ]
    return steps


def claude(project: Path, home: Path, base_url: str, prompt: str, *more: str) -> Any:
    """One ``claude -p`` run (its default model) through the proxy at ``base_url``; its JSON
    result."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": "sk-ant-real-cli-test",
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": str(REPLY_CAP),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    command = [
        str(cli("claude")),
        "-p",
        *more,
        prompt,
        "--output-format",
        "json",
        "--allowedTools",
        "Bash,Read,Write,Edit",
    ]
    done = subprocess.run(
        command, cwd=project, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert done.returncode == 0, done.stderr[-2000:] or done.stdout[-2000:]
    result = json.loads(done.stdout)
    assert result["is_error"] is False and result["subtype"] == "success", result
    return result


def test_claude_code_runs_tools_and_compacts_through_the_proxy(
    tmp_path: Path, session_for: Callable[..., Session]
) -> None:
    cli("claude")
    batches = 12
    project = scratch_project(tmp_path, batches)
    home = tmp_path / "home"
    home.mkdir()
    session = session_for(claude_code_steps(project, batches))
    for batch in range(batches):
        more = ("--continue",) if batch else ()
        prompt = f"Review batch {batch} of the logs."
        result = claude(project, home, session.proxy.base_url, prompt, *more)
        assert result["result"].startswith(f"Batch {batch} reviewed")
    # The tools really ran, in the project, on what the proxy relayed.
    assert (project / "app.py").read_text() == f"def value():\n    return {batches + 1}\n"
    assert all((project / f"note_{n}.md").exists() for n in range(batches))
    session.check("Claude Code", runs=batches, reserve=REPLY_CAP)


def test_claude_code_through_serve_test_upstream_with_a_script(tmp_path: Path) -> None:
    """What the README tells a user to run: ``summarizer serve --test-upstream --test-script``,
    the command itself, with Claude Code pointed at it."""
    cli("claude")
    project = scratch_project(tmp_path, 1)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(claude_code_steps(project, 1)))
    port = free_port()
    serve = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("summarizer")),
            "serve",
            "--test-upstream",
            "--test-script",
            str(script),
            "--context-window",
            str(WINDOW),
            "--port",
            str(port),
            "--db",
            str(tmp_path / "serve.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_serving(serve, f"http://127.0.0.1:{port}")
        home = tmp_path / "home"
        home.mkdir()
        base = f"http://127.0.0.1:{port}/v1"
        result = claude(project, home, base, "Review batch 0 of the logs.")
        assert result["result"].startswith("Batch 0 reviewed")
        assert (project / "note_0.md").exists()
        assert (project / "app.py").read_text() == "def value():\n    return 2\n"
    finally:
        serve.terminate()
        output, _ = serve.communicate(timeout=30)
    statuses = re.findall(r'HTTP/1\.1" (\d{3})', output)  # the access log
    assert statuses and set(statuses) == {"200"}, statuses


# -- Codex CLI -------------------------------------------------------------------------------


def codex_steps(batches: int) -> list[dict[str, Any]]:
    """Per batch (one ``codex exec`` run): read its log twice over, run a command, write a note,
    edit app.py (all through Codex's ``exec_command``), then answer."""
    steps: list[dict[str, Any]] = []
    for batch in range(batches):
        log = f"log_{batch}.txt"
        commands = [
            f"cat {log}",
            f"grep -n FAILED {log}; wc -l {log}",
            f"cat {log} | sort -t= -k3",
            f"printf 'batch {batch}: failures every 7th record\\n' > note_{batch}.md",
            f"sed -i 's/return {batch + 1}/return {batch + 2}/' app.py && cat app.py",
        ]
        steps += [{"tool": "exec_command", "arguments": {"cmd": c}} for c in commands]
        steps.append({"text": f"Batch {batch} reviewed: notes in note_{batch}.md, app.py updated."})
    return steps


CODEX_COMMON = """model = "gpt-5"
check_for_update_on_startup = false
[analytics]
enabled = false
[feedback]
enabled = false
"""


def codex_config(proxy: ProxyServer, provider: str, compact_limit: int | None) -> str:
    """Codex's config.toml: its built-in OpenAI provider pointed at the proxy, or a custom
    provider on the Responses API; ``compact_limit``: Codex's own compaction threshold."""
    lines = []
    if provider == "built-in":
        lines.append(f'openai_base_url = "{proxy.base_url}"')
    else:
        lines.append('model_provider = "summarizer"')
    if compact_limit is not None:
        lines.append(f"model_auto_compact_token_limit = {compact_limit}")
    text = "\n".join(lines) + "\n" + CODEX_COMMON
    if provider != "built-in":
        text += (
            "[model_providers.summarizer]\n"
            'name = "summarizer proxy"\n'
            f'base_url = "{proxy.base_url}"\n'
            'wire_api = "responses"\n'
            'env_key = "OPENAI_API_KEY"\n'
        )
    return text


def codex(project: Path, home: Path, prompt: str, *, resume: bool) -> tuple[str, float]:
    """One ``codex exec`` run (``resume``: ``exec resume --last``) through the proxy; its last
    agent message and how long it took."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "OPENAI_API_KEY": "sk-real-cli-test"}
    command = [
        str(cli("codex")),
        "exec",
        "--skip-git-repo-check",
        "--json",
        "--sandbox",
        "workspace-write",
        *(("resume", "--last") if resume else ()),
        prompt,
    ]
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:] or done.stdout[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    kinds = [event["type"] for event in events]
    assert "turn.completed" in kinds and not {"turn.failed", "error"} & set(kinds), kinds
    errors = [
        event["item"]["message"]
        for event in events
        if event["type"] == "item.completed" and event["item"]["type"] == "error"
    ]
    # The one warning Codex gives for a model its registry lacks, nothing else.
    assert all("Model metadata for `gpt-5` not found" in e for e in errors), errors
    said = [
        event["item"]["text"]
        for event in events
        if event["type"] == "item.completed" and event["item"]["type"] == "agent_message"
    ]
    return said[-1], took


@pytest.mark.parametrize("provider", ["built-in", "custom"])
def test_codex_runs_tools_and_compacts_through_the_proxy(
    tmp_path: Path, session_for: Callable[..., Session], provider: str
) -> None:
    """Custom provider: the proxy compacts at its trigger. Built-in provider: Codex compacts
    by itself (its ``model_auto_compact_token_limit`` set under the proxy's trigger), each time
    with a ``compaction_trigger`` the proxy answers; first it tries the Responses WebSocket, whose
    426 sends it to HTTPS at once."""
    cli("codex")
    batches = 10
    project = scratch_project(tmp_path, batches)
    home = tmp_path / "home"
    (home / ".codex").mkdir(parents=True)
    session = session_for(codex_steps(batches))
    limit = 30_000 if provider == "built-in" else None
    (home / ".codex" / "config.toml").write_text(codex_config(session.proxy, provider, limit))
    took = []
    for batch in range(batches):
        said, seconds = codex(project, home, f"Review batch {batch} of the logs.", resume=batch > 0)
        assert said.startswith(f"Batch {batch} reviewed")
        took.append(seconds)
    # Five WebSocket reconnects before falling back to HTTPS cost 6 s a run; a run's own work
    # here takes well under a second.
    assert statistics.median(took) < 3, took
    assert (project / "app.py").read_text() == f"def value():\n    return {batches + 1}\n"
    assert all((project / f"note_{n}.md").exists() for n in range(batches))
    if provider == "built-in":
        triggers = [
            r
            for r in session.upstream.requests
            if r.path.endswith("/responses") and "compaction_trigger" in json.dumps(r.body)
        ]
        assert not triggers  # the proxy answered every trigger itself
    # Codex sends no reply cap: the proxy reserves a quarter of the window.
    session.check(
        f"Codex 0.169.0, {provider} provider",
        runs=batches,
        reserve=WINDOW // 4,
        trigger="manual" if provider == "built-in" else "threshold",
    )


# -- Gemini CLI ------------------------------------------------------------------------------


def gemini_steps(batches: int) -> list[dict[str, Any]]:
    """One ``gemini -p`` run through every batch: per batch, read its log twice over
    (read_file, then run_shell_command), run a command, write a note, edit app.py; then one
    answer. (One run: 0.61.0's ``--resume`` sends each restored function response twice, which
    Gemini refuses and so does the proxy.)"""
    steps: list[dict[str, Any]] = []
    shell = "run_shell_command"
    for batch in range(batches):
        log = f"log_{batch}.txt"
        steps += [
            {"tool": "read_file", "arguments": {"file_path": log}},
            {"tool": shell, "arguments": {"command": f"grep -n FAILED {log}; wc -l {log}"}},
            {"tool": shell, "arguments": {"command": f"cat {log}", "description": "show log"}},
            {
                "tool": "write_file",
                "arguments": {
                    "file_path": f"note_{batch}.md",
                    "content": f"batch {batch}: failures every 7th record\n",
                },
            },
            {
                "tool": "replace",
                "arguments": {
                    "file_path": "app.py",
                    "instruction": "Bump the value returned.",
                    "old_string": f"return {batch + 1}",
                    "new_string": f"return {batch + 2}",
                },
            },
        ]
    steps.append({"text": f"All {batches} batches reviewed: notes written, app.py updated."})
    return steps


GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
}
"""Gemini CLI's ``~/.gemini/settings.json``: its API-key auth (with ``GOOGLE_GEMINI_BASE_URL``
set, 0.61 otherwise picks a "gateway" auth its own check refuses), no usage statistics, no
telemetry, no update checks."""


def gemini(project: Path, home: Path, base_url: str, prompt: str) -> Any:
    """One ``gemini -p`` run through the proxy at ``base_url``, every tool approved
    (``--yolo``); its JSON result."""
    (home / ".gemini").mkdir(parents=True, exist_ok=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(GEMINI_SETTINGS))
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "GOOGLE_GEMINI_BASE_URL": base_url.removesuffix("/v1"),
        "GEMINI_API_KEY": "gemini-real-cli-test",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }
    command = [str(cli("gemini")), "-p", prompt, "--yolo", "--output-format", "json"]
    done = subprocess.run(
        command,
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr[-2000:] or done.stdout[-2000:]
    result = json.loads(done.stdout[done.stdout.index("{") :])
    assert "error" not in result, result
    return result


def test_gemini_cli_runs_tools_and_compacts_through_the_proxy(
    tmp_path: Path, session_for: Callable[..., Session]
) -> None:
    """Gemini CLI asks a routing model first (a ``generateContent`` with a JSON schema, which
    the test upstream answers with a value of it), then streams each step with its ~30,000
    character system instruction, 15 function declarations (``--yolo``) and thinking on; its
    model turns carry thought signatures, which the test upstream checks come back unaltered."""
    cli("gemini")
    batches = 12
    project = scratch_project(tmp_path, batches)
    session = session_for(gemini_steps(batches), gemini=True)
    prompt = f"Review the {batches} batches of logs."
    result = gemini(project, tmp_path / "home", session.proxy.base_url, prompt)
    assert result["response"].startswith(f"All {batches} batches reviewed"), result
    # The tools really ran, in the project, on what the proxy relayed.
    assert (project / "app.py").read_text() == f"def value():\n    return {batches + 1}\n"
    assert all((project / f"note_{n}.md").exists() for n in range(batches))
    requests = session.upstream.requests
    assert all(r.api == "gemini" for r in requests)
    # The router's question went through the proxy's Gemini front door too.
    routed = [r for r in requests if not r.stream and not r.is_summary]
    assert routed and all("responseJsonSchema" in r.body["generationConfig"] for r in routed)
    # Gemini CLI sends no reply cap: the proxy reserves a quarter of the window.
    session.check("Gemini CLI 0.61.0", runs=1, reserve=WINDOW // 4)


def test_gemini_cli_through_serve_test_upstream_with_a_script(tmp_path: Path) -> None:
    """``summarizer serve --test-upstream --test-script``, the command itself, with Gemini CLI
    pointed at it: the test upstream serves Gemini's methods under ``/v1`` too."""
    cli("gemini")
    project = scratch_project(tmp_path, 1)
    script = tmp_path / "script.json"
    script.write_text(json.dumps(gemini_steps(1)))
    port = free_port()
    serve = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("summarizer")),
            "serve",
            "--test-upstream",
            "--test-script",
            str(script),
            "--context-window",
            str(WINDOW),
            "--port",
            str(port),
            "--db",
            str(tmp_path / "serve.db"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until_serving(serve, f"http://127.0.0.1:{port}")
        base = f"http://127.0.0.1:{port}/v1"
        result = gemini(project, tmp_path / "home", base, "Review batch 0 of the logs.")
        assert result["response"].startswith("All 1 batches reviewed")
        assert (project / "note_0.md").exists()
        assert (project / "app.py").read_text() == "def value():\n    return 2\n"
    finally:
        serve.terminate()
        output, _ = serve.communicate(timeout=30)
    statuses = re.findall(r'HTTP/1\.1" (\d{3})', output)  # the access log
    assert statuses and set(statuses) == {"200"}, statuses
    assert "streamGenerateContent?alt=sse" in output


def test_the_clis_are_the_pinned_versions() -> None:
    pinned = json.loads((Path(__file__).parent / "agent-clis" / "package.json").read_text())
    versions = pinned["dependencies"]
    claude_version = subprocess.run(
        [str(cli("claude")), "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    assert claude_version.startswith(versions["@anthropic-ai/claude-code"])
    codex_version = subprocess.run(
        [str(cli("codex")), "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    assert codex_version.strip().endswith(versions["@openai/codex"])
    gemini_version = subprocess.run(
        [str(cli("gemini")), "--version"], capture_output=True, text=True, timeout=60
    ).stdout
    assert gemini_version.strip() == versions["@google/gemini-cli"]
    assert shutil.which("node") is not None
