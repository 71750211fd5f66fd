"""What compaction costs with provider caches: recorded sessions replayed, every request priced.

Method. Each session (the 20 cases of ``datasets/coding-sessions.jsonl``, and long scripted
``CodingSession`` runs) is replayed as the agent lived it, under each compaction strategy
(``benchmarks.cache_replay``: production's self-summary, a from-scratch summarizer, observation
masking rolling and stepped, no compaction): at each assistant message the agent sends what the
strategy keeps of the messages before it, and that message is the reply (its output tokens);
summary requests go in between. Every request is then priced under two cache models
(``benchmarks.cache_accounting``, with ``context_summarizer.evaluation.pricing``'s ``request_cost``
and shipped prices):

- **OpenAI** (``gpt-5``, automatic): a request reads from the cache the longest leading run of
  messages (tools and system prompt included) that an earlier request of the session already
  sent byte for byte, found over message digest chains with the test upstream's ``PrefixCache``;
  ``request_cost`` applies the 1,024-token minimum and the 128-token steps. Writes cost nothing.
- **Anthropic** (``claude-sonnet-4``, explicit): only prefixes that ended at an earlier request's
  *breakpoint* are in the cache (breakpoints: the end of every agent request, right after the
  summary message of a compacted context, the end of a self-summary request; none on a
  from-scratch request, which nothing ever reads back, so a breakpoint would only turn its input
  into 1.25x writes). A request reads the longest such prefix that it starts with and that
  lies within 20 content blocks before one of its own breakpoints (Anthropic's lookback; a
  block here is a message's text, each tool call, each tool result). The rest of a request with
  a breakpoint is written at 1.25x; one without breakpoints is plain input.

Assumptions: caches never expire or miss within a session (agent turns come seconds apart);
matching is message-granular (two different messages sharing leading text earn nothing);
``tool_choice: "none"`` on the self-summary request does not change the cached prefix (the
project's own test upstream assumes the same); every token is counted with o200k_base, Claude's
too. *Billed input-equivalent tokens* are a session's cost in dollars divided by the model's
price of one uncached input token: a cached read counts 0.1, an Anthropic write 1.25, an output
token 8 (gpt-5) or 5 (claude-sonnet-4). The *lower bound* is the raw session sent append-only
with perfect caching (each request reads everything the previous one sent, no minimum, no steps;
the new tokens are plain input, or writes at Anthropic): the cheapest way to keep the whole
history, computed whatever the window.

    python -m benchmarks.cache_cost [--quick] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from .cache_cost_measure import cache_models, measure
from .cache_cost_report import floors, report, to_json
from .cache_replay_session import coding_session, dataset_sessions
from .results import Section, print_section

TITLE = "What compaction costs with provider caches"
COMMAND = "python -m benchmarks.cache_cost"

DATASET = Path(__file__).resolve().parent.parent / "datasets" / "coding-sessions.jsonl"
"""The shipped evaluation dataset (20 cases)."""
DATASET_WINDOW = 16_000
"""The dataset's cases hold 20k-50k tokens: in 16k they compact several times each."""
LONG_WINDOW = 128_000
"""The window the long sessions are replayed in."""
LONG_SESSIONS = ((250, 7), (330, 11), (400, 13))
"""(turns, seed) of the long ``CodingSession`` runs: about 305k, 395k and 485k raw tokens."""
QUICK_LONG_SESSIONS = ((120, 7),)
"""Quick mode's one small long session (about 150k tokens: two compactions in 128k)."""
QUICK_DATASET_CASES = 2
"""Quick mode replays the first cases of the dataset only."""
RESULTS_FILE = "cache-cost.json"
"""Every session's figures, written into ``out_dir``."""


def run(*, quick: bool, out_dir: Path) -> Section:
    """Replay both corpora and price them (quick: 2 dataset cases and one small long session)."""
    dataset = dataset_sessions(DATASET, limit=QUICK_DATASET_CASES if quick else None)
    plans = QUICK_LONG_SESSIONS if quick else LONG_SESSIONS
    long = [coding_session(turns, seed) for turns, seed in plans]
    corpora = [
        measure("Dataset cases", dataset, DATASET_WINDOW),
        measure("Long scripted sessions", long, LONG_WINDOW),
    ]
    models = cache_models()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULTS_FILE).write_text(json.dumps(to_json(corpora), separators=(",", ":")) + "\n")
    return Section(
        title=TITLE,
        command=COMMAND,
        body=report(corpora, models, docstring=__doc__),
        floors=floors(corpora, models),
        files=[RESULTS_FILE],
    )


def main() -> None:
    """Command line: print the section body and its floors."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 dataset cases, 1 small session")
    parser.add_argument("--out-dir", type=Path, default=None, help=f"where {RESULTS_FILE} goes")
    args = parser.parse_args()
    started = time.perf_counter()
    out_dir = args.out_dir or Path(tempfile.mkdtemp(prefix="bench-cache-"))
    section = run(quick=args.quick, out_dir=out_dir)
    print_section(section)
    print(f"\nper-session figures: {out_dir / RESULTS_FILE}")
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
