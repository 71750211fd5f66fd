"""Cost of preparing a turn as the session grows: ``ContextManager.prepare()`` time per turn.

Method. One scripted, deterministic tool-using coding session (``CodingSession``: the same
script and tool executor the demo and tests use; every turn reads a file, searches or runs the
tests and gets a different 40-90 line output) is driven through the library exactly as a
hand-written agent loop drives it: the agent keeps its whole raw history, and each turn it calls
``prepare()`` on that history, "sends" the result, appends the assistant reply and the tool
results to the raw history, and feeds back the usage with ``observe()``. There is no network:
the model's reply is the script's next step, and the summary model is ``summary_responder`` (the
deterministic stand-in the test upstream uses) called in process through
``ContextManager(summarizer=...)``. ``observe()`` is given the library's own estimate as
``prompt_tokens``, as if the provider agreed with the count.

Compaction is configured as a user gets it by default: ``CompactionConfig()`` for ``gpt-4o``
(128k window from the model registry; compact at 80% of the usable window, down to 40%), with
the default in-memory checkpoint store. Every ``prepare()`` call is timed with
``time.perf_counter``, garbage collector on, as it runs in an agent. Turns where ``prepare()``
compacts include the in-process summary call; the stand-in's own time is measured too and
reported beside them.

The raw history is counted with a separate ``TiktokenCounter`` for the model's encoding (its own
cache), so measuring it never warms the library's token cache.

This module runs the section; the session and its timing are
``benchmarks.prepare_scaling_session``, the chart ``benchmarks.prepare_scaling_chart``, the
table and floor ``benchmarks.prepare_scaling_report``.

    python -m benchmarks.prepare_scaling [--quick] [--turns 1000] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from .prepare_scaling_chart import CHART, chart
from .prepare_scaling_report import report
from .prepare_scaling_session import MODEL, drive
from .results import Section, print_section

TITLE = "Cost of preparing a turn as the session grows"
COMMAND = "python -m benchmarks.prepare_scaling"

FULL_TURNS = 1_000
QUICK_TURNS = 60
QUICK_WINDOW = 16_000
"""Quick mode's window: small enough that its 60 turns compact too (same code path)."""


def run(*, quick: bool, out_dir: Path, turns: int | None = None) -> Section:
    """Run the section: ``quick`` is 60 turns in a 16k window, else 1,000 turns in gpt-4o's."""
    count = turns if turns is not None else (QUICK_TURNS if quick else FULL_TURNS)
    config: dict[str, Any] = {"context_window": QUICK_WINDOW} if quick else {}
    window_note = (
        f"a {QUICK_WINDOW:,}-token window (quick mode, so that it compacts)"
        if quick
        else "its registry window of 128k tokens"
    )
    started = time.perf_counter()
    measured = drive(count, **config)
    seconds = time.perf_counter() - started
    out_dir.mkdir(parents=True, exist_ok=True)
    title = f"prepare() per turn, {count:,}-turn session, {MODEL}"
    (out_dir / CHART).write_text(chart(measured, title=title), encoding="utf-8")
    body, floors = report(measured, quick=quick, window_note=window_note, seconds=seconds)
    return Section(
        title=TITLE,
        command=COMMAND,
        body=body,
        floors=floors,
        files=[CHART],
    )


def main() -> None:
    """Command line: run the section and print its body and floors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="60 turns in a 16k window")
    parser.add_argument("--turns", type=int, default=None, help="override the turn count")
    parser.add_argument("--out-dir", type=Path, default=None, help="where the chart goes")
    args = parser.parse_args()
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-prepare-"))
    section = run(quick=args.quick, out_dir=out_dir, turns=args.turns)
    print_section(section)
    print(f"\nchart: {out_dir / CHART}")


if __name__ == "__main__":
    main()
