"""Latency the proxy adds to a chat request, against calling the same upstream directly.

Both paths are measured in the same run, interleaved request by request so machine noise hits
them alike: the test upstream (``summarizer.testing``, fixed one-word reply, no delay) on
127.0.0.1, and ``summarizer serve`` in front of it, run as users run it (its own process), with a
window large enough that no compaction triggers. The client sends pre-serialized bytes with
httpx2 so client work is identical for both. Added latency is reported as the difference of the
two latency distributions' percentiles (median, p95, p99).

    python -m benchmarks.proxy_overhead --tokens 100000 --requests 300
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import dataclass
from typing import Any

import httpx2

from summarizer.testing import Reply, TestUpstream
from summarizer.tokens import make_counter

from .processes import serve_process

MODEL = "gpt-4o-mini"


def conversation(tokens: int, *, stream: bool = False) -> dict[str, Any]:
    """A tool-using conversation of about ``tokens`` prompt tokens, as a request body."""
    counter = make_counter(MODEL)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Find why the invoice totals are wrong and fix it."},
    ]
    turn = 0
    while counter.count_messages(messages) < tokens:
        call_id = f"call_{turn}"
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
                            "arguments": json.dumps({"path": f"src/mod_{turn}.py"}),
                        },
                    }
                ],
            }
        )
        lines = [f"def handler_{turn}_{i}(x):\n    return x * {i} + {turn}" for i in range(60)]
        messages.append({"role": "tool", "tool_call_id": call_id, "content": "\n".join(lines)})
        turn += 1
    messages.append({"role": "user", "content": "Continue."})
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "max_completion_tokens": 16}
    if stream:
        body["stream"] = True
    return body


def percentile(values: list[float], share: float) -> float:
    """The ``share`` quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


@dataclass
class Overhead:
    """Latency distributions of the two paths, in seconds."""

    direct: list[float]
    proxied: list[float]

    def added(self, share: float) -> float:
        """Added latency at quantile ``share``: proxied minus direct."""
        return percentile(self.proxied, share) - percentile(self.direct, share)

    def summary(self) -> dict[str, float]:
        """Median/p95/p99 of both paths and of the added latency, in milliseconds."""
        out: dict[str, float] = {}
        for name, share in (("median", 0.5), ("p95", 0.95), ("p99", 0.99)):
            out[f"direct_{name}_ms"] = percentile(self.direct, share) * 1000
            out[f"proxied_{name}_ms"] = percentile(self.proxied, share) * 1000
            out[f"added_{name}_ms"] = self.added(share) * 1000
        out["direct_mean_ms"] = statistics.fmean(self.direct) * 1000
        out["proxied_mean_ms"] = statistics.fmean(self.proxied) * 1000
        return out


def _timed(client: httpx2.Client, url: str, payload: bytes, stream: bool) -> float:
    started = time.perf_counter()
    if stream:
        with client.stream("POST", url, content=payload) as response:
            for _ in response.iter_raw():
                pass
            response.raise_for_status()
    else:
        response = client.post(url, content=payload)
        response.raise_for_status()
    return time.perf_counter() - started


def measure(*, tokens: int, requests: int, stream: bool = False, warmup: int = 20) -> Overhead:
    """Interleave ``requests`` direct and proxied requests of a ``tokens``-token conversation."""
    payload = json.dumps(conversation(tokens, stream=stream)).encode()
    with TestUpstream(responder=lambda body: Reply(content="ok")) as upstream:
        window = max(1_000_000, tokens * 4)
        with (
            serve_process(upstream.base_url, context_window=window) as (proxy_base, _),
            httpx2.Client(
                headers={"Authorization": "Bearer bench", "Content-Type": "application/json"},
                timeout=60,
            ) as client,
        ):
            direct_url = f"{upstream.base_url}/chat/completions"
            proxy_url = f"{proxy_base}/chat/completions"
            for _ in range(warmup):
                _timed(client, direct_url, payload, stream)
                _timed(client, proxy_url, payload, stream)
            direct: list[float] = []
            proxied: list[float] = []
            for i in range(requests):
                # Alternate which path goes first, so neither always runs on a warmer cache.
                if i % 2:
                    direct.append(_timed(client, direct_url, payload, stream))
                    proxied.append(_timed(client, proxy_url, payload, stream))
                else:
                    proxied.append(_timed(client, proxy_url, payload, stream))
                    direct.append(_timed(client, direct_url, payload, stream))
    return Overhead(direct, proxied)


def main() -> None:
    """Command line: print the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--stream", action="store_true")
    args = parser.parse_args()
    result = measure(tokens=args.tokens, requests=args.requests, stream=args.stream)
    figures = {"tokens": args.tokens, "requests": args.requests, "stream": args.stream}
    figures.update({k: round(v, 3) for k, v in result.summary().items()})
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
