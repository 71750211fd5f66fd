"""The one lease loop (``library.settling.settle``), driven by ``drive_sync`` and ``drive_async``
against real stores (in memory, and SQLite in a temporary directory): both drivers take the same
decisions in the same order, effect by effect, when another holder has the session's lease, when
that lease expires, when another replica compacts the session during the wait, when the lease is
taken over mid-compaction, when a draft made ahead of time is adopted, and when the summary call
fails; and a session contended by several callers (threads, or tasks) is compacted once.

Each run performs the loop's effects with the real performers (``SettlingPerformer``,
``AsyncSettlingPerformer``), wrapped by a recorder that writes down every effect and its answer,
and that plays the other holder's part at a given effect (releasing its lease, letting it
expire...), so no decision depends on timing.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from context_summarizer import ContextManager
from context_summarizer.core.effects import FindCheckpoint, SaveCheckpoint, Turn
from context_summarizer.core.errors import StoreUnavailable
from context_summarizer.core.located import Located
from context_summarizer.core.results import PrepareResult, SummarizeCall, SummaryOutcome
from context_summarizer.library.drive import drive_async, drive_sync
from context_summarizer.library.sessions import SessionLocks
from context_summarizer.library.settling import (
    AdoptedDraft,
    AwaitDraft,
    LockSession,
    PendingDraft,
    ReleaseLease,
    Sleep,
    TakeLease,
    UnlockSession,
    off_the_loop,
    settle,
)
from context_summarizer.library.settling_effects import AsyncSettlingPerformer, SettlingPerformer
from context_summarizer.stores import MemoryStore, SQLiteStore, Store

from .test_ahead import grown
from .test_memory_bounds import CONFIG, session

MODEL = "gpt-4o"
SESSION = "s"
OTHER = "another-replica"
TTL = 5.0
DRIVERS = ("sync", "async")

Decision = tuple[Any, ...]
Script = Callable[[Any], None]
"""What the other holder does when the loop asks for an effect (before it is performed)."""


def decision(effect: Any, answer: Any) -> Decision:
    """What the loop asked and was answered, in terms two runs on fresh stores share (no ids,
    no clocks)."""
    name = type(effect).__name__
    if isinstance(answer, BaseException):
        return (name, "raised", type(answer).__name__)
    match effect:
        case TakeLease():
            return (name, effect.ttl_s, answer)  # the fencing token, or None
        case Sleep():
            return (name, effect.seconds)
        case FindCheckpoint():
            found = answer.checkpoint
            return (name, None if found is None else (found.basis_count, found.summary))
        case SaveCheckpoint():
            return (name, effect.checkpoint.basis_count, effect.checkpoint.summary)
        case PendingDraft():
            return (name, None if answer is None else type(answer).__name__)
        case AwaitDraft():
            return (name, answer[0] is not None)
        case AdoptedDraft():
            return (name, answer is not None)
    return (name,)


class Recorder:
    """Performs each effect with a real performer, after ``script``, and writes it down."""

    def __init__(self, perform: Any, script: Script | None = None) -> None:
        self.perform = perform
        self.script = script or (lambda effect: None)
        self.log: list[Decision] = []

    def __call__(self, effect: Any) -> Any:
        self.script(effect)
        try:
            answer = self.perform(effect)
        except BaseException as exc:
            self.log.append(decision(effect, exc))
            raise
        self.log.append(decision(effect, answer))
        return answer


class AsyncRecorder(Recorder):
    """``Recorder`` for ``drive_async``."""

    async def __call__(self, effect: Any) -> Any:  # type: ignore[override]
        self.script(effect)
        try:
            answer = await self.perform(effect)
        except BaseException as exc:
            self.log.append(decision(effect, exc))
            raise
        self.log.append(decision(effect, answer))
        return answer


LEASE_DECISIONS = (LockSession, TakeLease, Sleep, ReleaseLease, UnlockSession)


def lease_decisions(log: list[Decision]) -> list[Decision]:
    """The lock and lease decisions of ``log``, and what raised."""
    names = {kind.__name__ for kind in LEASE_DECISIONS}
    return [entry for entry in log if entry[0] in names or "raised" in entry]


def summary(tag: str) -> SummaryOutcome:
    return SummaryOutcome(text=f"## Task and constraints\n{tag}\n## Current state\nworking")


def summarizer_for(driver: str, text: Callable[[], SummaryOutcome]) -> Any:
    """A summary client for ``driver``'s performer, answering ``text()`` (in a worker thread
    for async callers, so that it may block)."""
    if driver == "sync":
        return lambda call: text()

    async def summarize(call: SummarizeCall) -> SummaryOutcome:
        return await asyncio.to_thread(text)

    return summarize


class Run:
    """One driver's run of ``settle`` on a fresh store: the store, a manager on it (whose engine
    and drafts the loop uses), and the recorded decisions."""

    def __init__(self, driver: str, store: Store, *, ttl_s: float = TTL, **fields: Any) -> None:
        self.driver = driver
        self.store = store
        self.ttl_s = ttl_s
        self.context = ContextManager(store=store, **{**CONFIG, **fields})
        self.locks = SessionLocks()
        self.log: list[Decision] = []

    def locate(self, messages: list[dict[str, Any]]) -> Located:
        return self.context.locate(Turn(messages, MODEL, session=SESSION))

    def steps(self, located: Located) -> Any:
        """The loop for ``located``, as ``compact`` and ``acompact`` run it."""
        return settle(self.context.engine, located, force=None, lease_ttl_s=self.ttl_s)

    def recorder(self, summarize: Any, script: Script | None = None) -> Recorder:
        """This run's performer (of its driver), recording."""
        drafts, locks = self.context.drafts, self.locks
        if self.driver == "sync":
            perform = SettlingPerformer(self.store, summarize, drafts=drafts, locks=locks)
            return Recorder(perform, script)
        aperform = AsyncSettlingPerformer(self.store, summarize, drafts=drafts, locks=locks)
        return AsyncRecorder(aperform, script)

    def settle(
        self,
        located: Located,
        text: Callable[[], SummaryOutcome],
        *,
        script: Script | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> PrepareResult:
        """``located`` settled by this run's driver, its decisions appended to ``log``."""
        recorder = self.recorder(summarizer_for(self.driver, text), script)
        try:
            if self.driver == "sync":
                return drive_sync(self.steps(located), recorder)
            running = drive_async(self.steps(located), recorder, offload=off_the_loop)
            if loop is not None:
                return loop.run_until_complete(running)
            return asyncio.run(running)
        finally:
            self.log += recorder.log


class Place:
    """Where replicas meet: each ``connect()`` is another connection to one fresh store (the
    same SQLite file, or the same in-memory store)."""

    def __init__(self, kind: str, path: Path, store_type: type[Store] | None = None) -> None:
        self.kind = kind
        self.path = path
        self.store_type = store_type
        self.opened: list[Store] = []
        self._memory: Store | None = None

    def connect(self) -> Any:
        if self.kind == "sqlite":
            store = (self.store_type or SQLiteStore)(self.path)  # type: ignore[call-arg]
        elif self._memory is None:
            store = self._memory = (self.store_type or MemoryStore)()
        else:
            return self._memory
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    """Which store the replicas share."""
    return str(request.param)


@pytest.fixture
def places(kind: str, tmp_path: Path) -> Iterator[Callable[..., Place]]:
    """A fresh ``Place`` per call, of the parametrized kind."""
    made: list[Place] = []

    def make(store_type: type[Store] | None = None) -> Place:
        place = Place(kind, tmp_path / f"place-{len(made)}.db", store_type)
        made.append(place)
        return place

    yield make
    for place in made:
        place.close()


def on_nth(kind: type, n: int, act: Callable[[], None]) -> Script:
    """A script doing ``act`` when the loop asks for its ``n``-th ``kind`` effect."""
    seen = 0

    def script(effect: Any) -> None:
        nonlocal seen
        if isinstance(effect, kind):
            seen += 1
            if seen == n:
                act()

    return script


def test_a_lease_another_holder_has_is_waited_for_then_taken(
    places: Callable[..., Place],
) -> None:
    logs, results = {}, {}
    for driver in DRIVERS:
        store = places().connect()
        assert store.try_lease("", SESSION, OTHER, 60) == 1
        run = Run(driver, store)
        release = on_nth(Sleep, 3, lambda store=store: store.release_lease("", SESSION, OTHER))
        results[driver] = run.settle(
            run.locate(session(7)), lambda: summary("mine"), script=release
        )
        logs[driver] = run.log
    assert logs["sync"] == logs["async"]
    assert lease_decisions(logs["sync"]) == [
        ("LockSession",),
        ("TakeLease", TTL, None),
        ("Sleep", 0.05),
        ("TakeLease", TTL, None),
        ("Sleep", 0.1),
        ("TakeLease", TTL, None),
        ("Sleep", 0.2),
        ("TakeLease", TTL, 2),  # the next fencing token
        ("ReleaseLease",),
        ("UnlockSession",),
    ]
    assert logs["sync"][:2] == [("StartDraft",), ("PendingDraft", None)]
    assert any(entry[0] == "SummarizeCall" for entry in logs["sync"])
    for result in results.values():
        assert result.compacted and "mine" in str(result.messages)


def test_a_lease_that_expires_is_taken_over(places: Callable[..., Place]) -> None:
    logs = {}
    for driver in DRIVERS:
        store = places().connect()
        assert store.try_lease("", SESSION, OTHER, 60) == 1

        def stop_renewing(store: Store = store) -> None:
            # The holder's last renewal, then it stops (a process that died): the lease expires.
            assert store.try_lease("", SESSION, OTHER, 0.05) == 1
            time.sleep(0.1)

        run = Run(driver, store)
        result = run.settle(
            run.locate(session(7)), lambda: summary("mine"), script=on_nth(Sleep, 2, stop_renewing)
        )
        assert result.compacted
        logs[driver] = run.log
    assert logs["sync"] == logs["async"]
    assert lease_decisions(logs["sync"]) == [
        ("LockSession",),
        ("TakeLease", TTL, None),
        ("Sleep", 0.05),
        ("TakeLease", TTL, None),
        ("Sleep", 0.1),
        ("TakeLease", TTL, 2),
        ("ReleaseLease",),
        ("UnlockSession",),
    ]


def test_a_checkpoint_another_replica_wrote_during_the_wait_is_used(
    places: Callable[..., Place],
) -> None:
    logs, results, theirs = {}, {}, {}
    for driver in DRIVERS:
        place = places()
        store = place.connect()
        assert store.try_lease("", SESSION, OTHER, 60) == 1
        replica = ContextManager(
            store=place.connect(), summarizer=lambda call: summary("the replica's"), **CONFIG
        )

        def replica_compacts(
            store: Store = store, replica: ContextManager = replica, driver: str = driver
        ) -> None:
            store.release_lease("", SESSION, OTHER)
            theirs[driver] = replica.prepare(session(7), model=MODEL, session=SESSION)

        run = Run(driver, store)
        located = run.locate(session(7))
        results[driver] = run.settle(
            located, lambda: summary("mine"), script=on_nth(Sleep, 1, replica_compacts)
        )
        logs[driver] = run.log
    assert logs["sync"] == logs["async"]
    assert lease_decisions(logs["sync"]) == [
        ("LockSession",),
        ("TakeLease", TTL, None),
        ("Sleep", 0.05),
        ("UnlockSession",),  # no compaction of its own: the replica's is used
    ]
    found = [entry for entry in logs["sync"] if entry[0] == "FindCheckpoint"]
    assert found[0] == ("FindCheckpoint", None)
    assert found[-1][1] is not None and "the replica's" in found[-1][1][1]
    for driver, result in results.items():
        assert not result.compacted and result.rewritten
        assert result.checkpoint_id == theirs[driver].checkpoint_id
        assert result.messages == theirs[driver].messages


THIEF = "thief"


class _StallingRenewals:
    """While ``paused``, every lease call but the thief's fails as if the store could not be
    reached: the holder's renewals stop (a process stopped mid-compaction)."""

    paused = False

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> int | None:
        if self.paused and owner != THIEF:
            raise StoreUnavailable("paused", "a stopped process")
        return super().try_lease(namespace, session, owner, ttl_s)  # type: ignore[misc]


class StallingMemoryStore(_StallingRenewals, MemoryStore):
    pass


class StallingSQLiteStore(_StallingRenewals, SQLiteStore):
    pass


def test_a_lease_taken_over_mid_compaction_is_let_go_and_the_session_looked_at_again(
    kind: str, places: Callable[..., Place], caplog: pytest.LogCaptureFixture
) -> None:
    logs = {}
    for driver in DRIVERS:
        store = places(StallingSQLiteStore if kind == "sqlite" else StallingMemoryStore).connect()
        calls = 0

        def stall_then_answer(store: Any = store) -> SummaryOutcome:
            nonlocal calls
            calls += 1
            if calls == 1:  # the holder stalls past its lease, and a thief takes it
                store.paused = True
                deadline = time.monotonic() + 20
                while store.try_lease("", SESSION, THIEF, 60) is None:
                    assert time.monotonic() < deadline, "the lease never expired"
                    time.sleep(0.02)
                store.paused = False
                return summary("the stalled one's")
            return summary("mine")

        run = Run(driver, store, ttl_s=0.3)
        thief_leaves = on_nth(Sleep, 1, lambda store=store: store.release_lease("", SESSION, THIEF))
        with caplog.at_level(logging.WARNING, logger="summarizer"):
            result = run.settle(run.locate(session(7)), stall_then_answer, script=thief_leaves)
        assert "was taken over while this process compacted it" in caplog.text
        caplog.clear()
        logs[driver] = run.log
        assert result.compacted and "mine" in str(result.messages)
        (kept,) = store.list_session("", SESSION)
        assert "mine" in (kept.summary or "")
    assert logs["sync"] == logs["async"]
    assert lease_decisions(logs["sync"]) == [
        ("LockSession",),
        ("TakeLease", 0.3, 1),
        ("SaveCheckpoint", "raised", "LeaseLost"),  # refused: the thief's token is newer
        ("ReleaseLease",),
        ("TakeLease", 0.3, None),  # the thief holds it
        ("Sleep", 0.05),
        ("TakeLease", 0.3, 3),
        ("ReleaseLease",),
        ("UnlockSession",),
    ]


def test_a_draft_made_ahead_of_time_is_awaited_then_adopted_under_the_lease(
    places: Callable[..., Place],
) -> None:
    logs, outcomes = {}, {}
    for driver in DRIVERS:
        outcomes[driver] = []
        run = Run(
            driver,
            places().connect(),
            context_window=16_000,
            prepare_ratio=0.45,
            on_ahead=outcomes[driver].append,
        )
        loop = asyncio.new_event_loop()  # the draft's task and the request's, on one loop
        try:
            # Over the prepare threshold: its draft starts (a thread, or a task), nothing waits.
            first = run.settle(run.locate(grown(5)), lambda: summary("drafted"), loop=loop)
            assert not first.compacted
            # Over the window: it waits for the draft and adopts it.
            result = run.settle(run.locate(grown(9)), lambda: summary("drafted"), loop=loop)
        finally:
            run.context.drafts.close()
            loop.close()
        assert result.compacted and "drafted" in str(result.messages)
        logs[driver] = run.log
    assert logs["sync"] == logs["async"]
    # (Whether the request found its draft still being written, "waited", is a matter of time.)
    counted = {driver: [o for o in seen if o != "waited"] for driver, seen in outcomes.items()}
    assert counted["sync"] == counted["async"]
    assert counted["sync"][:3] == ["started", "adopted", "started"]
    assert [entry for entry in logs["sync"] if entry[0] != "FindCheckpoint"][:10] == [
        ("StartDraft",),  # the first request's: it fits, and goes out as it is
        ("StartDraft",),  # the second's: a draft of the conversation it continues is kept
        ("PendingDraft", "AheadJob"),
        ("AwaitDraft", True),
        ("LockSession",),
        ("TakeLease", TTL, 1),
        # The draft's checkpoint, made on the first request's conversation:
        ("SaveCheckpoint", len(grown(5)), summary("drafted").text),
        ("AdoptedDraft", True),
        ("StartDraft",),  # still over the prepare threshold: the next draft, at once
        ("ReleaseLease",),
    ]
    assert logs["sync"][-1] == ("UnlockSession",)


class ModelDown(Exception):
    pass


def test_a_failing_summary_call_lets_the_lease_and_the_lock_go_and_is_raised(
    places: Callable[..., Place],
) -> None:
    logs = {}

    def fail() -> SummaryOutcome:
        raise ModelDown("the model is down")

    for driver in DRIVERS:
        store = places().connect()
        run = Run(driver, store)
        with pytest.raises(ModelDown, match="the model is down"):
            run.settle(run.locate(session(7)), fail)
        assert store.try_lease("", SESSION, OTHER, 60) == 2  # given back
        logs[driver] = run.log
    assert logs["sync"] == logs["async"]
    assert lease_decisions(logs["sync"]) == [
        ("LockSession",),
        ("TakeLease", TTL, 1),
        ("SummarizeCall", "raised", "ModelDown"),
        ("ReleaseLease",),
        ("UnlockSession",),
    ]


@pytest.mark.parametrize("replicas", [False, True], ids=["one-manager", "a-manager-each"])
def test_a_contended_session_is_compacted_once_by_threads_and_by_tasks(
    places: Callable[..., Place], replicas: bool
) -> None:
    """Four callers at once on one session (through one manager: its session lock; or one
    manager each, as replicas: the store's lease): one compacts, the others wait and send its
    rewrite."""
    seen = {}
    for driver in DRIVERS:
        place = places()
        calls: list[str] = []

        def slow(call: SummarizeCall, calls: list[str] = calls) -> SummaryOutcome:
            calls.append("sync")
            time.sleep(0.1)
            return summary("the one")

        async def aslow(call: SummarizeCall, calls: list[str] = calls) -> SummaryOutcome:
            calls.append("async")
            await asyncio.sleep(0.1)
            return summary("the one")

        one = ContextManager(store=place.connect(), summarizer=slow, **CONFIG)
        contexts = [
            ContextManager(store=place.connect(), summarizer=slow, **CONFIG) if replicas else one
            for _ in range(4)
        ]
        if driver == "sync":
            barrier = threading.Barrier(4)

            def prepare(context: ContextManager, barrier: threading.Barrier = barrier) -> Any:
                barrier.wait()
                return context.prepare(session(7), model=MODEL, session=SESSION)

            with ThreadPoolExecutor(4) as pool:
                results = list(pool.map(prepare, contexts))
        else:

            async def prepare_all(contexts: list[ContextManager] = contexts) -> list[Any]:
                return await asyncio.gather(
                    *(
                        context.aprepare(session(7), model=MODEL, session=SESSION, summarizer=aslow)
                        for context in contexts
                    )
                )

            results = asyncio.run(prepare_all())
        kept = place.connect().list_session("", SESSION)
        assert len(kept) == 1 and "the one" in (kept[0].summary or "")
        assert {result.checkpoint_id for result in results} == {kept[0].id}
        assert all(result.messages == results[0].messages for result in results)
        assert set(calls) == {driver}
        seen[driver] = (sorted(result.compacted for result in results), len(calls))
    assert seen["sync"] == seen["async"]
    assert seen["sync"][0] == [False, False, False, True]
