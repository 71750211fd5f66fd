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


BEFORE_COMMIT = "1be5f49"
"""The last run of this section before the fast path (issue 16), on 2026-12-03."""
BEFORE: dict[tuple[int, bool, int], float] = {
    (10_000, False, 1): 2.09, (10_000, False, 16): 22.94, (10_000, False, 64): 115.08,
    (10_000, True, 1): 2.37, (10_000, True, 16): 20.04, (10_000, True, 64): 93.08,
    (100_000, False, 1): 3.71, (100_000, False, 16): 5.62, (100_000, False, 64): 27.83,
    (100_000, True, 1): 4.84, (100_000, True, 16): 11.75, (100_000, True, 64): 148.02,
}  # fmt: skip
"""Summarizer's added median (ms) per (tokens, stream, concurrency) in that run, the same body
sent every time; each run's absolute figures move with the host's load, so read it beside the
same run's floor and LiteLLM figures."""


def _shape(cell: Cell) -> str:
    return f"{_tokens(cell.tokens)}{' + turns' if cell.growing else ''}"


def report(
    cells: Sequence[Cell], plan: Plan, *, litellm_spec: str | None
) -> tuple[str, list[Floor]]:
    """The section's body (one table of added latency, one of throughput) and its floors."""
    has_litellm = all("litellm" in cell.latencies for cell in cells)
    latency_rows: list[list[str]] = []
    rps_rows: list[list[str]] = []
    has_floor = all("floor" in cell.latencies for cell in cells)
    for cell in cells:
        shape = [_shape(cell), "yes" if cell.stream else "no", str(cell.concurrency)]
        row = [*shape, _ms(percentile(cell.latencies["direct"], 0.5))]
        if has_floor:
            row.append(_ms(cell.added("floor", "median")))
        before = None if cell.growing else BEFORE.get((cell.tokens, cell.stream, cell.concurrency))
        row.append("" if before is None else f"{before:.2f}")
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
    if has_floor:
        header.append("floor +median ms")
    header.append(f"summarizer +median ms before ({BEFORE_COMMIT})")
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
            "compaction triggered, the fast path on); *floor*: `benchmarks.passthrough`, a proxy "
            "on the same stack (uvicorn, Starlette, httpx2) that only receives the body and "
            "forwards it, no parsing: what moving the bytes costs on this machine, the least "
            "any proxy built this way adds; "
            f"{gateway}. *before*: summarizer's added median in the last run before the fast "
            f"path (commit {BEFORE_COMMIT}, another day's load: compare it through each run's "
            "floor and LiteLLM figures). Rows *100k + turns* are a growing session: each request "
            "is the previous one plus a turn (what an agent sends, and where the fast path "
            "reads only the new bytes); the other rows send the same body every time. "
            "At concurrency 1 each proxy alternates with "
            f"direct request by request, in rounds of its own ({plan.sequential_requests} "
            f"requests per proxy after {plan.warmup} warm-up requests per path; LiteLLM keeps "
            "working for about 2 ms of CPU after each 100k-token answer, which would otherwise "
            "slow whichever request comes next), and its added latency is taken against the "
            "direct requests of its own rounds; at higher concurrency each path runs "
            "alternating bursts "
            f"({plan.concurrent_requests} requests per path over {plan.rounds} rounds). Every "
            "round and burst starts once all the servers are idle.",
            markdown_table(header, latency_rows),
            "Requests per second, each path at the same concurrency:",
            markdown_table(rps_header, rps_rows),
        ]
    )
    return body, floors(cells, has_litellm=has_litellm)


def floors(cells: Sequence[Cell], *, has_litellm: bool) -> list[Floor]:
    """Median ≤ 1 ms (issue 16; ≤ 2 ms before it) and p99 ≤ 10 ms added at concurrency 1 on the
    largest conversation, and at most 0.05× LiteLLM's added latency at every concurrency (judged
    on the median, every cell)."""
    out: list[Floor] = []
    largest = max(cell.tokens for cell in cells)
    for cell in cells:
        if cell.concurrency != 1 or cell.tokens != largest:
            continue
        mode = "streamed" if cell.stream else "not streamed"
        median = cell.added("summarizer", "median")
        p99 = cell.added("summarizer", "p99")
        session = ", growing session" if cell.growing else ""
        shape = f"concurrency 1, {_tokens(largest)} tokens{session}, {mode}"
        measured = f"{_ms(median)} ms"
        if "floor" in cell.latencies:
            measured += f" (floor {_ms(cell.added('floor', 'median'))} ms)"
        out.append(Floor(f"{shape}: median added", measured, "≤ 1 ms", median <= 0.001))
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
                    "≤ 0.05×",
                    worst <= 0.05,
                )
            )
    return out
