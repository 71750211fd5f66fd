"""Several ``ContextManager``s sharing one store, as replicas do: calibration learned by one is
used by the other, and a holder that stalls past its lease cannot overwrite what the next holder
wrote (its checkpoint is refused by the fencing token; it takes the new holder's instead)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_summarizer import ContextManager, MemoryStore
from context_summarizer.core.checkpoints import Checkpoint
from context_summarizer.core.errors import ConfigurationError, StoreUnavailable
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.library import shared_calibration
from context_summarizer.stores import RedisStore, SQLiteStore, Store

from .test_memory_bounds import CONFIG, session

MODEL = "gpt-4o"


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where two managers meet: a SQLite file, or the test redis-server (own prefix below)."""
    if request.param == "redis":
        return str(request.getfixturevalue("redis_server").url)
    return str(tmp_path / "shared.db")


def open_shared(spec: str, tag: str) -> Store:
    if spec.startswith("redis://"):
        return RedisStore(spec, prefix=f"shared-{tag}:")
    return SQLiteStore(spec)


@pytest.fixture
def two_stores(store_spec: str, request: pytest.FixtureRequest) -> Iterator[tuple[Store, Store]]:
    tag = f"{request.node.name}-{time.monotonic_ns()}"
    first, second = open_shared(store_spec, tag), open_shared(store_spec, tag)
    yield first, second
    first.close()
    second.close()


def test_one_replicas_usage_calibrates_the_others_estimates(
    two_stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_calibration, "CALIBRATION_REFRESH_S", 0.2)
    a = ContextManager(store=two_stores[0], **CONFIG)
    b = ContextManager(store=two_stores[1], **CONFIG)
    messages = session(1)[:5]
    seen_by_b = b.prepare(messages, model=MODEL)
    assert seen_by_b.report.estimated_tokens == seen_by_b.report.raw_estimated_tokens
    sent = a.prepare(messages, model=MODEL)
    estimated = sent.report.raw_estimated_tokens
    a.observe(sent, {"prompt_tokens": round(estimated * 1.3)}, model=MODEL)
    assert a.prepare(messages, model=MODEL).report.estimated_tokens > estimated
    time.sleep(0.3)  # b's copy is now stale: its next request reads the shared sums
    again = b.prepare(messages, model=MODEL)
    ratio = b.engine.calibration.ratio(MODEL)
    assert ratio == pytest.approx(round(estimated * 1.3) / estimated)
    assert again.report.estimated_tokens == math.ceil(round(estimated * ratio, 6))
    # Another tenant's estimates are not moved.
    other = b.prepare(messages, model=MODEL, namespace="another-tenant")
    assert other.report.estimated_tokens == other.report.raw_estimated_tokens


def test_a_store_that_is_down_loses_the_observation_not_the_answer() -> None:
    class DownStore(MemoryStore):
        def fold_calibration(self, *args: Any, **kwargs: Any) -> tuple[float, float]:
            raise StoreUnavailable("redis://nowhere", "ConnectionError")

    context = ContextManager(store=DownStore(), **CONFIG)
    sent = context.prepare(session(2)[:5], model=MODEL)
    context.observe(sent, {"prompt_tokens": 500}, model=MODEL)  # logged, not raised
    assert context.engine.calibration.ratio(MODEL) != 1.0  # this process still learned it


def test_lease_ttl_is_validated() -> None:
    for bad in (0, -1, float("nan"), True, "30"):
        with pytest.raises(ConfigurationError, match="lease_ttl_s"):
            ContextManager(lease_ttl_s=bad)  # type: ignore[arg-type]
    assert ContextManager(lease_ttl_s=2.5).lease_ttl_s == 2.5


class Stall:
    """Makes one store look, to its lease's renewals, like a process that stopped: while
    ``paused``, renewals fail as if the store were unreachable, so the lease expires."""

    def __init__(self, store: Store) -> None:
        self.paused = threading.Event()
        real = store.try_lease

        def try_lease(namespace: str, session: str, owner: str, ttl_s: float) -> int | None:
            if self.paused.is_set():
                raise StoreUnavailable("paused", "stopped process")
            return real(namespace, session, owner, ttl_s)

        store.try_lease = try_lease  # type: ignore[method-assign]


def test_a_holder_paused_past_its_lease_cannot_overwrite_the_next_holders_checkpoint(
    two_stores: tuple[Store, Store],
) -> None:
    slow_store, fast_store = two_stores
    stall = Stall(slow_store)
    woke = threading.Event()
    calls: list[str] = []

    def paused_summary(call: SummarizeCall) -> SummaryOutcome:
        calls.append("paused")
        stall.paused.set()  # from here its lease is not renewed...
        assert woke.wait(30)  # ...until the other replica has compacted the session
        stall.paused.clear()
        return SummaryOutcome(text="## Task and constraints\nthe PAUSED one's summary")

    def summary(call: SummarizeCall) -> SummaryOutcome:
        calls.append("live")
        return SummaryOutcome(text="## Task and constraints\nthe live one's summary")

    paused = ContextManager(store=slow_store, summarizer=paused_summary, lease_ttl_s=0.3, **CONFIG)
    live = ContextManager(store=fast_store, summarizer=summary, lease_ttl_s=0.3, **CONFIG)
    messages = session(7)
    results: dict[str, Any] = {}
    worker = threading.Thread(
        target=lambda: results.setdefault("paused", paused.prepare(messages, model=MODEL))
    )
    worker.start()
    deadline = time.monotonic() + 20
    while not stall.paused.is_set():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # The paused holder's lease expires; the live replica takes it and compacts.
    results["live"] = live.prepare(messages, model=MODEL)
    woke.set()
    worker.join(30)
    assert results["live"].compacted and results["paused"].checkpoint_id
    assert calls == ["paused", "live"]
    session_id = results["live"].session
    kept: list[Checkpoint] = fast_store.list_session("", session_id)
    assert [c.summary for c in kept] == ["## Task and constraints\nthe live one's summary"]
    # The woken holder's write was refused; it sends the live replica's rewrite instead.
    assert results["paused"].checkpoint_id == results["live"].checkpoint_id
    assert results["paused"].messages == results["live"].messages
