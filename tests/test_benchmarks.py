"""The benchmarks' smoke mode: every section runs end to end and RESULTS.md is well formed.

Figures are not checked (they are meaningless at smoke sizes and timing belongs in the
benchmarks, not in tests); what is checked is that each section ran, produced its tables and
its floors, and that the file says it is a smoke run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(900)  # the first run installs LiteLLM's proxy into its own virtualenv
def test_quick_mode_runs_every_section(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    finished = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert finished.returncode == 0, finished.stderr[-4000:]
    text = out.read_text(encoding="utf-8")
    assert "Smoke run (`--quick`)" in text
    assert "This section failed" not in text
    for title in (
        "## 1. Proxy overhead",
        "## 2. Cost of preparing a turn",
        "## 3. What compaction costs",
        "## 4. Memory",
        "## 5. Quality",
        "## 7. Proxy overhead by API",
        "## 8. Compaction latency, ahead of time",
        "## 9. Recall and the prompt cache",
        "## 10. A cheaper summary model",
        "## 11. Install size",
    ):
        assert title in text
    assert "litellm +median ms" in text  # LiteLLM was measured, not skipped
    # The last lane on uvicorn's private class, from its own tree, measured in the same run.
    assert "summarizer +median ms at e22dd62, this run" in text
    assert "| not judged |" in text and "| met |" not in text
    assert (tmp_path / "prepare_scaling.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("only", ["13", "", "1,x"])
def test_an_unknown_section_is_refused_before_anything_is_written(
    tmp_path: Path, only: str
) -> None:
    out = tmp_path / "RESULTS.md"
    finished = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--only", only, "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert finished.returncode == 2
    assert "--only takes section numbers from 1 to 12" in finished.stderr
    assert not out.exists()
