"""Resident memory of ``summarizer serve`` against the number of sessions it has stored.

Method. The test upstream (``context_summarizer.testing.TestUpstream``: the agent gets a one-word
reply, summary requests get ``summary_responder``'s deterministic summary) runs on 127.0.0.1 in this
process; ``summarizer serve`` runs in its own process, as users run it, with a SQLite store and a
context window of 1.2 x the session size, so that each session's single request is over the
trigger (80 % of the window) and compacts exactly once: every session really is stored, as one
checkpoint row in SQLite. Sessions are distinct from their first user message on: each is a
tool-using coding-agent conversation (``read_file``, ``grep``, ``run_tests``, ``list_dir`` calls
and their outputs, with some assistant reasoning) generated from its own seed, with its own
repository, identifiers, file names and tool-output sizes, counted exactly with tiktoken to the
session size. Requests rotate over four API keys, so the store holds four credential namespaces.

Run A (one proxy process): the proxy's RSS (``VmRSS``) and peak RSS (``VmHWM``) are read from
``/proc`` after startup, after a warm-up (a few small requests and one compacting session under
a separate key), and once the stored-session count reaches each checkpoint (10, 100, 250, 500,
1,000; quick mode 3, 10, 20 of ~5k tokens). Then the ten oldest sessions, long evicted from
the chain cache and the checkpoint memo, come back with one more turn: the proxy must rewrite
them from their stored checkpoint without compacting again.

Run B (a fresh proxy over the same, full SQLite file): the same warm-up and ten new sessions, as
run A's first ten, then the ten revisits. Its RSS against run A's at ten sessions is the memory
a store of 1,000 sessions costs a proxy that is not serving them.

Cache footprints (this process): 50 sessions (quick: 10) of the same size go through a
``ContextManager`` configured as the proxy's, under ``tracemalloc``; emptying each cache in turn
gives its bytes per entry, hence its size at its bound, and which caches are still filling at
the last count.

Floors: (1) plateau: RSS growth from the half-way count to the last (500 to 1,000 sessions) is
at most 5 % of the RSS at the last count; a proxy holding anything per stored session would grow
linearly there, by 500 x its per-session footprint. (2) state in the store: run B's RSS after
its ten new sessions is at most 1.10 x run A's at ten sessions (10 % allows for allocator noise
between two processes).

This module runs the section; the sessions are ``benchmarks.proxy_memory_sessions``, the runs
``benchmarks.proxy_memory_runs``, the in-process footprints ``benchmarks.proxy_memory_footprints``
and the tables and floors ``benchmarks.proxy_memory_report``.

    python -m benchmarks.proxy_memory [--quick] [--counts 10,100] [--tokens N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path

from .proxy_memory_report import floors, report
from .proxy_memory_runs import measure
from .results import Section, print_section

TITLE = "Memory"
COMMAND = "python -m benchmarks.proxy_memory"

FULL_COUNTS = (10, 100, 250, 500, 1_000)
FULL_TOKENS = 50_000
QUICK_COUNTS = (3, 10, 20)
QUICK_TOKENS = 5_000


def run(
    *,
    quick: bool,
    out_dir: Path,
    counts: Sequence[int] | None = None,
    tokens: int | None = None,
) -> Section:
    """Measure (quick: 3, 10, 20 sessions of ~5k tokens) and report; ``counts`` and ``tokens``
    override the mode's sizes."""
    counts = counts or (QUICK_COUNTS if quick else FULL_COUNTS)
    tokens = tokens or (QUICK_TOKENS if quick else FULL_TOKENS)
    footprint_sessions = 10 if quick else 50
    figures = measure(counts=counts, tokens=tokens, footprint_sessions=footprint_sessions)
    found = floors(figures, counts)
    return Section(
        title=TITLE,
        command=COMMAND,
        body=report(figures, counts),
        floors=found,
    )


def main() -> None:
    """Command line: print the section body and its floors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, ~15 s")
    parser.add_argument(
        "--counts", help="comma-separated session counts to measure at (default: the mode's)"
    )
    parser.add_argument("--tokens", type=int, help="tokens per session (default: the mode's)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")] if args.counts else None
    started = time.perf_counter()
    # This section writes no files.
    section = run(quick=args.quick, out_dir=Path("."), counts=counts, tokens=args.tokens)
    print_section(section)
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
