"""``summarizer serve`` as a user runs it: a subprocess, flags and environment, JSON logs."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx2
import openai

from context_summarizer.testing import TestUpstream

from .conftest import wait_until_serving

KEY = "sk-serve-test-0123456789abcdef"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_serve_runs_with_flags_and_environment_and_logs_json_without_keys(tmp_path: Path) -> None:
    port = _free_port()
    with TestUpstream(context_window=16_000) as upstream:
        env = {
            **os.environ,
            "SUMMARIZER_CONTEXT_WINDOW": "16000",
            "SUMMARIZER_LOG_FORMAT": "text",  # the flag below wins
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # --upstream wins
        }
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "context_summarizer.cli",
                "serve",
                "--port",
                str(port),
                "--upstream",
                upstream.base_url,
                "--db",
                str(tmp_path / "c.db"),
                "--log-format",
                "json",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_until_serving(process, f"http://127.0.0.1:{port}")
            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0
            )
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}]
            )
            assert raw.parse().choices[0].message.content
            assert raw.headers["x-summarizer-compacted"] == "false"
            bad = httpx2.post(
                f"http://127.0.0.1:{port}/v1/chat/completions",
                content=b"{",
                headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
            )
            assert bad.status_code == 400
        finally:
            process.send_signal(signal.SIGINT)
            _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "serve logged nothing"
    records = [json.loads(line) for line in lines]
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    assert any("POST /v1/chat/completions" in r["message"] for r in records)
    assert KEY not in stderr


def test_serve_rejects_bad_settings_with_a_clear_error() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "context_summarizer.cli", "serve", "--trigger-ratio", "0.3"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: invalid settings")
    assert "Traceback" not in result.stderr


def test_serve_exits_3_when_its_port_is_taken_as_its_help_says() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [
                *(sys.executable, "-m", "context_summarizer.cli", "serve", "--port", str(port)),
                *("--db", ":memory:", "--log-level", "warning"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 3, result.stderr
    assert "address already in use" in result.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "context_summarizer.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "3 when the server cannot start (the port is taken)" in " ".join(shown.stdout.split())


def _serve_and_count_drafts(tmp_path: Path, *flags: str) -> dict[str, float]:
    """Run ``summarizer serve`` with ``flags``, send one conversation over 0.6 of the window
    (under the trigger), and read its drafts-ahead counters."""
    from .test_ahead import ahead_counts, grown

    port = _free_port()
    with TestUpstream(context_window=16_000) as upstream:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "context_summarizer.cli", "serve", "--port", str(port)),
                *("--upstream", upstream.base_url, "--db", str(tmp_path / "c.db")),
                *("--context-window", "16000", *flags),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until_serving(process, url)
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
            raw = client.chat.completions.with_raw_response.create(
                model="gpt-4o-mini",
                messages=grown(5),  # type: ignore[arg-type]
            )
            raw.parse()
            assert raw.headers["x-summarizer-compacted"] == "false"
            prompt = int(raw.headers["x-summarizer-prompt-tokens"])
            assert 0.6 * 12_000 < prompt < 0.8 * 12_000, prompt  # usable: 16,000 - 4,000
            counts = ahead_counts(type("P", (), {"base_url": f"{url}/v1"}))
        finally:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=30)
    return counts


def test_serve_drafts_ahead_of_time_by_default_and_off_turns_it_off(tmp_path: Path) -> None:
    # Counted before the answer goes out: no waiting for the draft itself.
    assert _serve_and_count_drafts(tmp_path / "default").get("started") == 1
    off = _serve_and_count_drafts(tmp_path / "off", "--prepare-ratio", "off")
    assert "started" not in off
