"""Latency and throughput the proxy adds to a chat request, next to LiteLLM's proxy.

Three paths to the same upstream, measured side by side in one run: **direct** (the test
upstream, ``summarizer.testing``, fixed one-word reply, no delay, in its own process);
through **summarizer** (``summarizer serve``, its own process, a window large enough that no
compaction triggers); through **litellm** (LiteLLM's proxy as a plain OpenAI pass-through, see
``benchmarks.litellm_gateway``). Both proxies run one worker process.

The client sends the same pre-serialized body on every path. At concurrency 1 each proxy
alternates with the direct path request by request, in rounds of its own (the proxies' rounds
alternate), and its added latency is taken against the direct requests of its own rounds. At
higher concurrency each path runs a burst of requests with that many connections in flight;
bursts alternate between paths over several rounds. Every round and burst begins once the
servers are idle (``wait_until_idle``): LiteLLM goes on working after it answers (logging and
pricing the call), which would otherwise slow whichever request came next. *Added latency* is a
path's latency percentile minus the direct path's at the same percentile and concurrency;
requests per second are completed requests over the bursts' wall time.

    python -m benchmarks.proxy_overhead [--quick] [--litellm PATH | --skip-litellm]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from summarizer.loaders.tokenizers import make_counter

from .litellm_gateway import LITELLM_SPEC, ensure_litellm, litellm_process
from .processes import free_port, running, serve_process, wait_until_idle
from .results import Floor, Section, markdown_table, percentile, print_section

TITLE = "Proxy overhead, against LiteLLM's proxy"
COMMAND = "python -m benchmarks.proxy_overhead"

MODEL = "gpt-4o-mini"
PATHS = ("direct", "summarizer", "litellm")


def conversation(tokens: int, *, stream: bool = False, variant: int = 0) -> dict[str, Any]:
    """A tool-using conversation of about ``tokens`` prompt tokens, as a request body.

    ``variant`` changes the content from the task on, for distinct conversations of one size.
    """
    counter = make_counter(MODEL)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": f"Find why the invoice totals of shop {variant} are wrong."},
    ]
    turn = 0
    while counter.count_messages(messages) < tokens:
        call_id = f"call_{variant}_{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": f"src/shop{variant}/mod_{turn}.py"}),
                        },
                    }
                ],
            }
        )
        lines = [
            f"def handler_{turn}_{i}(x):\n    return x * {i + variant} + {turn}" for i in range(60)
        ]
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "\n".join(lines)})
        turn += 1
    messages.append({"role": "user", "content": "Continue."})
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_completion_tokens": 16}
    if stream:
        body["stream"] = True
    return body


SHARES = {"median": 0.5, "p95": 0.95, "p99": 0.99}


@dataclass
class Cell:
    """Every path's latencies (seconds) and throughput for one request shape and concurrency."""

    tokens: int
    stream: bool
    concurrency: int
    latencies: dict[str, list[float]] = field(default_factory=dict)
    busy: dict[str, float] = field(default_factory=dict)
    """Wall time each path spent on its requests (for requests per second)."""
    baselines: dict[str, list[float]] = field(default_factory=dict)
    """Per proxy, the direct latencies measured in its own rounds (default: all direct ones)."""

    def added(self, path: str, stat: str) -> float:
        """``path``'s latency minus the direct path's at quantile ``stat``, in seconds."""
        share = SHARES[stat]
        direct = self.baselines.get(path, self.latencies["direct"])
        return percentile(self.latencies[path], share) - percentile(direct, share)

    def rps(self, path: str) -> float:
        """Completed requests per second of wall time on ``path``."""
        return len(self.latencies[path]) / self.busy[path]


@dataclass(frozen=True)
class Target:
    """One path: where requests go and how they authenticate."""

    name: str
    url: str
    headers: dict[str, str]


def _send(client: httpx2.Client, target: Target, payload: bytes, stream: bool) -> float:
    started = time.perf_counter()
    if stream:
        with client.stream("POST", target.url, content=payload, headers=target.headers) as reply:
            for _ in reply.iter_raw():
                pass
            reply.raise_for_status()
    else:
        client.post(target.url, content=payload, headers=target.headers).raise_for_status()
    return time.perf_counter() - started


def measure_sequential(
    targets: Sequence[Target],
    payload: bytes,
    *,
    cell: Cell,
    requests: int,
    warmup: int,
    quiet: Callable[[], None],
    rounds: int = 5,
) -> Cell:
    """Concurrency 1: each proxy against direct, interleaved request by request.

    Each proxy runs in rounds of its own, alternating with the other proxy's: a server that
    keeps working after it answers (LiteLLM logs and prices each call once it has replied) then
    slows only the requests of its own rounds, its direct ones included, not the other proxy's.
    """
    direct, proxies = targets[0], targets[1:]
    with httpx2.Client(headers={"Content-Type": "application/json"}, timeout=120) as client:
        for _ in range(warmup):
            for target in targets:
                _send(client, target, payload, cell.stream)
        cell.latencies = {target.name: [] for target in targets}
        cell.baselines = {proxy.name: [] for proxy in proxies}
        per_round = max(1, requests // rounds)
        for index in range(rounds):
            for proxy in proxies if index % 2 == 0 else proxies[::-1]:
                quiet()
                for i in range(per_round):
                    for target in (direct, proxy) if i % 2 == 0 else (proxy, direct):
                        latency = _send(client, target, payload, cell.stream)
                        cell.latencies[target.name].append(latency)
                        if target is direct:
                            cell.baselines[proxy.name].append(latency)
    for target in targets:
        cell.busy[target.name] = sum(cell.latencies[target.name])
    return cell


async def _send_async(
    client: httpx2.AsyncClient, target: Target, payload: bytes, stream: bool
) -> float:
    started = time.perf_counter()
    if stream:
        async with client.stream(
            "POST", target.url, content=payload, headers=target.headers
        ) as reply:
            async for _ in reply.aiter_raw():
                pass
            reply.raise_for_status()
    else:
        reply = await client.post(target.url, content=payload, headers=target.headers)
        reply.raise_for_status()
    return time.perf_counter() - started


async def _burst(
    client: httpx2.AsyncClient, target: Target, payload: bytes, stream: bool, *, n: int, c: int
) -> tuple[list[float], float]:
    latencies: list[float] = []
    remaining = iter(range(n))

    async def worker() -> None:
        for _ in remaining:
            latencies.append(await _send_async(client, target, payload, stream))

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(c)))
    return latencies, time.perf_counter() - started


async def _measure_concurrent(
    targets: Sequence[Target],
    payload: bytes,
    cell: Cell,
    requests: int,
    rounds: int,
    quiet: Callable[[], None],
) -> Cell:
    c = cell.concurrency
    limits = httpx2.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx2.AsyncClient(
        headers={"Content-Type": "application/json"}, timeout=300, limits=limits
    ) as client:
        for target in targets:  # warm-up: open every connection once
            await _burst(client, target, payload, cell.stream, n=2 * c, c=c)
        for target in targets:
            cell.latencies[target.name] = []
            cell.busy[target.name] = 0.0
        per_round = max(c, requests // rounds)
        for index in range(rounds):
            order = list(targets) if index % 2 == 0 else list(reversed(targets))
            for target in order:
                quiet()
                latencies, wall = await _burst(
                    client, target, payload, cell.stream, n=per_round, c=c
                )
                cell.latencies[target.name] += latencies
                cell.busy[target.name] += wall
    return cell


def measure_concurrent(
    targets: Sequence[Target],
    payload: bytes,
    *,
    cell: Cell,
    requests: int,
    rounds: int,
    quiet: Callable[[], None],
) -> Cell:
    """Concurrency > 1: alternating bursts of ``requests // rounds`` requests per path, each
    begun once ``quiet()`` returns (the servers idle)."""
    return asyncio.run(_measure_concurrent(targets, payload, cell, requests, rounds, quiet))


@dataclass(frozen=True)
class Plan:
    """What to measure: sizes, concurrencies and how many requests per cell."""

    sizes: tuple[int, ...]
    concurrencies: tuple[int, ...]
    sequential_requests: int
    concurrent_requests: int
    rounds: int
    warmup: int


FULL = Plan((10_000, 100_000), (1, 16, 64), 500, 640, 4, 20)
QUICK = Plan((1_000, 5_000), (1, 4), 8, 16, 2, 2)


@contextmanager
def upstream_process() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The test upstream (``benchmarks.upstream``) in its own process; yields its ``/v1`` URL
    and the process."""
    port = free_port()
    command = [sys.executable, "-m", "benchmarks.upstream", "--port", str(port)]
    base = f"http://127.0.0.1:{port}/v1"
    with running(command, ready_url=f"{base}/models", name="test upstream") as process:
        yield base, process


def run_cells(plan: Plan, *, litellm: Path | None) -> list[Cell]:
    """Start the three servers once and measure every cell of ``plan``."""
    cells: list[Cell] = []
    with ExitStack() as stack:
        upstream, upstream_server = stack.enter_context(upstream_process())
        window = max(1_000_000, max(plan.sizes) * 4)
        proxy, proxy_server = stack.enter_context(serve_process(upstream, context_window=window))
        servers = [upstream_server.pid, proxy_server.pid]
        auth = {"Authorization": "Bearer bench"}
        targets = [
            Target("direct", f"{upstream}/chat/completions", auth),
            Target("summarizer", f"{proxy}/chat/completions", auth),
        ]
        if litellm is not None:
            gateway, key, gateway_server = stack.enter_context(
                litellm_process(litellm, upstream, MODEL)
            )
            servers.append(gateway_server.pid)
            targets.append(
                Target("litellm", f"{gateway}/chat/completions", {"Authorization": f"Bearer {key}"})
            )
        for tokens, stream in itertools.product(plan.sizes, (False, True)):
            payload = json.dumps(conversation(tokens, stream=stream)).encode()
            for concurrency in plan.concurrencies:
                cell = Cell(tokens, stream, concurrency)
                quiet = functools.partial(wait_until_idle, servers)
                print(
                    f"  proxy overhead: {tokens:,} tokens, stream={stream}, "
                    f"concurrency {concurrency}",
                    file=sys.stderr,
                    flush=True,
                )
                if concurrency == 1:
                    measure_sequential(
                        targets,
                        payload,
                        cell=cell,
                        requests=plan.sequential_requests,
                        warmup=plan.warmup,
                        quiet=quiet,
                    )
                else:
                    measure_concurrent(
                        targets,
                        payload,
                        cell=cell,
                        requests=plan.concurrent_requests,
                        rounds=plan.rounds,
                        quiet=quiet,
                    )
                cells.append(cell)
    return cells


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _ratio(mine: float, theirs: float) -> str:
    if theirs <= 0:
        return "n/a"
    return f"{mine / theirs:.2f}×"


def _tokens(tokens: int) -> str:
    return f"{tokens // 1000}k"


def report(cells: Sequence[Cell], plan: Plan, *, litellm_spec: str | None) -> Section:
    """The section: one table of added latency and one of throughput, and the floors."""
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
    return Section(
        title=TITLE,
        command=COMMAND,
        body=body,
        floors=floors(cells, has_litellm=has_litellm),
    )


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


def run(
    *,
    quick: bool,
    out_dir: Path,
    litellm: Path | None = None,
    skip_litellm: bool = False,
    litellm_spec: str = LITELLM_SPEC,
) -> Section:
    """Measure every cell (``quick``: tiny sizes and counts) and build the section."""
    del out_dir  # this section writes no files
    plan = QUICK if quick else FULL
    executable: Path | None = None
    if not skip_litellm:
        executable = litellm if litellm is not None else ensure_litellm(spec=litellm_spec)
    cells = run_cells(plan, litellm=executable)
    spec = None if skip_litellm else (str(litellm) if litellm is not None else litellm_spec)
    return report(cells, plan, litellm_spec=spec)


def add_litellm_arguments(parser: argparse.ArgumentParser) -> None:
    """The LiteLLM options, shared with ``python -m benchmarks``."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--litellm", type=Path, help="an existing litellm executable to compare")
    group.add_argument("--skip-litellm", action="store_true", help="measure without LiteLLM")
    parser.add_argument(
        "--litellm-spec",
        default=LITELLM_SPEC,
        help=f"what to pip install into benchmarks/.litellm-venv (default {LITELLM_SPEC})",
    )


def main() -> None:
    """Command line: print the section's Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: tiny sizes")
    add_litellm_arguments(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        section = run(
            quick=args.quick,
            out_dir=Path(folder),
            litellm=args.litellm,
            skip_litellm=args.skip_litellm,
            litellm_spec=args.litellm_spec,
        )
    print_section(section)


if __name__ == "__main__":
    main()
