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


FAST_PATH_COMMIT = "1be5f49"
"""The last run of this section before the fast path (issue 16), on 2026-12-03."""
BEFORE_FAST_PATH: dict[tuple[int, bool, int, bool], float] = {
    (10_000, False, 1, False): 2.09, (10_000, False, 16, False): 22.94,
    (10_000, False, 64, False): 115.08, (10_000, True, 1, False): 2.37,
    (10_000, True, 16, False): 20.04, (10_000, True, 64, False): 93.08,
    (100_000, False, 1, False): 3.71, (100_000, False, 16, False): 5.62,
    (100_000, False, 64, False): 27.83, (100_000, True, 1, False): 4.84,
    (100_000, True, 16, False): 11.75, (100_000, True, 64, False): 148.02,
}  # fmt: skip
LANE_COMMIT = "05256cb"
"""The last run of this section before the lane (issue 16), on 2026-12-04."""
BEFORE_LANE: dict[tuple[int, bool, int, bool], float] = {
    (10_000, False, 1, False): 2.14, (10_000, False, 16, False): 33.87,
    (10_000, False, 64, False): 183.70, (10_000, True, 1, False): 2.76,
    (10_000, True, 16, False): 36.97, (10_000, True, 64, False): 173.64,
    (100_000, False, 1, False): 4.61, (100_000, False, 16, False): -5.49,
    (100_000, False, 64, False): -42.55, (100_000, True, 1, False): 5.46,
    (100_000, True, 16, False): -6.52, (100_000, True, 64, False): -43.34,
    (100_000, False, 1, True): 6.84, (100_000, True, 1, True): 7.23,
}  # fmt: skip
LAST_STOP_COMMIT = "e22dd62"
"""The last run with the lane on uvicorn's private protocol class (issue 28 rebuilt it as an
ASGI callable), on 2026-12-04."""
AT_LAST_STOP: dict[tuple[int, bool, int, bool], float] = {
    (10_000, False, 1, False): 0.46, (10_000, False, 16, False): 2.87,
    (10_000, False, 64, False): 22.56, (10_000, True, 1, False): 0.58,
    (10_000, True, 16, False): 3.60, (10_000, True, 64, False): 23.34,
    (100_000, False, 1, False): 0.68, (100_000, False, 16, False): 10.68,
    (100_000, False, 64, False): 5.98, (100_000, True, 1, False): 0.66,
    (100_000, True, 16, False): 8.74, (100_000, True, 64, False): 86.00,
    (100_000, False, 1, True): 0.92, (100_000, True, 1, True): 0.83,
}  # fmt: skip
EARLIER = (
    (f"before the fast path ({FAST_PATH_COMMIT})", BEFORE_FAST_PATH),
    (f"before the lane ({LANE_COMMIT})", BEFORE_LANE),
    (f"the lane on uvicorn's private class ({LAST_STOP_COMMIT})", AT_LAST_STOP),
)
"""Summarizer's added median (ms) per (tokens, stream, concurrency, growing session) in the
earlier runs, each named; each run's absolute figures move with the host's load, so read them
beside the same run's floors and LiteLLM figures."""


def _shape(cell: Cell) -> str:
    return f"{_tokens(cell.tokens)}{' + turns' if cell.growing else ''}"


def report(
    cells: Sequence[Cell], plan: Plan, *, litellm_spec: str | None, before: str | None = None
) -> tuple[str, list[Floor]]:
    """The section's body (one table of added latency, one of throughput) and its floors;
    ``before``: the commit measured as the path ``before`` in this run, if any."""
    has_litellm = all("litellm" in cell.latencies for cell in cells)
    has_before = before is not None and all("before" in cell.latencies for cell in cells)
    latency_rows: list[list[str]] = []
    rps_rows: list[list[str]] = []
    has_floor = all("floor" in cell.latencies for cell in cells)
    has_relay = all("relay" in cell.latencies for cell in cells)
    for cell in cells:
        shape = [_shape(cell), "yes" if cell.stream else "no", str(cell.concurrency)]
        row = [*shape, _ms(percentile(cell.latencies["direct"], 0.5))]
        if has_relay:
            row.append(_ms(cell.added("relay", "median")))
        if has_floor:
            row.append(_ms(cell.added("floor", "median")))
        key = (cell.tokens, cell.stream, cell.concurrency, cell.growing)
        for _, figures in EARLIER:
            earlier = figures.get(key)
            row.append("" if earlier is None else f"{earlier:.2f}")
        if has_before:
            row.append(_ms(cell.added("before", "median")))
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
    if has_relay:
        header.append("relay +median ms")
    if has_floor:
        header.append("stack floor +median ms")
    header += [f"summarizer +median ms {name}" for name, _ in EARLIER]
    if has_before:
        header.append(f"summarizer +median ms at {before}, this run")
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
            "compaction triggered, the fast path and the lane on); *relay*: `benchmarks.relay`, "
            "a TCP relay that writes each connection's bytes to the other side as they arrive, "
            "no HTTP: what one more hop on loopback through a Python process costs on this "
            "machine, the least any proxy can add; *stack floor*: `benchmarks.passthrough`, a "
            "proxy on uvicorn, Starlette and httpx2 that reads the body, then forwards it, no "
            "parsing: the least a proxy built that way adds; "
            f"{gateway}. *before* and *the lane on uvicorn's private class*: summarizer's added "
            f"median in the last runs before the fast path (commit {FAST_PATH_COMMIT}), before "
            f"the lane (commit {LANE_COMMIT}) and the last with the lane subclassing uvicorn's "
            f"protocol (commit {LAST_STOP_COMMIT}; the lane is a plain ASGI callable since, on the "
            "proxy's own HTTP server), "
            "other runs' load: compare them through each run's floors and LiteLLM figures. "
            + (
                f"*At {before}, this run*: summarizer at commit {before}, from its own source "
                "tree, measured in this run as one more path (its own rounds and bursts), so its "
                "figures and this code's share the host's load. "
                if has_before
                else ""
            )
            + "Rows *100k + turns* are a growing session: each request is the previous one plus "
            "a turn (what an agent sends, and what the lane streams upstream as it arrives); "
            "the other rows send the same body every time. "
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
    return body, floors(cells, has_litellm=has_litellm, before=before if has_before else None)


def floors(cells: Sequence[Cell], *, has_litellm: bool, before: str | None = None) -> list[Floor]:
    """Median ≤ 1 ms (issue 16; ≤ 2 ms before it) and p99 ≤ 10 ms added at concurrency 1 on the
    largest conversation, and at most 0.05× LiteLLM's added latency at every concurrency (judged
    on the median, every cell). The median's figure names the relay's, and ``before``'s
    measured in the same run."""
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
        beside = []
        if "relay" in cell.latencies:
            beside.append(f"relay {_ms(cell.added('relay', 'median'))} ms")
        if before is not None:
            beside.append(f"{before} {_ms(cell.added('before', 'median'))} ms")
        if beside:
            measured += f" ({'; '.join(beside)})"
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
