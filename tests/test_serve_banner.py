"""What ``summarizer serve`` says at startup, ``serve --test-upstream`` and
``demo --keep-serving``: real processes on 127.0.0.1, the real openai SDK."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
from pydantic import SecretStr
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.proxy.banner import banner_lines, display_url
from context_summarizer.proxy.settings import Settings

from .conftest import wait_until_serving
from .redis_server import RedisServer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_banner_names_everything_an_operator_checks_and_no_secret() -> None:
    settings = Settings(
        upstream="https://user:hunter2-password@api.example.com/v1?token=abc",
        upstream_api_key=SecretStr("sk-server-secret-0123456789"),
        client_keys=["client-key-one-0123456789"],
        db=Path("/var/lib/summarizer/checkpoints.db"),
        record=True,
    )
    text = "\n".join(banner_lines(settings))
    for secret in ("hunter2", "sk-server-secret", "client-key-one", "token=abc"):
        assert secret not in text
    assert "https://api.example.com/v1" in text
    assert "/var/lib/summarizer/checkpoints.db (SQLite)" in text
    assert "1 client key(s) required" in text and "the server's key" in text
    assert "each model's known window" in text and "--context-window" in text
    assert "recording  on" in text and "summarizer sessions --store" in text
    fixed = "\n".join(banner_lines(Settings(context_window=32_000, trigger_ratio=0.7)))
    assert (
        "32,000 tokens for every model; compact above 70% of it, drafted ahead above 55%" in fixed
    )
    off = "\n".join(banner_lines(Settings(prepare_ratio=None)))
    assert "(no drafts ahead: --prepare-ratio off)" in off
    assert "open: any client" in fixed and "each client's own key upstream" in fixed
    # How to point the coding agents at it, and a window too small for Claude Code named.
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:8787 CLAUDE_CODE_MAX_OUTPUT_TOKENS=8000" in text
    assert 'openai_base_url = "http://127.0.0.1:8787/v1"' in text
    assert "too small" not in text and "(this 32,000 is too small for it)" in fixed


def test_a_redis_store_is_shown_without_its_password() -> None:
    text = "\n".join(banner_lines(Settings(store="redis://:s3cret-pass@cache:6379/0")))
    assert "s3cret" not in text and "redis://cache:6379/0 (Redis" in text
    assert "summarizer sessions --store redis://cache:6379/0" in text


def test_display_url_drops_userinfo_query_and_fragment() -> None:
    assert display_url("redis://:pw@cache:6379/0?x=1#y") == "redis://cache:6379/0"


def test_test_upstream_and_upstream_together_are_refused() -> None:
    result = CliRunner().invoke(
        app, ["serve", "--test-upstream", "--upstream", "http://127.0.0.1:1/v1"]
    )
    assert result.exit_code == 2 and "two upstreams" in result.output


def _serve(args: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "HOME": str(tmp_path)}  # the default state folder stays in tmp
    return subprocess.Popen(
        [sys.executable, "-m", "context_summarizer", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


def test_serve_test_upstream_answers_a_real_agent_with_no_key(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "t.db"
    process = _serve(["serve", "--test-upstream", "--port", str(port), "--db", str(db)], tmp_path)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(process, url)
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="anything", max_retries=0)
        reply = sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]
        )
        text = reply.choices[0].message.content or ""
        assert "received 1 messages" in text and "hello there" in text
        # Talk of the summarizer, the model's own reply included, is not a summary of it.
        talk: list[Any] = [
            {"role": "system", "content": "You work on the summarizer repo."},
            {"role": "user", "content": "why does the summarizer drop facts?"},
            {"role": "assistant", "content": text},
            {"role": "user", "content": "[summarizer] check again"},
            {"role": "user", "content": "and the summarizer's ledger?"},
        ]
        again = sdk.chat.completions.create(model="gpt-4o-mini", messages=talk)
        said = again.choices[0].message.content or ""
        assert "received 5 messages;" in said and "summaries" not in said, said
        # A model no registry knows is managed too: the window is the test model's.
        raw = sdk.chat.completions.with_raw_response.create(
            model="my-local-model", messages=[{"role": "user", "content": "hello there"}]
        )
        assert "x-summarizer-warning" not in raw.headers, raw.headers.get("x-summarizer-warning")
        assert raw.headers["x-summarizer-prompt-tokens"].isdigit()
    finally:
        _, stderr = _stop(process)
    assert "built-in test model" in stderr and f"point agents at {url}/v1" in stderr
    assert f"{db} (SQLite)" in stderr and "16,000 tokens for every model" in stderr
    assert "unmanaged" not in stderr


def test_serve_test_upstream_keeps_to_a_redis_store(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    port = free_port()
    store = redis_server.url.removesuffix("/0") + "/7"
    process = _serve(["serve", "--test-upstream", "--port", str(port), "--store", store], tmp_path)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(process, url)
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="anything", max_retries=0)
        sdk.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]
        )
    finally:
        _, stderr = _stop(process)
    assert f"{store} (Redis" in stderr and "test-upstream.db" not in stderr


def test_demo_keep_serving_leaves_the_session_to_look_at(tmp_path: Path) -> None:
    port = free_port()
    process = _serve(["demo", "--turns", "30", "--keep-serving", "--port", str(port)], tmp_path)
    try:
        wait_until_serving(process, f"http://127.0.0.1:{port}", timeout=120)
    finally:
        stdout, stderr = _stop(process)
    assert "compaction  1" in stdout or "compaction 1" in stdout, stdout
    assert f"http://127.0.0.1:{port}/ui#key=demo-key" in stderr
    store = re.search(r"summarizer sessions --store (\S+)", stderr)
    assert store is not None, stderr
    listed = CliRunner().invoke(app, ["sessions", "--store", store[1], "--json"])
    assert listed.exit_code == 0 and '"requests": 31' in listed.output, listed.output


def test_the_banner_keeps_quiet_above_info(capsys: pytest.CaptureFixture[str]) -> None:
    from context_summarizer.proxy.banner import print_banner

    print_banner(Settings(log_level="warning"), ["summarizer banner line"])
    assert "banner line" not in capsys.readouterr().err
    print_banner(Settings(), ["summarizer banner line"])
    assert "banner line" in capsys.readouterr().err


def test_test_script_needs_the_test_upstream_and_a_valid_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text('[{"tool": "read_file", "arguments": {"path": "a"}}]')
    alone = CliRunner().invoke(app, ["serve", "--test-script", str(script)])
    assert alone.exit_code == 2 and "--test-script needs --test-upstream" in alone.output
    script.write_text('[{"tool": "read_file"}, {"calls": "read_file"}]')
    bad = CliRunner().invoke(app, ["serve", "--test-upstream", "--test-script", str(script)])
    assert bad.exit_code == 2, bad.output
    assert f"error: {script}: step 1: 'calls' must be a non-empty list" in bad.output
    assert "Traceback" not in bad.output


def test_serve_test_upstream_follows_a_test_script(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    steps = [{"tool": "read_file", "arguments": {"path": "a.py"}}, {"text": "all done"}]
    script.write_text(json.dumps(steps))
    port = free_port()
    args = ["serve", "--test-upstream", "--test-script", str(script), "--port", str(port)]
    process = _serve([*args, "--db", str(tmp_path / "t.db")], tmp_path)
    tools: list[Any] = [
        {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    ]
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_serving(process, url)
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="anything", max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "read a.py"}]
        # A side call offering no tools (a title generator) leaves the script where it is.
        title = sdk.chat.completions.create(model="gpt-4o-mini", messages=messages)
        assert "received 1 messages" in (title.choices[0].message.content or "")
        reply = sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
        [call] = reply.choices[0].message.tool_calls or []
        assert call.type == "function" and call.function.name == "read_file"
        assert json.loads(call.function.arguments) == {"path": "a.py"}
        assert call.id.startswith("call_") and call.id != "call_1"  # tagged: unique per run
        done = sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
        assert done.choices[0].message.content == "all done"
        after = sdk.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=tools)
        assert "received 1 messages" in (after.choices[0].message.content or "")
    finally:
        _, stderr = _stop(process)
    assert "following a script of 2 steps" in stderr


BANNER = "point agents at"


@pytest.mark.parametrize("mode", [[], ["--test-upstream"]], ids=["upstream", "test-upstream"])
def test_a_taken_port_prints_one_error_no_banner_and_exits_3(
    mode: list[str], tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _serve(["serve", *mode, "--port", str(port), "--db", ":memory:"], tmp_path)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 3, stderr
    assert BANNER not in stdout and BANNER not in stderr
    assert "upstream " not in stderr and "summarizer sessions" not in stderr
    (error,) = [line for line in stderr.splitlines() if "ERROR" in line]
    assert f"cannot listen on 127.0.0.1:{port}: address already in use" in error
    assert "--port" in error  # what to do about it


def test_the_banner_comes_once_the_port_is_listening(tmp_path: Path) -> None:
    port = free_port()
    process = _serve(["serve", "--test-upstream", "--port", str(port)], tmp_path)
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if BANNER in line:
                break
        else:
            raise AssertionError(f"serve exited with {process.wait()} before its banner")
        # Connecting right after the banner's first line: the port is already listening.
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        _stop(process)


def test_serve_help_states_the_exit_codes() -> None:
    shown = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    text = " ".join(shown.output.split())
    assert (
        "Exit status: 0 when stopped (Ctrl-C), 2 for a bad flag, variable or config file, " in text
    )
    assert "3 when the server cannot start (the port is taken)." in text
    assert text.rindex("Exit status") > text.rindex("--test-script")  # the epilog, at the end
