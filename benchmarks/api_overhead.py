"""Latency the proxy adds to one request in each API it manages: chat completions, Anthropic
Messages, OpenAI Responses, side by side in one run.

One test upstream (its own process) and one ``summarizer serve`` (its own process, a window large
enough that no compaction triggers). The same conversation of about ``tokens`` tokens (a coding
agent's tool exchanges, from ``proxy_overhead.conversation``) is written in each API's shape; at
concurrency 1 the proxy alternates with the direct path request by request
(``proxy_overhead_load.measure_sequential``), every round starting once both servers are idle.
*Added* is the proxy's latency percentile minus the direct path's at the same percentile, per API.

    python -m benchmarks.api_overhead [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
from pathlib import Path
from typing import Any

from .processes import serve_process, upstream_process, wait_until_idle
from .proxy_overhead import conversation
from .proxy_overhead_load import Cell, Target, measure_sequential
from .results import Section, markdown_table, print_section

TITLE = "Proxy overhead by API"
COMMAND = "python -m benchmarks.api_overhead"

APIS = {"chat": "/chat/completions", "messages": "/messages", "responses": "/responses"}
KEY = "sk-bench-0123456789abcdef"


def messages_body(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat completion request as an Anthropic Messages request."""
    out: list[dict[str, Any]] = []
    for message in chat["messages"][1:]:
        if message["role"] == "assistant":
            blocks = [
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": json.loads(call["function"]["arguments"]),
                }
                for call in message["tool_calls"]
            ]
            out.append({"role": "assistant", "content": blocks})
        elif message["role"] == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": message["content"],
            }
            out.append({"role": "user", "content": [result]})
        else:
            out.append({"role": "user", "content": message["content"]})
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 16,
        "system": chat["messages"][0]["content"],
    }
    body["messages"] = out
    if chat.get("stream"):
        body["stream"] = True
    return body


def responses_body(chat: dict[str, Any]) -> dict[str, Any]:
    """A chat completion request as a Responses request (the whole input, store off)."""
    items: list[dict[str, Any]] = []
    for message in chat["messages"][1:]:
        if message["role"] == "assistant":
            for call in message["tool_calls"]:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        elif message["role"] == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message["content"],
                }
            )
        else:
            items.append({"role": "user", "content": message["content"]})
    body = {
        "model": chat["model"],
        "instructions": chat["messages"][0]["content"],
        "input": items,
        "max_output_tokens": 16,
        "store": False,
    }
    if chat.get("stream"):
        body["stream"] = True
    return body


def bodies(tokens: int, stream: bool) -> dict[str, bytes]:
    """The same conversation in each API's shape, serialized once."""
    chat = conversation(tokens, stream=stream)
    shaped = {"chat": chat, "messages": messages_body(chat), "responses": responses_body(chat)}
    return {api: json.dumps(body).encode() for api, body in shaped.items()}


def run(*, quick: bool, out_dir: Path) -> Section:
    """Measure every API at one size, streamed and not (``quick``: tiny sizes and counts)."""
    del out_dir  # this section writes no files
    tokens, requests, warmup = (2_000, 8, 2) if quick else (100_000, 200, 10)
    rows: list[list[str]] = []
    with (
        upstream_process() as (upstream, upstream_proc),
        serve_process(upstream, context_window=1_000_000) as (proxy, proxy_proc),
    ):
        quiet = functools.partial(wait_until_idle, [upstream_proc.pid, proxy_proc.pid])
        for stream in (False, True):
            payloads = bodies(tokens, stream)
            for api, path in APIS.items():
                headers = {"Authorization": f"Bearer {KEY}", "x-api-key": KEY}
                targets = [
                    Target("direct", upstream + path, headers),
                    Target("summarizer", proxy + path, headers),
                ]
                cell = Cell(tokens=tokens, stream=stream, concurrency=1)
                measure_sequential(
                    targets, payloads[api], cell=cell, requests=requests, warmup=warmup, quiet=quiet
                )
                direct = sorted(cell.latencies["direct"])[len(cell.latencies["direct"]) // 2]
                rows.append(
                    [
                        api,
                        "yes" if stream else "no",
                        f"{len(payloads[api]) / 1024:,.0f}",
                        f"{direct * 1000:.2f}",
                        f"{cell.added('summarizer', 'median') * 1000:.2f}",
                        f"{cell.added('summarizer', 'p95') * 1000:.2f}",
                        f"{cell.added('summarizer', 'p99') * 1000:.2f}",
                    ]
                )
    table = markdown_table(
        ["API", "streamed", "body KiB", "direct median ms", "added median ms", "added p95 ms",
         "added p99 ms"],
        rows,
    )  # fmt: skip
    body = (
        f"One conversation of about {tokens:,} tokens (the tool exchanges of section 1) in each "
        "API's shape, sent to the test upstream directly and through `summarizer serve` (no "
        f"compaction due), {requests} requests per path after {warmup} warm-up ones, "
        "alternating request by request at concurrency 1; *added* is the proxy's percentile "
        "minus the direct path's. The Messages row includes the managed cache breakpoints the "
        "proxy writes into every request (a re-serialized body); the others go upstream as the "
        "client's bytes.\n\n" + table
    )
    return Section(title=TITLE, command=COMMAND, body=body)


def main() -> None:
    """Command line: print the section's Markdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke mode: tiny sizes")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        section = run(quick=args.quick, out_dir=Path(folder))
    print_section(section)


if __name__ == "__main__":
    main()
