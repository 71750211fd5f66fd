"""A slow store stalls only the session waiting on it.

The real proxy in front of the real test upstream, driven by the real openai SDK, over a real
SQLite store that blocks every call for one tenant's namespace until the test lets it go. While
that tenant's request waits in the store (looking its checkpoint up, or saving the checkpoint of
a compaction), another tenant's request completes and ``/healthz`` answers: the store's blocking
work runs off the event loop. Then the held request completes too, and nothing is lost.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.core.checkpoints import Checkpoint
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.stores import SQLiteStore
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .test_proxy import long_history

MODEL = "gpt-4o-mini"
SLOW_KEY = "sk-slow-tenant-0123456789abcdef"
FAST_KEY = "sk-fast-tenant-0123456789abcdef"
HOLD_S = 30.0
"""Longest the store holds a call; the test releases it long before."""


class HeldStore(SQLiteStore):
    """A SQLite store whose ``operation`` blocks for one namespace until ``release``."""

    def __init__(self, path: Path, namespace: str, operation: str) -> None:
        super().__init__(path)
        self.namespace = namespace
        self.operation = operation
        self.entered = threading.Event()
        self.released = threading.Event()

    def _hold(self, namespace: str, operation: str) -> None:
        if namespace == self.namespace and operation == self.operation:
            self.entered.set()
            self.released.wait(HOLD_S)

    def find_latest(self, namespace: str, prefix_hashes: Mapping[str, int]) -> Checkpoint | None:
        self._hold(namespace, "find_latest")
        return super().find_latest(namespace, prefix_hashes)

    def put(self, checkpoint: Checkpoint, *, fence: int | None = None) -> None:
        self._hold(checkpoint.namespace, "put")
        super().put(checkpoint, fence=fence)


@pytest.fixture(scope="module")
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(responder=RoutingResponder(echo_responder)) as server:
        yield server


def _client(proxy: ProxyServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=60)


@pytest.mark.parametrize(
    ("operation", "messages"),
    [
        # A short conversation: its checkpoint is looked up, nothing is compacted.
        ("find_latest", [{"role": "user", "content": "Say hello."}]),
        # Over the trigger: summarized, then its checkpoint saved.
        ("put", long_history(7, size=400, task="Fix the failing invoice test, slow tenant.")),
    ],
    ids=["lookup", "save"],
)
def test_a_store_held_for_one_session_does_not_stall_another(
    upstream: TestUpstream, tmp_path: Path, operation: str, messages: list[dict[str, Any]]
) -> None:
    store = HeldStore(tmp_path / "c.db", credential_namespace(SLOW_KEY), operation)
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        db=tmp_path / "unused.db",
        context_window=8_000,
        max_summary_tokens=500,
        prepare_ratio=None,  # the held save is the compaction's, not a draft's
    )
    with ProxyServer(settings, store=store) as proxy, ThreadPoolExecutor(1) as pool:
        slow = _client(proxy, SLOW_KEY).chat.completions.with_raw_response
        held = pool.submit(slow.create, model=MODEL, messages=messages)
        assert store.entered.wait(20), f"the slow tenant's request never reached {operation}"
        try:
            fast = (
                _client(proxy, FAST_KEY)
                .with_options(timeout=10)
                .chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": "Another tenant, another session."}],
                )
            )
            health = httpx2.get(f"{proxy.base_url.rsplit('/v1', 1)[0]}/healthz", timeout=5)
            assert not held.done(), "the held request should still be waiting in the store"
        finally:
            store.released.set()
        assert fast.choices[0].message.content
        assert health.status_code == 200
        answer = held.result(timeout=60)
        assert answer.parse().choices[0].message.content
        compacted = answer.headers["x-summarizer-compacted"] == "true"
        assert compacted == (operation == "put")
        session = answer.headers["x-summarizer-session"]
    saved = SQLiteStore(tmp_path / "c.db")
    try:
        kept = saved.list_session(credential_namespace(SLOW_KEY), session)
        # The compaction's checkpoint was saved whole once the store let go.
        assert [c.id for c in kept] == (
            [answer.headers["x-summarizer-checkpoint"]] if compacted else []
        )
    finally:
        saved.close()
