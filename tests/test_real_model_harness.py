"""The real-model harness without the model: it refuses any file but the expected one, and the
server it starts does not outlive the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from context_summarizer.testing import real_model
from context_summarizer.testing.real_model import (
    MODEL_ALIAS,
    MODEL_BYTES,
    ModelUnavailable,
    model_file,
)


def _target(cache: Path) -> Path:
    return cache / f"{MODEL_ALIAS}-q4_k_m-{real_model.MODEL_SHA256[:12]}.gguf"


def test_parts_that_do_not_join_to_the_expected_file_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts = []
    for index in range(1, 7):
        part = tmp_path / f"part{index:02d}.bin"
        part.write_bytes(b"not the model " * 100)
        parts.append(part)
    monkeypatch.setattr(real_model, "_installed_parts", lambda: parts)
    cache = tmp_path / "cache"
    with pytest.raises(ModelUnavailable, match="refusing them"):
        model_file(cache)
    assert not _target(cache).exists()
    assert list(cache.iterdir()) == []  # no half-written file left behind


def test_a_cached_file_of_the_right_size_but_another_digest_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    with _target(cache).open("wb") as forged:
        forged.truncate(MODEL_BYTES)  # sparse: the right size, all zeros
    monkeypatch.setattr(real_model, "_installed_parts", lambda: None)
    with pytest.raises(ModelUnavailable, match="not installed"):
        model_file(cache)


def test_the_server_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    parent = textwrap.dedent(
        """
        import subprocess, sys, time
        from context_summarizer.testing.real_model import die_with_parent
        child = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"], preexec_fn=die_with_parent
        )
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    process = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    child = int(process.stdout.readline())
    try:
        os.kill(child, 0)  # running
        process.send_signal(signal.SIGKILL)  # no cleanup code of the parent runs
        process.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(child):
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its parent"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by init, does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"
