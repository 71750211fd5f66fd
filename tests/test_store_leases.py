"""What several processes sharing a store rely on, in every store (memory, SQLite, a real
redis-server): fencing tokens on leases, shared calibration, the generation seen by another
connection, and the Redis store's own promises (its keys, its errors when Redis is down)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from context_summarizer.core.errors import ConfigurationError, LeaseLost, StoreUnavailable
from context_summarizer.core.messages import prefix_chain
from context_summarizer.stores import RedisStore, open_store, prefix_candidates

from .redis_server import RedisServer
from .test_stores import Harness, conversation, harness, make

__all__ = ["harness"]  # the fixture, shared with test_stores


def test_a_lease_grant_carries_a_fencing_token_that_grows_per_new_owner(harness: Harness) -> None:
    store = harness.store
    first = store.try_lease("ns-a", "s1", "one", 60)
    assert first is not None and first >= 1
    assert store.try_lease("ns-a", "s1", "one", 60) == first  # renewing keeps it
    assert store.try_lease("ns-a", "s1", "two", 60) is None
    store.release_lease("ns-a", "s1", "one")
    second = store.try_lease("ns-a", "s1", "two", 0.05)
    assert second == first + 1  # kept across the release, and grown
    threading.Event().wait(0.1)
    third = store.try_lease("ns-a", "s1", "one", 60)  # the other's expired
    assert third == second + 1
    other = store.try_lease("ns-b", "s1", "one", 60)  # per session and namespace
    assert other == 1


def test_a_put_under_an_older_token_is_refused_and_writes_nothing(harness: Harness) -> None:
    store = harness.store
    raw = conversation(8)
    stale = store.try_lease("ns-a", "s1", "paused", 0.05)
    assert stale is not None
    threading.Event().wait(0.1)  # "paused" stalls past its lease
    fresh = store.try_lease("ns-a", "s1", "new-holder", 60)
    assert fresh is not None and fresh > stale
    theirs = make(raw, 6, summary="the new holder's")
    store.put(theirs, fence=fresh)
    before = store.generation()
    late = make(raw, 6, summary="the paused holder's")
    with pytest.raises(LeaseLost) as refused:
        store.put(late, fence=stale)
    assert (refused.value.token, refused.value.current) == (stale, fresh)
    assert store.generation() == before
    assert store.get("ns-a", late.id) is None
    assert store.list_session("ns-a", "s1") == [theirs]
    assert store.find_latest("ns-a", prefix_candidates(prefix_chain(raw))) == theirs
    # The current token, and writes made under no lease, still go through.
    store.put(make(raw, 7), fence=fresh)
    store.put(make(raw, 5))
    assert len(store.list_session("ns-a", "s1")) == 3


def test_the_fence_is_checked_by_another_connection(harness: Harness) -> None:
    raw = conversation(6)
    mine, theirs = harness.store, harness.another()
    try:
        stale = mine.try_lease("ns", "s1", "p1", 0.05)
        assert stale is not None
        threading.Event().wait(0.1)
        assert theirs.try_lease("ns", "s1", "p2", 60) == stale + 1
        with pytest.raises(LeaseLost):
            mine.put(make(raw, 4, namespace="ns"), fence=stale)
        assert mine.generation() is not None
        before = mine.generation()
        theirs.put(make(raw, 5, namespace="ns"), fence=stale + 1)
        assert mine.generation() != before  # another connection's write moves it
    finally:
        if theirs is not mine:
            theirs.close()


def test_calibration_folds_are_shared_and_decay(harness: Harness) -> None:
    store = harness.store
    assert store.read_calibration("ns-a", "gpt-4o") is None
    assert store.fold_calibration(
        "ns-a", "gpt-4o", reported=1100, estimated=1000, alpha=0.3
    ) == pytest.approx((1100, 1000))
    other = harness.another()
    try:
        sums = other.fold_calibration("ns-a", "gpt-4o", reported=2400, estimated=2000, alpha=0.3)
        assert sums == pytest.approx((0.7 * 1100 + 2400, 0.7 * 1000 + 2000))
        assert store.read_calibration("ns-a", "gpt-4o") == pytest.approx(sums)
    finally:
        if other is not store:
            other.close()
    assert store.read_calibration("ns-b", "gpt-4o") is None  # never across namespaces
    assert store.read_calibration("ns-a", "gpt-4o-mini") is None


def test_concurrent_calibration_folds_lose_none(harness: Harness) -> None:
    store = harness.store
    barrier = threading.Barrier(4)

    def fold() -> None:
        barrier.wait()
        for _ in range(25):
            store.fold_calibration("ns", "m", reported=1, estimated=1, alpha=1.0 - 1e-12)

    # alpha ~ 1 keeps only the newest observation: every fold must still land whole.
    threads = [threading.Thread(target=fold) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reported, estimated = store.read_calibration("ns", "m") or (0, 0)
    assert reported == pytest.approx(1.0) and estimated == pytest.approx(1.0)
    for _ in range(3):  # alpha 0 keeps every one: a sum that counts them
        store.fold_calibration("ns", "count", reported=2, estimated=1, alpha=0.0)
    assert store.read_calibration("ns", "count") == pytest.approx((6, 3))


# --------------------------------------------------------------------------- Redis only


def test_open_store_takes_a_redis_url(redis_server: RedisServer, tmp_path: Path) -> None:
    with open_store(redis_server.url) as store:
        assert isinstance(store, RedisStore)
        assert store.name == redis_server.url
    with pytest.raises(ConfigurationError, match="store"):
        RedisStore(redis_server.url, prefix="")


def test_redis_keys_of_one_tenant_never_answer_anothers(redis_server: RedisServer) -> None:
    raw = conversation(6)
    with RedisStore(redis_server.url, prefix="iso:") as store:
        # Values built to collide if key parts were joined unquoted.
        store.put(make(raw, 4, namespace="a:sess:b", session="c"))
        assert store.list_session("a", "b:sess:a:c") == []
        assert store.list_session("a:sess:b", "c") != []
        assert store.find_latest("a", prefix_candidates(prefix_chain(raw))) is None
        assert store.try_lease("a:lease:b", "c", "x", 60) == 1
        assert store.try_lease("a", "b:lease:a:c", "y", 60) == 1
    with RedisStore(redis_server.url, prefix="other:") as elsewhere:
        assert elsewhere.list_session("a:sess:b", "c") == []  # another prefix, another store


def test_redis_stores_no_credential_and_no_plain_url_password(
    redis_server: RedisServer,
) -> None:
    url = redis_server.url.replace("redis://", "redis://user:hunter2-secret@")
    with pytest.raises(StoreUnavailable) as failed:  # redis has no such user configured
        RedisStore(url, prefix="pw:")
    assert "hunter2" not in str(failed.value) and "hunter2" not in failed.value.store


def test_redis_down_raises_store_unavailable_and_recovers(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "r", durable=True).start()
    raw = conversation(6)
    try:
        store = RedisStore(server.url, prefix="down:")
        kept = make(raw, 4)
        store.put(kept)
        server.stop()
        for call in (
            lambda: store.put(make(raw, 5)),
            lambda: store.get("ns-a", kept.id),
            lambda: store.find_latest("ns-a", prefix_candidates(prefix_chain(raw))),
            lambda: store.generation(),
            lambda: store.try_lease("ns-a", "s1", "o", 5),
        ):
            with pytest.raises(StoreUnavailable, match=r"redis://127\.0\.0\.1"):
                call()
        server.start()
        assert store.get("ns-a", kept.id) == kept  # reconnected, and AOF kept it
        store.close()
    finally:
        server.stop()
    with pytest.raises(StoreUnavailable):  # nothing listening at all
        RedisStore(server.url)


def test_a_compaction_ask_is_kept_per_session_and_cleared_only_if_unchanged(
    harness: Harness,
) -> None:
    from context_summarizer.stores import CompactionAsks

    store = harness.store
    assert isinstance(store, CompactionAsks)
    assert store.compaction_ask("ns-a", "s1") is None
    store.ask_compaction("ns-a", "s1", "keep the ticket numbers")
    first = store.compaction_ask("ns-a", "s1")
    assert first is not None and first.instructions == "keep the ticket numbers"
    assert store.compaction_ask("ns-b", "s1") is None  # another tenant's session of that name
    assert store.compaction_ask("ns-a", "s2") is None
    threading.Event().wait(0.01)
    store.ask_compaction("ns-a", "s1", None)  # asked again meanwhile: replaces the first
    second = store.compaction_ask("ns-a", "s1")
    assert second is not None and second.instructions is None
    assert second.asked_at > first.asked_at
    store.clear_compaction_ask("ns-a", "s1", first.asked_at)  # the stale one: nothing cleared
    assert store.compaction_ask("ns-a", "s1") == second
    store.clear_compaction_ask("ns-a", "s1", second.asked_at)
    assert store.compaction_ask("ns-a", "s1") is None
