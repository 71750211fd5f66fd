"""The proxy-overhead section's tables and floors, from the measured cells."""

from __future__ import annotations

from collections.abc import Sequence

from .proxy_overhead_load import SHARES, Cell, Plan
from .results import Floor, markdown_table, percentile


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _ratio(mine: float, theirs: float) -> str:
    if theirs <= 0:
        return "n/a"
    return f"{mine / theirs:.2f}×"


def _tokens(tokens: int) -> str:
    return f"{tokens // 1000}k"


def report(
    cells: Sequence[Cell], plan: Plan, *, litellm_spec: str | None
) -> tuple[str, list[Floor]]:
    """The section's body (one table of added latency, one of throughput) and its floors."""
    has_litellm = all("litellm" in cell.latencies for cell in cells)
    latency_rows: list[list[str]] = []
    rps_rows: list[list[str]] = []
    for cell in cells:
        shape = [_tokens(cell.tokens), "yes" if cell.stream else "no", str(cell.concurrency)]
        row = [*shape, _ms(percentile(cell.latencies["direct"], 0.5))]
        for stat in SHARES:
            row.append(_ms(cell.added("summarizer", stat)))
            if has_litellm:
                row += [
                    _ms(cell.added("litellm", stat)),
                    _ratio(cell.added("summarizer", stat), cell.added("litellm", stat)),
                ]
        latency_rows.append(row)
        rps = [*shape, f"{cell.rps('direct'):.0f}", f"{cell.rps('summarizer'):.0f}"]
        if has_litellm:
            rps += [
                f"{cell.rps('litellm'):.0f}",
                _ratio(cell.rps("summarizer"), cell.rps("litellm")),
            ]
        rps_rows.append(rps)
    header = ["tokens", "stream", "concurrency", "direct median ms"]
    for stat in SHARES:
        header.append(f"summarizer +{stat} ms")
        if has_litellm:
            header += [f"litellm +{stat} ms", f"{stat} ratio"]
    rps_header = ["tokens", "stream", "concurrency", "direct rps", "summarizer rps"]
    if has_litellm:
        rps_header += ["litellm rps", "summarizer / litellm"]
    gateway = (
        f"LiteLLM's proxy (`{litellm_spec}`, one uvicorn worker, master key, no database)"
        if has_litellm
        else "LiteLLM was skipped in this run (`--skip-litellm`)"
    )
    body = "\n\n".join(
        [
            "Added latency = a path's latency percentile minus the direct path's at the same "
            "percentile and concurrency, in milliseconds; *ratio* = summarizer's added latency "
            "over LiteLLM's (below 1 is better). Paths: direct to the test upstream (its own "
            "process, fixed one-word reply, no delay); `summarizer serve` (its own process, no "
            f"compaction triggered); {gateway}. At concurrency 1 each proxy alternates with "
            f"direct request by request, in rounds of its own ({plan.sequential_requests} "
            f"requests per proxy after {plan.warmup} warm-up requests per path; LiteLLM keeps "
            "working for about 2 ms of CPU after each 100k-token answer, which would otherwise "
            "slow whichever request comes next), and its added latency is taken against the "
            "direct requests of its own rounds; at higher concurrency each path runs "
            "alternating bursts "
            f"({plan.concurrent_requests} requests per path over {plan.rounds} rounds). Every "
            "round and burst starts once all three servers are idle.",
            markdown_table(header, latency_rows),
            "Requests per second, each path at the same concurrency:",
            markdown_table(rps_header, rps_rows),
        ]
    )
    return body, floors(cells, has_litellm=has_litellm)


def floors(cells: Sequence[Cell], *, has_litellm: bool) -> list[Floor]:
    """Median ≤ 2 ms and p99 ≤ 10 ms added at concurrency 1 on the largest conversation, and
    less added latency than LiteLLM at every concurrency (judged on the median, every cell)."""
    out: list[Floor] = []
    largest = max(cell.tokens for cell in cells)
    for cell in cells:
        if cell.concurrency != 1 or cell.tokens != largest:
            continue
        mode = "streamed" if cell.stream else "not streamed"
        median = cell.added("summarizer", "median")
        p99 = cell.added("summarizer", "p99")
        shape = f"concurrency 1, {_tokens(largest)} tokens, {mode}"
        out.append(Floor(f"{shape}: median added", f"{_ms(median)} ms", "≤ 2 ms", median <= 0.002))
        out.append(Floor(f"{shape}: p99 added", f"{_ms(p99)} ms", "≤ 10 ms", p99 <= 0.010))
    if has_litellm:
        for concurrency in sorted({cell.concurrency for cell in cells}):
            group = [cell for cell in cells if cell.concurrency == concurrency]
            ratios = [
                cell.added("summarizer", "median") / cell.added("litellm", "median")
                for cell in group
                if cell.added("litellm", "median") > 0
            ]
            worst = max(ratios) if len(ratios) == len(group) else float("inf")
            out.append(
                Floor(
                    f"concurrency {concurrency}: median added latency vs LiteLLM "
                    f"(worst of {len(group)} request shapes)",
                    f"{worst:.2f}×",
                    "< 1×",
                    worst < 1,
                )
            )
    return out
