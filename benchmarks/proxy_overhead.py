"""Latency and throughput the proxy adds to a chat request, next to LiteLLM's proxy.

Three paths to the same upstream, measured side by side in one run: **direct** (the test
upstream, ``context_summarizer.testing``, fixed one-word reply, no delay, in its own process);
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

This module builds the request and starts the servers; the load on each path is
``benchmarks.proxy_overhead_load``, the tables and floors ``benchmarks.proxy_overhead_report``.

    python -m benchmarks.proxy_overhead [--quick] [--litellm PATH | --skip-litellm]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from context_summarizer.loaders.tokenizers import make_counter

from .checkout import CheckoutUnavailable, checkout
from .litellm_gateway import LITELLM_SPEC, ensure_litellm, litellm_process
from .processes import (
    passthrough_process,
    relay_process,
    serve_process,
    upstream_process,
    wait_until_idle,
)
from .proxy_overhead_load import Cell, Plan, Target, measure_concurrent, measure_sequential
from .proxy_overhead_report import LAST_STOP_COMMIT, report
from .results import Section, print_section

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


def growing_session(tokens: int, requests: int, *, stream: bool = False) -> list[bytes]:
    """``requests`` bodies of one growing session: the conversation of about ``tokens`` tokens,
    then each body the previous one plus a turn (an assistant answer and a user reply), as an
    agent sends them. Serialized as a whole each time, as an SDK does."""
    body = conversation(tokens, stream=stream)
    messages = body["messages"]
    bodies = []
    for turn in range(requests):
        bodies.append(json.dumps({**body, "messages": messages}).encode())
        messages = [
            *messages,
            {"role": "assistant", "content": f"Checked handler {turn}: the total is rounded."},
            {"role": "user", "content": f"Continue with module {turn + 1}."},
        ]
    return bodies


FULL = Plan((10_000, 100_000), (1, 16, 64), 500, 640, 4, 20)
QUICK = Plan((1_000, 5_000), (1, 4), 8, 16, 2, 2)


def run_cells(plan: Plan, *, litellm: Path | None, before: str | None = None) -> list[Cell]:
    """Start the servers once and measure every cell of ``plan`` (``before``: also summarizer
    at that commit, as the path ``before``)."""
    cells: list[Cell] = []
    with ExitStack() as stack:
        upstream, upstream_server = stack.enter_context(upstream_process())
        window = max(1_000_000, max(plan.sizes) * 4)
        proxy, proxy_server = stack.enter_context(serve_process(upstream, context_window=window))
        floor, floor_server = stack.enter_context(passthrough_process(upstream))
        relay, relay_server = stack.enter_context(relay_process(upstream))
        servers = [upstream_server.pid, proxy_server.pid, floor_server.pid, relay_server.pid]
        auth = {"Authorization": "Bearer bench"}
        targets = [
            Target("direct", f"{upstream}/chat/completions", auth),
            Target("summarizer", f"{proxy}/chat/completions", auth),
            Target("floor", f"{floor}/chat/completions", auth),
            Target("relay", f"{relay}/chat/completions", auth),
        ]
        tree = None
        if before is not None:
            try:
                tree = stack.enter_context(checkout(before))
            except CheckoutUnavailable as exc:
                print(f"  proxy overhead: {before} not measured: {exc}", file=sys.stderr)
        if tree is not None:
            earlier, earlier_server = stack.enter_context(
                serve_process(upstream, context_window=window, tree=tree)
            )
            servers.append(earlier_server.pid)
            targets.append(Target("before", f"{earlier}/chat/completions", auth))
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
        largest = max(plan.sizes)
        for stream in (False, True):
            bodies = growing_session(largest, plan.sequential_requests, stream=stream)
            cell = Cell(largest, stream, 1, growing=True)
            print(
                f"  proxy overhead: growing session from {largest:,} tokens, stream={stream}",
                file=sys.stderr,
                flush=True,
            )
            measure_sequential(
                targets,
                bodies,
                cell=cell,
                requests=plan.sequential_requests,
                warmup=plan.warmup,
                quiet=functools.partial(wait_until_idle, servers),
            )
            cells.append(cell)
    return cells


def run(
    *,
    quick: bool,
    out_dir: Path,
    litellm: Path | None = None,
    skip_litellm: bool = False,
    litellm_spec: str = LITELLM_SPEC,
    before: str | None = LAST_STOP_COMMIT,
) -> Section:
    """Measure every cell (``quick``: tiny sizes and counts) and build the section; ``before``:
    a commit measured beside this code in the same run (None: none)."""
    del out_dir  # this section writes no files
    plan = QUICK if quick else FULL
    executable: Path | None = None
    if not skip_litellm:
        executable = litellm if litellm is not None else ensure_litellm(spec=litellm_spec)
    cells = run_cells(plan, litellm=executable, before=before)
    spec = None if skip_litellm else (str(litellm) if litellm is not None else litellm_spec)
    body, floors = report(cells, plan, litellm_spec=spec, before=before)
    return Section(title=TITLE, command=COMMAND, body=body, floors=floors)


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
    parser.add_argument(
        "--before",
        default=LAST_STOP_COMMIT,
        metavar="REV",
        help="section 1: also measure summarizer at this commit, in the same run (default "
        f"{LAST_STOP_COMMIT}, the last lane on uvicorn's private class; 'none' for none)",
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
            before=None if args.before == "none" else args.before,
        )
    print_section(section)


if __name__ == "__main__":
    main()
