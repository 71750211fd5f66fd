"""The SQLite store's activity log: request records, recorded conversations and summary records
(``ActivityLog``)."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..core.activity import Recording, RequestRecord, SessionRow
from ..core.summary_records import SummaryRecord

ACTIVITY_MIGRATION: tuple[str, ...] = (
    """
    CREATE TABLE requests (
        seq INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        session TEXT NOT NULL,
        at REAL NOT NULL,
        model TEXT NOT NULL,
        tokens_sent INTEGER NOT NULL,
        context_window INTEGER NOT NULL,
        reported_tokens INTEGER,
        cached_tokens INTEGER,
        compacted INTEGER NOT NULL,
        body TEXT NOT NULL
    )
    """,
    "CREATE INDEX requests_session ON requests (namespace, session, at, seq)",
    "CREATE INDEX requests_at ON requests (at)",
    """
    CREATE TABLE recordings (
        namespace TEXT NOT NULL,
        session TEXT NOT NULL,
        at REAL NOT NULL,
        body TEXT NOT NULL,
        PRIMARY KEY (namespace, session)
    )
    """,
)
"""Schema version 3's activity tables (see ``sqlite.MIGRATIONS``)."""

SUMMARIES_MIGRATION: tuple[str, ...] = (
    """
    CREATE TABLE summary_records (
        seq INTEGER PRIMARY KEY,
        namespace TEXT NOT NULL,
        session TEXT NOT NULL,
        at REAL NOT NULL,
        checkpoint_id TEXT NOT NULL,
        start INTEGER NOT NULL,
        body TEXT NOT NULL
    )
    """,
    "CREATE INDEX summary_records_session ON summary_records (namespace, session, at)",
)
"""Schema version 6's table of summary records (see ``sqlite.MIGRATIONS``)."""

_ROLL_UP = """
    SELECT g.namespace, g.session, r.model, g.requests, g.compactions, r.tokens_sent,
           g.peak, r.context_window, g.reported, g.cached, g.first_at, g.last_at
    FROM (
        SELECT namespace, session, COUNT(*) AS requests, SUM(compacted) AS compactions,
               MAX(tokens_sent) AS peak, SUM(COALESCE(reported_tokens, 0)) AS reported,
               SUM(COALESCE(cached_tokens, 0)) AS cached, MIN(at) AS first_at,
               MAX(at) AS last_at, MAX(seq) AS last_seq
        FROM requests {where}
        GROUP BY namespace, session
        {having}
    ) AS g JOIN requests AS r ON r.seq = g.last_seq
    ORDER BY g.last_at DESC
"""
_ROW_FIELDS = (
    "namespace",
    "session",
    "model",
    "requests",
    "compactions",
    "tokens_now",
    "tokens_peak",
    "window",
    "reported_tokens",
    "cached_tokens",
    "first_seen",
    "last_seen",
)


class SQLiteActivity:
    """``ActivityLog`` over the store's connection (mixed into ``SQLiteStore``)."""

    _conn: sqlite3.Connection
    _lock: threading.Lock
    _check_open: Callable[[], None]
    _transaction: Callable[[], AbstractContextManager[None]]

    def log_request(self, record: RequestRecord) -> None:
        """Append one request's record."""
        self.log_requests([record])

    def log_requests(self, records: Sequence[RequestRecord]) -> None:
        """Append several records in one transaction."""
        rows = [
            (
                record.namespace,
                record.session,
                record.at,
                record.model,
                record.tokens_sent,
                record.window,
                record.reported_tokens,
                record.cached_tokens,
                int(record.compacted),
                record.model_dump_json(),
            )
            for record in records
        ]
        if not rows:
            return
        with self._lock:
            self._check_open()
            with self._transaction():
                self._conn.executemany(
                    "INSERT INTO requests (namespace, session, at, model, tokens_sent, "
                    "context_window, reported_tokens, cached_tokens, compacted, body) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )

    def list_sessions(
        self, namespace: str | None = None, *, since: float | None = None
    ) -> list[SessionRow]:
        """Each session's roll-up, newest activity first (one grouped query)."""
        params: list[Any] = []
        where = having = ""
        if namespace is not None:
            where = "WHERE namespace = ?"
            params.append(namespace)
        if since is not None:
            having = "HAVING MAX(at) >= ?"
            params.append(since)
        with self._lock:
            self._check_open()
            rows = self._conn.execute(
                _ROLL_UP.format(where=where, having=having), params
            ).fetchall()
        return [SessionRow(**dict(zip(_ROW_FIELDS, row, strict=True))) for row in rows]

    def session_requests(self, namespace: str | None, session: str) -> list[RequestRecord]:
        """A session's request records, oldest first."""
        bodies = self._bodies("requests", namespace, session, "at, seq")
        return [RequestRecord.model_validate_json(body) for body in bodies]

    def record_conversation(self, recording: Recording) -> None:
        """Keep ``recording`` as its session's latest conversation."""
        body = recording.model_dump_json()
        with self._lock:
            self._check_open()
            with self._transaction():
                self._conn.execute(
                    "INSERT OR REPLACE INTO recordings (namespace, session, at, body) "
                    "VALUES (?, ?, ?, ?)",
                    (recording.namespace, recording.session, recording.at, body),
                )

    def recordings(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[Recording]:
        """The recorded conversations, oldest first."""
        bodies = self._bodies("recordings", namespace, session, "at")
        return [Recording.model_validate_json(body) for body in bodies]

    def record_summaries(self, records: Sequence[SummaryRecord]) -> None:
        """Append the summary records of a compaction, in one transaction."""
        rows = [
            (r.namespace, r.session, r.at, r.checkpoint_id, r.start, r.model_dump_json())
            for r in records
        ]
        if not rows:
            return
        with self._lock:
            self._check_open()
            with self._transaction():
                self._conn.executemany(
                    "INSERT INTO summary_records (namespace, session, at, checkpoint_id, start, "
                    "body) VALUES (?, ?, ?, ?, ?, ?)",
                    rows,
                )

    def summary_records(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[SummaryRecord]:
        """The kept summary records, oldest first (by ``at``, then as written)."""
        bodies = self._bodies("summary_records", namespace, session, "at, seq")
        return [SummaryRecord.model_validate_json(body) for body in bodies]

    def _bodies(
        self, table: str, namespace: str | None, session: str | None, order: str
    ) -> list[str]:
        """The ``body`` column of ``table``'s rows of ``namespace`` and ``session`` (None: any),
        by ``order``."""
        clauses, params = [], []
        if namespace is not None:
            clauses.append("namespace = ?")
            params.append(namespace)
        if session is not None:
            clauses.append("session = ?")
            params.append(session)
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._lock:
            self._check_open()
            rows = self._conn.execute(
                f"SELECT body FROM {table}{where} ORDER BY {order}", params
            ).fetchall()
        return [body for (body,) in rows]
