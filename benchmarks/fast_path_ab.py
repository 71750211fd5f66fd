"""The fast path's own gain: one growing session (each request the previous one plus a turn)
sent to the test upstream directly, to ``summarizer serve`` and to ``summarizer serve
--no-fast-path``, interleaved request by request at concurrency 1; the added median of each
proxy over the direct path, in the same run. Not a section of ``RESULTS.md``: a check to rerun
when the request path changes.

    python -m benchmarks.fast_path_ab [--requests 150]
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import ExitStack

import httpx2

from .processes import serve_process, upstream_process, wait_until_idle
from .proxy_overhead import growing_session

WARMUP = 10


def main() -> None:
    """Command line: print each proxy's added median."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--tokens", type=int, default=100_000)
    args = parser.parse_args()
    with ExitStack() as stack:
        direct, direct_proc = stack.enter_context(upstream_process())
        on, on_proc = stack.enter_context(serve_process(direct, context_window=1_000_000))
        off, off_proc = stack.enter_context(
            serve_process(direct, context_window=1_000_000, extra=["--no-fast-path"])
        )
        pids = [direct_proc.pid, on_proc.pid, off_proc.pid]
        bodies = growing_session(args.tokens, args.requests + WARMUP)
        paths = {"direct": direct, "fast path": on, "--no-fast-path": off}
        latencies: dict[str, list[float]] = {name: [] for name in paths}
        headers = {"Content-Type": "application/json", "Authorization": "Bearer bench"}
        with httpx2.Client(headers=headers, timeout=60) as client:

            def send(url: str, body: bytes) -> float:
                began = time.perf_counter()
                client.post(url + "/chat/completions", content=body).raise_for_status()
                return time.perf_counter() - began

            for index in range(WARMUP):
                for url in paths.values():
                    send(url, bodies[index])
            wait_until_idle(pids)
            for index in range(WARMUP, WARMUP + args.requests):
                order = list(paths) if index % 2 else list(paths)[::-1]
                for name in order:
                    latencies[name].append(send(paths[name], bodies[index]))
    medians = {name: statistics.median(values) * 1000 for name, values in latencies.items()}
    print(f"growing session to {len(bodies[-1]):,} bytes, {args.requests} requests per path")
    print(f"direct median {medians['direct']:.2f} ms")
    for name in ("fast path", "--no-fast-path"):
        print(f"{name}: added median {medians[name] - medians['direct']:.2f} ms")


if __name__ == "__main__":
    main()
