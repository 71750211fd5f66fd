"""The load the proxy-overhead benchmark puts on each path, and the latencies it records.

A *path* (``Target``) is one way to reach the test upstream: directly, or through a proxy. At
concurrency 1 ``measure_sequential`` interleaves each proxy with the direct path request by
request; above it ``measure_concurrent`` runs alternating bursts per path. Either fills one
``Cell``: every path's latencies for one request shape and concurrency.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx2

from .processes import CLIENT_IDLE_SECONDS
from .results import percentile

SHARES = {"median": 0.5, "p95": 0.95, "p99": 0.99}


@dataclass
class Cell:
    """Every path's latencies (seconds) and throughput for one request shape and concurrency."""

    tokens: int
    stream: bool
    concurrency: int
    growing: bool = False
    """Each request is the previous one plus a turn (a growing session), not the same body."""
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
    payload: bytes | Sequence[bytes],
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
    ``payload`` may be a sequence of bodies (a growing session): each proxy then gets them in
    order, each paired with a direct request of the same body.
    """
    bodies = [payload] if isinstance(payload, bytes) else list(payload)
    sent = {target.name: 0 for target in targets}
    direct, proxies = targets[0], targets[1:]
    limits = httpx2.Limits(keepalive_expiry=CLIENT_IDLE_SECONDS)
    with httpx2.Client(
        headers={"Content-Type": "application/json"}, timeout=120, limits=limits
    ) as client:
        for _ in range(warmup):
            for target in targets:
                _send(client, target, bodies[0], cell.stream)
        cell.latencies = {target.name: [] for target in targets}
        cell.baselines = {proxy.name: [] for proxy in proxies}
        per_round = max(1, requests // rounds)
        for index in range(rounds):
            for proxy in proxies if index % 2 == 0 else proxies[::-1]:
                quiet()
                for i in range(per_round):
                    body = bodies[sent[proxy.name] % len(bodies)]
                    sent[proxy.name] += 1
                    for target in (direct, proxy) if i % 2 == 0 else (proxy, direct):
                        latency = _send(client, target, body, cell.stream)
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
    limits = httpx2.Limits(
        max_connections=c, max_keepalive_connections=c, keepalive_expiry=CLIENT_IDLE_SECONDS
    )
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
