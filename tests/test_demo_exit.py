"""``summarizer demo`` ends cleanly: a draft still being written ahead of time when the session
ends is cancelled and waited for as the proxy stops, never left to the event loop to report as
a task destroyed while pending (which printed two ``ERROR asyncio`` tracebacks after the table)."""

from __future__ import annotations

import subprocess
import sys


def test_the_demo_ends_without_asyncio_errors() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "context_summarizer", "demo"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "planted facts still in context" in done.stdout
    output = done.stdout + done.stderr
    assert "Task was destroyed but it is pending" not in output
    assert "ERROR" not in output
