"""Shared fixtures: conversations built by hand, and the real test upstream on 127.0.0.1."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.testing import TestUpstream

from .redis_server import RedisServer

ProxyFactory = Callable[..., ProxyServer]
"""``start_proxy(**settings)``: a started proxy in front of the test's ``upstream``."""


def tool_turn(call_id: str, name: str, args: str, output: str) -> list[dict[str, Any]]:
    """An assistant tool call and its result."""
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": output},
    ]


def message_from_stream(chunks: Iterable[Any]) -> dict[str, Any]:
    """The assistant message a stream of ``chat.completion.chunk`` objects adds up to."""
    content = ""
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for tc in delta.tool_calls or []:
            entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            entry["id"] = tc.id or entry["id"]
            if tc.function:
                entry["name"] += tc.function.name or ""
                entry["arguments"] += tc.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls.values()
        ]
    return message


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    """A test upstream with no window limit, stopped after the test."""
    with TestUpstream() as server:
        yield server


@pytest.fixture
def start_proxy(tmp_path: Path, upstream: TestUpstream) -> Iterator[ProxyFactory]:
    """Starts proxies in front of ``upstream`` (a module may define its own), stopped after
    the test: SQLite in ``tmp_path``, a 16k window unless overridden, and no drafts ahead of
    time unless ``prepare_ratio`` is given (the proxy's default drafts in the background, so a
    test counting summary calls would depend on timing; ``test_ahead*`` test the drafts, and
    ``test_serve_command`` the default)."""
    started: list[ProxyServer] = []

    def start(**overrides: Any) -> ProxyServer:
        values: dict[str, Any] = {
            "upstream": upstream.base_url,
            "port": 0,
            "db": tmp_path / "checkpoints.db",
            "context_window": 16_000,
        }
        values.update(overrides)
        if "compaction" not in values:
            values.setdefault("prepare_ratio", None)
        proxy = ProxyServer(Settings(**values)).start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


def wait_until_serving(process: subprocess.Popen[str], url: str, timeout: float = 30) -> None:
    """Wait until a ``summarizer serve`` process answers ``GET url/healthz``; fail with its
    stderr if it exits first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx2.get(f"{url}/healthz").status_code == 200:
                return
        except httpx2.TransportError:
            pass
        assert process.poll() is None, process.communicate()[1]
        assert time.monotonic() < deadline, "serve did not start"
        time.sleep(0.1)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One real redis-server (nothing persisted) for the whole run, stopped at its end; each
    test keeps to its own key prefix. Skips without redis-server (fails under ``CI=true``)."""
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()
