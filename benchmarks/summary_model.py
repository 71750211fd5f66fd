"""A cheaper summary model and the provider's prompt cache: the demo session through the proxy
with the agent's own model writing the summaries, then another one.

Method. ``summarizer demo``'s scripted coding session (``CodingSession``, seed 7) runs through
the proxy against the test upstream, whose prompt cache is automatic, exact and per model (it
serves the longest prefix of messages an earlier request *of the same model* and tools sent),
once with the summaries written by the agent's model and once per cheaper ``summary_model``.
The summary request is the live conversation plus one instruction: with the agent's model, the
agent's last request cached nearly all of it; with another model, nothing of it is cached.

Costs are the shipped prices (``context_summarizer/evaluation/prices.json``) applied to the
tokens the upstream reported: the agent's prompt tokens (cached or not) at the agent's model's
prices, the summary requests' at the summary model's, and each summary's own tokens (counted
with ``o200k_base``) at the summary model's output price. The agent's output is the same in
every run and left out.

    python -m benchmarks.summary_model [--quick]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from context_summarizer.cli.demo import run_coding_session
from context_summarizer.evaluation.pricing import Price, default_prices
from context_summarizer.loaders.tokenizers import load_encoding

from .results import Section, markdown_table, print_section

TITLE = "A cheaper summary model and the prompt cache"
COMMAND = "python -m benchmarks.summary_model"
WINDOW = 16_000
AGENT = "gpt-4.1"
SUMMARY_MODELS = ("gpt-4.1-mini", "gpt-4.1-nano")
PER_TOKENS = 1_000_000


def one(summary_model: str | None, turns: int) -> dict[str, Any]:
    """One session's figures, ``summary_model`` None: the agent's own model summarizes."""
    started = time.perf_counter()
    stats = run_coding_session(
        turns=turns, context_window=WINDOW, model=AGENT, summary_model=summary_model
    )
    encoding = load_encoding("o200k_base")
    planted = len(stats.planted_kept) + len(stats.planted_lost)
    summary_prompt = sum(e.summary_prompt_tokens or 0 for e in stats.events)
    summary_cached = sum(e.summary_cached_tokens or 0 for e in stats.events)
    return {
        "summary_model": summary_model or AGENT,
        "compactions": stats.compactions,
        "agent_prompt": stats.prompt_tokens - summary_prompt,
        "agent_cached": stats.cached_tokens - summary_cached,
        "summary_prompt": summary_prompt,
        "summary_cached": summary_cached,
        "summary_output": sum(len(encoding.encode_ordinary(e.summary)) for e in stats.events),
        "planted_kept": f"{len(stats.planted_kept)}/{planted}",
        "seconds": time.perf_counter() - started,
    }


def costs(row: Mapping[str, Any], prices: Mapping[str, Price]) -> tuple[float, float, float]:
    """The agent's prompt, the summary requests' prompt and the summaries' output, in USD."""
    agent, summary = prices[AGENT], prices[row["summary_model"]]

    def prompt(price: Price, tokens: int, cached: int) -> float:
        return ((tokens - cached) * price.input + cached * price.cached_input) / PER_TOKENS

    return (
        prompt(agent, row["agent_prompt"], row["agent_cached"]),
        prompt(summary, row["summary_prompt"], row["summary_cached"]),
        row["summary_output"] * summary.output / PER_TOKENS,
    )


def table(rows: Sequence[Mapping[str, Any]], prices: Mapping[str, Price]) -> str:
    """The figures as a Markdown table."""
    body = []
    for row in rows:
        agent, summary_in, summary_out = costs(row, prices)
        cached = row["summary_cached"] / row["summary_prompt"] if row["summary_prompt"] else 0.0
        body.append(
            [
                row["summary_model"],
                str(row["compactions"]),
                f"{row['summary_prompt']:,}",
                f"{cached:.1%}",
                f"${summary_in + summary_out:.4f}",
                f"${agent:.4f}",
                f"${agent + summary_in + summary_out:.4f}",
                row["planted_kept"],
            ]
        )
    header = [
        "summaries by",
        "compactions",
        "summary prompt tokens",
        "of them cached",
        "summaries cost",
        "agent prompt cost",
        "total",
        "planted facts kept",
    ]
    return markdown_table(header, body, align="lrrrrrrr")


def notes(rows: Sequence[Mapping[str, Any]], prices: Mapping[str, Price]) -> str:
    """What the table says, from its own figures."""
    base = rows[0]
    base_cost = sum(costs(base, prices)[1:])
    parts = []
    for row in rows[1:]:
        cost = sum(costs(row, prices)[1:])
        change = cost / base_cost - 1 if base_cost else 0.0
        parts.append(f"{row['summary_model']}, {change:+.0%}")
    return (
        f"Against {base['summary_model']} writing its own summaries, the summaries cost: "
        + "; ".join(parts)
        + ". A cheaper model is cheaper per token, but none of its summary prompt is cached "
        "(the cache is per model), while the agent's model reads almost all of its own from "
        "the cache the agent's requests built; whether it saves money depends on how much "
        "cheaper its uncached input is than the agent's cached input. The summaries are also "
        "written by a model that did not do the work."
    )


def run(*, quick: bool, out_dir: Path) -> Section:
    """The session with each summary model."""
    del out_dir
    turns = 20 if quick else 120
    prices = default_prices()
    rows = [one(None, turns), *(one(model, turns) for model in SUMMARY_MODELS)]
    body = (
        f"Method. `summarizer demo`'s scripted coding session ({turns} turns, seed 7) through "
        f"the proxy in a {WINDOW:,}-token window against the test upstream (its prompt cache "
        "is automatic, exact and per model), the agent on "
        f"`{AGENT}`, its summaries written by `{AGENT}` itself, then by each cheaper "
        "`summary_model`. Costs: the shipped prices on the tokens the upstream reported "
        "(prompt tokens cached or not; each summary's own tokens as output; the agent's "
        "output, the same in every run, left out).\n\n"
        + table(rows, prices)
        + "\n\n"
        + notes(rows, prices)
    )
    return Section(TITLE, COMMAND, body)


def main() -> None:
    """``python -m benchmarks.summary_model``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode (20 turns)")
    args = parser.parse_args()
    print_section(run(quick=args.quick, out_dir=Path(".")))


if __name__ == "__main__":
    main()
