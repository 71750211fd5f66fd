"""Cancelled requests (``acompact``), and what they give back: the lease and the session's
lock when cancelled while compacting, the lock only when cancelled while waiting for the lease
(another holder's lease untouched), and a lease whose taking was under way, once it is taken
(``Lease.abandon``). Real stores, in memory and SQLite in a temporary directory."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from context_summarizer import ContextManager
from context_summarizer.core.effects import Turn
from context_summarizer.core.results import SummarizeCall, SummaryOutcome
from context_summarizer.library.drive import drive_async
from context_summarizer.library.sessions import Lease
from context_summarizer.library.settling import Sleep, off_the_loop
from context_summarizer.stores import MemoryStore, SQLiteStore

from .test_memory_bounds import CONFIG, session
from .test_settling import (
    MODEL,
    OTHER,
    SESSION,
    TTL,
    Place,
    Recorder,
    Run,
    kind,
    lease_decisions,
    on_nth,
    places,
    summarizer_for,
    summary,
)

__all__ = ["kind", "places"]  # the fixtures, shared with test_settling


def test_a_cancelled_acompact_gives_the_lease_and_the_lock_back(
    places: Callable[..., Place],
) -> None:
    store = places().connect()
    context = ContextManager(store=store, **CONFIG)

    async def main() -> None:
        asked = asyncio.Event()

        async def hang(call: SummarizeCall) -> SummaryOutcome:
            asked.set()
            await asyncio.Event().wait()
            raise AssertionError("never answered")

        async def answer(call: SummarizeCall) -> SummaryOutcome:
            return summary("the next one")

        located = await context.alocate(Turn(session(7), MODEL, session=SESSION))
        task = asyncio.ensure_future(context.acompact(located, summarizer=hang))
        await asyncio.wait_for(asked.wait(), 10)
        assert store.try_lease("", SESSION, OTHER, 60) is None  # held while it compacts
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert store.try_lease("", SESSION, OTHER, 60) == 2  # given back
        store.release_lease("", SESSION, OTHER)
        # The session's lock was given back too: the next request compacts.
        result = await asyncio.wait_for(context.acompact(located, summarizer=answer), 10)
        assert result.compacted and "the next one" in str(result.messages)

    asyncio.run(main())


def test_a_request_cancelled_while_it_waits_for_the_lease_lets_the_lock_go_only(
    places: Callable[..., Place],
) -> None:
    store = places().connect()
    assert store.try_lease("", SESSION, OTHER, 60) == 1
    run = Run("async", store)

    async def main() -> Recorder:
        waiting = asyncio.Event()
        recorder = run.recorder(summarizer_for("async", lambda: summary("never")))
        recorder.script = on_nth(Sleep, 2, waiting.set)
        located = run.locate(session(7))
        task = asyncio.ensure_future(
            drive_async(run.steps(located), recorder, offload=off_the_loop)
        )
        await asyncio.wait_for(waiting.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return recorder

    recorder = asyncio.run(main())
    assert lease_decisions(recorder.log) == [
        ("LockSession",),
        ("TakeLease", TTL, None),
        ("Sleep", 0.05),
        ("TakeLease", TTL, None),
        ("Sleep", "raised", "CancelledError"),
        ("UnlockSession",),  # no lease was taken: none is released
    ]
    assert store.try_lease("", SESSION, OTHER, 60) == 1  # still the other holder's
    assert len(run.locks) == 0


class _GatedTakes:
    """The first attempt to take a lease (but the other holder's) blocks until ``gate`` opens."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.entered, self.gate = threading.Event(), threading.Event()

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> int | None:
        if owner != OTHER and not self.gate.is_set():
            self.entered.set()
            assert self.gate.wait(10)
        return super().try_lease(namespace, session, owner, ttl_s)  # type: ignore[misc]


class GatedMemoryStore(_GatedTakes, MemoryStore):
    pass


class GatedSQLiteStore(_GatedTakes, SQLiteStore):
    pass


def test_a_request_cancelled_while_its_lease_is_being_taken_gives_that_lease_up(
    kind: str, places: Callable[..., Place]
) -> None:
    """The attempt runs on in its worker thread after the cancellation: the lease it takes is
    given up as soon as it is, not renewed for ever by nobody."""
    store = places(GatedSQLiteStore if kind == "sqlite" else GatedMemoryStore).connect()
    context = ContextManager(store=store, **CONFIG)

    async def main() -> None:
        async def answer(call: SummarizeCall) -> SummaryOutcome:
            raise AssertionError("never asked")

        located = await context.alocate(Turn(session(7), MODEL, session=SESSION))
        task = asyncio.ensure_future(context.acompact(located, summarizer=answer))
        assert await asyncio.to_thread(store.entered.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        store.gate.set()  # the attempt takes the lease now
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    deadline = time.monotonic() + 10
    while (token := store.try_lease("", SESSION, OTHER, 60)) is None:
        assert time.monotonic() < deadline, "the cancelled request's lease was never given up"
        time.sleep(0.02)
    assert token == 2


def test_an_abandoned_lease_is_given_up_whether_its_take_ended_before_or_after(
    places: Callable[..., Place],
) -> None:
    store = places().connect()
    taken = Lease(store, "", SESSION, 60)
    assert taken.take()
    taken.abandon()  # after the take: released, its renewals stopped
    assert store.try_lease("", SESSION, OTHER, 60) == 2
    store.release_lease("", SESSION, OTHER)
    late = Lease(store, "", SESSION, 60)
    late.abandon()  # before the take ends: what it takes is given up at once
    assert not late.take() and late.token is None
    assert store.try_lease("", SESSION, OTHER, 60) == 4  # (the late take had token 3)
