"""The activity log both stores keep: request records, session roll-ups, recordings."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.core.activity import (
    REDACTED,
    Recording,
    RequestRecord,
    namespace_label,
    redact,
    roll_up,
)
from context_summarizer.stores import (
    ActivityLog,
    MemoryStore,
    RedisStore,
    SQLiteStore,
    redis_activity,
)


def record(session: str, at: float, tokens: int, **fields: Any) -> RequestRecord:
    values: dict[str, Any] = {
        "namespace": "key-aaaa",
        "session": session,
        "at": at,
        "model": "gpt-4o",
        "tokens_before": tokens,
        "tokens_sent": tokens,
        "window": 16_000,
    }
    values.update(fields)
    return RequestRecord(**values)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    store: Any
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
        store = RedisStore(url, prefix=f"activity-{uuid.uuid4().hex}:")
    else:
        store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "a.db")
    yield store
    store.close()


def test_every_store_is_an_activity_log(log: Any) -> None:
    assert isinstance(log, ActivityLog)


def test_a_session_rolls_up_its_requests(log: Any) -> None:
    log.log_request(record("s1", 10.0, 1_000, reported_tokens=1_100, cached_tokens=0))
    log.log_request(record("s1", 11.0, 9_000, reported_tokens=9_200, cached_tokens=1_000))
    log.log_request(
        record("s1", 12.0, 4_000, compacted=True, checkpoint_id="c1", model="gpt-4o-mini")
    )
    log.log_request(record("s2", 5.0, 300, namespace="key-bbbb"))
    rows = log.list_sessions()
    assert [(r.namespace, r.session) for r in rows] == [("key-aaaa", "s1"), ("key-bbbb", "s2")]
    s1 = rows[0]
    assert (s1.requests, s1.compactions, s1.tokens_now, s1.tokens_peak) == (3, 1, 4_000, 9_000)
    assert s1.model == "gpt-4o-mini" and s1.window == 16_000
    assert (s1.first_seen, s1.last_seen) == (10.0, 12.0)
    assert s1.cache_share == pytest.approx(1_000 / 10_300)
    assert rows[1].cache_share is None
    # The SQL roll-up and the pure one agree.
    assert rows == roll_up(log.session_requests(None, "s1") + log.session_requests(None, "s2"))


def test_reads_are_scoped_by_namespace_and_time(log: Any) -> None:
    log.log_request(record("same", 1.0, 100, namespace="key-aaaa"))
    log.log_request(record("same", 2.0, 200, namespace="key-bbbb"))
    log.log_request(record("old", 0.5, 50, namespace="key-aaaa"))
    mine = log.list_sessions("key-aaaa")
    assert {(r.namespace, r.session) for r in mine} == {("key-aaaa", "same"), ("key-aaaa", "old")}
    assert [r.tokens_sent for r in log.session_requests("key-bbbb", "same")] == [200]
    assert [r.tokens_sent for r in log.session_requests(None, "same")] == [100, 200]
    assert [r.session for r in log.list_sessions(since=1.0)] == ["same", "same"]
    assert log.list_sessions("key-cccc") == []


def test_a_recording_keeps_the_latest_conversation(log: Any) -> None:
    first = [{"role": "user", "content": "one"}]
    later = [*first, {"role": "assistant", "content": "two"}]
    for at, messages in ((1.0, first), (2.0, later)):
        log.record_conversation(
            Recording(namespace="key-aaaa", session="s", model="m", at=at, messages=messages)
        )
    log.record_conversation(
        Recording(namespace="key-bbbb", session="s", model="m", at=3.0, messages=first)
    )
    assert [r.messages for r in log.recordings("key-aaaa")] == [later]
    assert [r.namespace for r in log.recordings(session="s")] == ["key-aaaa", "key-bbbb"]


def test_the_redis_log_is_bounded_per_session_and_in_sessions(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis_activity, "MAX_RECORDS_PER_SESSION", 3)
    monkeypatch.setattr(redis_activity, "MAX_SESSIONS", 2)
    with RedisStore(redis_server.url, prefix=f"bound-{uuid.uuid4().hex}:") as store:
        for i in range(5):
            store.log_request(record("s1", 10.0 + i, 100 * (i + 1)))
        kept = store.session_requests("key-aaaa", "s1")
        assert [r.tokens_sent for r in kept] == [300, 400, 500]  # the newest 3
        (row,) = store.list_sessions()
        assert (row.requests, row.tokens_peak, row.first_seen) == (5, 500, 10.0)  # all counted
        store.log_request(record("s2", 20.0, 1))
        store.log_request(record("s3", 21.0, 1))  # s1, least recently active, is dropped
        assert [r.session for r in store.list_sessions()] == ["s3", "s2"]
        assert store.session_requests("key-aaaa", "s1") == []
        for i, session in enumerate(("r1", "r2", "r3")):
            store.record_conversation(
                Recording(
                    namespace="key-aaaa", session=session, model="m", at=float(i), messages=[]
                )
            )
        assert [r.session for r in store.recordings("key-aaaa")] == ["r2", "r3"]


def test_the_sqlite_log_survives_a_restart(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a.db") as store:
        store.log_request(record("s1", 1.0, 10))
    with SQLiteStore(tmp_path / "a.db") as store:
        assert [r.requests for r in store.list_sessions()] == [1]


def test_namespace_labels_never_show_more_than_a_hash_prefix() -> None:
    assert namespace_label("key-0123456789abcdef0123456789abcdef") == "key-01234567"
    assert namespace_label("anonymous") == "keyless"


def test_redact_removes_known_secrets_and_credential_shapes() -> None:
    key = "sk-proj-" + "x" * 40
    value = {
        "messages": [
            {"role": "user", "content": f"use {key} and my-own-secret-value please"},
            {"role": "user", "content": [{"type": "text", "text": "Bearer abcdefghijklmnopqrstu"}]},
        ],
        "n": 3,
    }
    cleaned = redact(value, ["my-own-secret-value"])
    text = str(cleaned)
    assert key not in text and "my-own-secret-value" not in text and "abcdefghijklmnop" not in text
    assert text.count(REDACTED) == 3 and cleaned["n"] == 3
    assert redact("no secrets here", []) == "no secrets here"


class CountingStore(MemoryStore):
    """A memory store that counts the batches it is given, and can be held shut."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []
        self.gate = threading.Event()
        self.gate.set()

    def log_requests(self, records: Any) -> None:
        self.gate.wait(10)
        self.batches.append(len(records))
        super().log_requests(records)


def test_the_writer_writes_in_batches_off_the_callers_thread() -> None:
    from context_summarizer.proxy.activity_writer import ActivityWriter

    store = CountingStore()
    store.gate.clear()  # the first batch waits: everything submitted meanwhile queues up
    writer = ActivityWriter(store, interval=0.01)
    for i in range(200):
        writer.submit(record("s", float(i), i), None)  # never waits on the store
    store.gate.set()
    writer.close()
    assert sum(store.batches) == 200 and len(store.batches) < 20
    assert [r.tokens_sent for r in store.session_requests(None, "s")] == list(range(200))


def test_a_full_queue_drops_and_counts_instead_of_waiting() -> None:
    from context_summarizer.proxy.activity_writer import ActivityWriter

    store = CountingStore()
    store.gate.clear()
    dropped: list[int] = []
    writer = ActivityWriter(store, interval=0.01, capacity=5, on_drop=lambda: dropped.append(1))
    for i in range(50):
        writer.submit(record("s", float(i), i), None)
    store.gate.set()
    writer.close()
    assert dropped and sum(store.batches) + len(dropped) == 50


def test_flush_returns_once_everything_queued_before_it_is_written() -> None:
    from context_summarizer.proxy.activity_writer import ActivityWriter

    store = CountingStore()
    writer = ActivityWriter(store, interval=5.0)  # left alone, it would gather for 5 s
    observed: list[int] = []
    for i in range(3):
        writer.submit(record("s", float(i), i), None)
        writer.defer(lambda i=i: observed.append(i))
    store.gate.clear()
    assert not writer.flush(timeout=0.2)  # the store is held shut: not written yet
    store.gate.set()
    assert writer.flush(timeout=10)
    assert observed == [0, 1, 2]
    assert [r.tokens_sent for r in store.session_requests(None, "s")] == [0, 1, 2]
    writer.close()


def test_nothing_queued_while_the_writer_drains_is_lost_or_written_twice() -> None:
    from context_summarizer.proxy.activity_writer import ActivityWriter

    store = CountingStore()
    writer = ActivityWriter(store, interval=0.0005, batch=7)  # drains all the time
    deferred: list[int] = []

    def produce(base: int) -> None:
        for i in range(base, base + 500):
            writer.submit(record("s", float(i), i), None)
            if i % 3 == 0:
                writer.defer(lambda i=i: deferred.append(i))
            if i % 97 == 0:
                writer.flush(timeout=10)

    threads = [threading.Thread(target=produce, args=(n * 1000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert writer.flush(timeout=10)
    sent = sorted(r.tokens_sent for r in store.session_requests(None, "s"))
    assert sent == sorted(n * 1000 + i for n in range(4) for i in range(500))
    assert sorted(deferred) == sorted(i for i in sent if i % 3 == 0)
    writer.close()
