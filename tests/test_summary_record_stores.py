"""Summary records in every store (``ActivityLog.record_summaries`` / ``summary_records``):
appended, never replaced, read back oldest first by session, namespace or all; SQLite upgrades
an older database in place; Redis keeps a session's newest records and the most recent
sessions, on a real redis-server."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.core.activity import Recording
from context_summarizer.core.errors import ConfigurationError
from context_summarizer.core.summary_records import SummaryAttempt, SummaryRecord
from context_summarizer.stores import MemoryStore, RedisStore, SQLiteStore, redis_activity
from context_summarizer.stores.sqlite import MIGRATIONS, SCHEMA_VERSION


def summary_record(
    session: str, at: float, start: int, *, namespace: str = "key-aaaa", checkpoint: str = "c1"
) -> SummaryRecord:
    """A record of one run, with a first and a strict attempt."""
    request = {
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": f"run {start} of {session}"},
            {"role": "user", "content": "Summarize the conversation above."},
        ],
        "max_tokens": 300,
    }
    return SummaryRecord(
        namespace=namespace,
        session=session,
        checkpoint_id=checkpoint,
        at=at,
        model="gpt-4o",
        start=start,
        end=start + 4,
        verdict="repaired",
        cap=300,
        facts=[{"kind": "error", "text": f"ValueError {start}", "role": "tool"}],
        attempts=[
            SummaryAttempt(attempt="first", request=request, summary="", problem="empty", tokens=0),
            SummaryAttempt(
                attempt="strict", request=request, summary=f"summary {start}", score=1.0, tokens=3
            ),
        ],
    )


@pytest.fixture(params=["memory", "sqlite", "redis"])
def log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    store: Any
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
        store = RedisStore(url, prefix=f"summaries-{uuid.uuid4().hex}:")
    else:
        store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "a.db")
    yield store
    store.close()


def test_records_round_trip_by_session_namespace_and_all_oldest_first(log: Any) -> None:
    first = summary_record("s1", 2.0, 4)
    same_at = summary_record("s1", 2.0, 1)  # written after ``first``, same instant
    other_ns = summary_record("s2", 1.0, 2, namespace="key-bbbb", checkpoint="c2")
    later = summary_record("s2", 3.0, 6, checkpoint="c3")
    assert log.summary_records() == []
    log.record_summaries([first, same_at])
    log.record_summaries([other_ns, later])
    log.record_summaries([])  # nothing to write: nothing happens

    assert log.summary_records() == [other_ns, first, same_at, later]
    assert log.summary_records("key-aaaa") == [first, same_at, later]
    assert log.summary_records(session="s1") == [first, same_at]
    assert log.summary_records(session="s2") == [other_ns, later]
    assert log.summary_records("key-aaaa", "s2") == [later]
    assert log.summary_records("key-cccc") == []
    (kept,) = log.summary_records("key-bbbb")
    assert kept.used is not None and kept.used.summary == "summary 2"
    assert kept.attempts[1].request == other_ns.attempts[1].request


def test_a_record_is_appended_never_replaced(log: Any) -> None:
    record = summary_record("s", 1.0, 3)
    log.record_summaries([record])
    log.record_summaries([record.model_copy(update={"at": 2.0, "verdict": "accepted"})])
    assert [r.verdict for r in log.summary_records("key-aaaa", "s")] == ["repaired", "accepted"]


def test_closing_a_memory_store_drops_its_summary_records() -> None:
    store = MemoryStore()
    store.record_summaries([summary_record("s", 1.0, 2)])
    store.close()
    assert store._summaries == []
    with pytest.raises(ValueError):
        store.summary_records()


def test_a_version_5_database_upgrades_in_place_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for steps in MIGRATIONS[:5]:
        for statement in steps:
            conn.execute(statement)
    conn.execute("PRAGMA user_version = 5")
    old = Recording(namespace="key-aaaa", session="s", model="m", at=1.0, messages=[])
    conn.execute(
        "INSERT INTO recordings (namespace, session, at, body) VALUES (?, ?, ?, ?)",
        ("key-aaaa", "s", 1.0, old.model_dump_json()),
    )
    conn.commit()
    conn.close()

    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 6
        assert store.recordings() == [old]
        record = summary_record("s", 2.0, 1)
        store.record_summaries([record])
        assert store.summary_records("key-aaaa", "s") == [record]
    with SQLiteStore(path) as store:  # reopened: nothing to migrate, the record is there
        assert store.summary_records() == [record]
    conn = sqlite3.connect(path)
    try:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT body FROM summary_records "
            "WHERE namespace = ? AND session = ? ORDER BY at, seq",
            ("key-aaaa", "s"),
        ).fetchall()
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
        conn.commit()
    finally:
        conn.close()
    assert any("summary_records_session" in str(row) for row in plan), plan
    with pytest.raises(ConfigurationError, match=f"schema version {SCHEMA_VERSION + 1}"):
        SQLiteStore(path)


def test_redis_keeps_a_sessions_newest_records_and_the_most_recent_sessions(
    redis_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert redis_activity.MAX_SUMMARY_RECORDS_PER_SESSION == 100
    monkeypatch.setattr(redis_activity, "MAX_SUMMARY_RECORDS_PER_SESSION", 3)
    monkeypatch.setattr(redis_activity, "MAX_SESSIONS", 2)
    prefix = f"bound-{uuid.uuid4().hex}:"
    with RedisStore(redis_server.url, prefix=prefix) as store:
        store.record_summaries([summary_record("s1", 10.0 + i, i) for i in range(4)])
        store.record_summaries([summary_record("s1", 14.0, 4)])
        assert [r.start for r in store.summary_records("key-aaaa", "s1")] == [2, 3, 4]
        store.record_summaries([summary_record("s2", 20.0, 0)])
        store.record_summaries(
            [summary_record("s3", 21.0, 0, namespace="key-bbbb")]
        )  # s1, least recent, goes with its records
        assert [r.session for r in store.summary_records()] == ["s2", "s3"]
        assert store.summary_records(session="s1") == []
        keys = set(store._redis.scan_iter(f"{prefix}*"))
        assert keys == {
            f"{prefix}sum:key-aaaa:s2",
            f"{prefix}sum:key-bbbb:s3",
            f"{prefix}sums",
            f"{prefix}sums:key-aaaa",
            f"{prefix}sums:key-bbbb",
        }
        assert store._redis.zrange(f"{prefix}sums:key-aaaa", 0, -1) == ["key-aaaa:s2"]
