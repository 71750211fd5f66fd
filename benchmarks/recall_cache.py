"""Recall and the provider's prompt cache: the demo session through the proxy, recall off,
offered but never called, and called.

Method. ``summarizer demo``'s scripted coding session (``CodingSession``, seed 7) runs through
the proxy against the test upstream, whose prompt cache is automatic and exact (it serves the
longest prefix of messages an earlier request of the same model and tools sent), once per API
(chat completions, Messages, Responses) and recall setting:

- **off**: ``recall = false``, the requests as before recall existed;
- **offered**: recall on, the model never calls it (what every session pays for the tool
  being there: its definition from the first compaction on, and the span list in each summary);
- **called**: recall on, and every ``EVERY``-th agent request the model calls recall alone
  first (a text query on the task's notes), the proxy answers it and asks again.

The cached share is the upstream's reported cached prompt tokens over all prompt tokens of the
session (agent requests, recall rounds and summary requests).

    python -m benchmarks.recall_cache [--quick]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from context_summarizer.cli.demo import run_coding_session
from context_summarizer.core.recall_tool import declared_tool_names
from context_summarizer.testing import Reply, Responder, ToolCallSpec, is_summary_request

from .results import Section, markdown_table, print_section

TITLE = "Recall and the prompt cache"
COMMAND = "python -m benchmarks.recall_cache"
EVERY = 6
"""The model calls recall on one agent request in this many (once recall is offered)."""
WINDOW = 16_000
APIS: tuple[Literal["chat", "messages", "responses"], ...] = ("chat", "messages", "responses")


class CallsRecall:
    """The scripted model, calling recall alone on every ``every``-th request it is offered the
    tool on (answered by the proxy, which then asks again: that request goes to ``inner``)."""

    def __init__(self, inner: Responder, every: int) -> None:
        self.inner = inner
        self.every = every
        self.offered = 0
        self.calls = 0

    def __call__(self, body: dict[str, Any]) -> Reply:
        if is_summary_request(body) or "recall" not in declared_tool_names(body.get("tools")):
            return self.inner(body)
        self.offered += 1
        if self.offered % self.every:
            return self.inner(body)
        self.calls += 1
        arguments = json.dumps({"query": "NOTE:"})
        return Reply(
            tool_calls=[
                ToolCallSpec(id=f"call_recall_{self.calls}", name="recall", arguments=arguments)
            ]
        )


def one(api: Literal["chat", "messages", "responses"], mode: str, turns: int) -> dict[str, Any]:
    """One session's figures."""
    callers: list[CallsRecall] = []

    def model_calls(inner: Responder) -> Responder:
        caller = CallsRecall(inner, EVERY)
        callers.append(caller)
        return caller

    started = time.perf_counter()
    stats = run_coding_session(
        turns=turns,
        context_window=WINDOW,
        api=api,
        recall=mode != "off",
        model_calls=model_calls if mode == "called" else None,
    )
    return {
        "api": api,
        "mode": mode,
        "compactions": stats.compactions,
        "agent_requests": stats.agent_requests,
        "recall_calls": sum(c.calls for c in callers),
        "prompt_tokens": stats.prompt_tokens,
        "cached_tokens": stats.cached_tokens,
        "planted_kept": f"{len(stats.planted_kept)}/{len(session_facts(stats))}",
        "seconds": time.perf_counter() - started,
    }


def session_facts(stats: Any) -> list[str]:
    """Every fact the session planted (kept or lost)."""
    return [*stats.planted_kept, *stats.planted_lost]


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The figures as a Markdown table."""
    body = []
    for row in rows:
        share = row["cached_tokens"] / row["prompt_tokens"] if row["prompt_tokens"] else 0.0
        body.append(
            [
                row["api"],
                row["mode"],
                str(row["compactions"]),
                str(row["agent_requests"]),
                str(row["recall_calls"]),
                f"{row['prompt_tokens']:,}",
                f"{share:.1%}",
                row["planted_kept"],
            ]
        )
    header = [
        "API",
        "recall",
        "compactions",
        "requests to the model",
        "recall calls",
        "prompt tokens",
        "cached share",
        "planted facts kept",
    ]
    return markdown_table(header, body, align="llrrrrrr")


def run(*, quick: bool, out_dir: Path) -> Section:
    """Every API under each recall setting."""
    del out_dir
    turns = 20 if quick else 120
    apis = APIS[:1] if quick else APIS
    rows = [one(api, mode, turns) for api in apis for mode in ("off", "offered", "called")]
    body = (
        f"Method. `summarizer demo`'s scripted coding session ({turns} turns, seed 7) through "
        f"the proxy in a {WINDOW:,}-token window against the test upstream (its prompt cache "
        "is automatic and exact: the longest prefix of messages an earlier request with the "
        "same model and tools sent), per API: recall off; offered, never called; called alone "
        f"on one agent request in {EVERY} once offered (a text query, answered by the proxy, "
        "which asks again). The cached share is the upstream's cached prompt tokens over all "
        "prompt tokens (agent requests, recall rounds, summary requests).\n\n"
        + table(rows)
        + "\n\n"
        + notes(rows)
    )
    return Section(TITLE, COMMAND, body)


def notes(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the table says, from its own figures: what being offered costs, per API, and what
    the rounds do to the cached share."""
    by = {(row["api"], row["mode"]): row for row in rows}

    def share(row: Mapping[str, Any]) -> float:
        return float(row["cached_tokens"]) / row["prompt_tokens"] if row["prompt_tokens"] else 0.0

    parts = []
    for api in dict.fromkeys(row["api"] for row in rows):
        off, offered, called = by[(api, "off")], by[(api, "offered")], by[(api, "called")]
        tokens = offered["prompt_tokens"] / off["prompt_tokens"] - 1 if off["prompt_tokens"] else 0
        parts.append(
            f"{api}: offered, {100 * (share(offered) - share(off)):+.1f} points of cached share "
            f"and {tokens:+.1%} prompt tokens ({offered['compactions'] - off['compactions']:+d} "
            f"compactions); called, {100 * (share(called) - share(off)):+.1f} points"
        )
    return (
        "Against recall off: " + "; ".join(parts) + ". Being offered costs the tool's "
        "definition on every request from the first compaction on and a span list in each "
        "summary, which in this small window also brings compactions a little sooner; the "
        "summary requests offer the tool too, so they keep the live requests' cached prefix. "
        "A recall round extends the request before it (the model's call and the result "
        "appended), so it is read almost whole from the cache."
    )


def main() -> None:
    """``python -m benchmarks.recall_cache``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke mode (20 turns, chat completions only)"
    )
    args = parser.parse_args()
    print_section(run(quick=args.quick, out_dir=Path(".")))


if __name__ == "__main__":
    main()
