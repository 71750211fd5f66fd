"""A session's "compact at the next request" (``POST /v1/summarizer/sessions/{id}/compact``),
kept in the store so that whichever replica serves the session's next request takes it up.

An ask is read by every request of its session until one compaction made for it succeeds, and
is then cleared only if it is still the same ask (``asked_at``): an ask made meanwhile stands.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class CompactionAsk:
    """A session's pending ask: its instructions for the summary (None: none), and when."""

    instructions: str | None
    asked_at: float


@runtime_checkable
class CompactionAsks(Protocol):
    """A store that keeps sessions' pending asks for a compaction."""

    def ask_compaction(self, namespace: str, session: str, instructions: str | None) -> None:
        """Ask for a compaction at the session's next request (replacing a pending ask)."""
        ...

    def compaction_ask(self, namespace: str, session: str) -> CompactionAsk | None:
        """The session's pending ask, or None."""
        ...

    def clear_compaction_ask(self, namespace: str, session: str, asked_at: float) -> None:
        """Clear the session's ask if it is still the one made at ``asked_at``."""
        ...


ASKS_MIGRATION = (
    """
    CREATE TABLE compaction_asks (
        namespace TEXT NOT NULL,
        session TEXT NOT NULL,
        instructions TEXT,
        asked_at REAL NOT NULL,
        PRIMARY KEY (namespace, session)
    )
    """,
)
"""Schema version 5's table (see ``sqlite.MIGRATIONS``)."""


class SQLiteAsks:
    """``CompactionAsks`` over the SQLite store's connection (mixed into ``SQLiteStore``)."""

    _conn: sqlite3.Connection
    _lock: threading.Lock
    _check_open: Callable[[], None]
    _transaction: Callable[[], AbstractContextManager[None]]

    def ask_compaction(self, namespace: str, session: str, instructions: str | None) -> None:
        """Ask for a compaction at the session's next request (replacing a pending ask)."""
        with self._lock:
            self._check_open()
            with self._transaction():
                self._conn.execute(
                    "INSERT OR REPLACE INTO compaction_asks VALUES (?, ?, ?, ?)",
                    (namespace, session, instructions, time.time()),
                )

    def compaction_ask(self, namespace: str, session: str) -> CompactionAsk | None:
        """The session's pending ask, or None."""
        with self._lock:
            self._check_open()
            row = self._conn.execute(
                "SELECT instructions, asked_at FROM compaction_asks "
                "WHERE namespace = ? AND session = ?",
                (namespace, session),
            ).fetchone()
        return None if row is None else CompactionAsk(row[0], float(row[1]))

    def clear_compaction_ask(self, namespace: str, session: str, asked_at: float) -> None:
        """Clear the session's ask if it is still the one made at ``asked_at``."""
        with self._lock:
            self._check_open()
            with self._transaction():
                self._conn.execute(
                    "DELETE FROM compaction_asks "
                    "WHERE namespace = ? AND session = ? AND asked_at = ?",
                    (namespace, session, asked_at),
                )


class MemoryAsks:
    """``CompactionAsks`` in this process's memory (mixed into ``MemoryStore``)."""

    _lock: threading.Lock
    _check_open: Callable[[], None]
    _asks: dict[tuple[str, str], CompactionAsk]

    def ask_compaction(self, namespace: str, session: str, instructions: str | None) -> None:
        """Ask for a compaction at the session's next request (replacing a pending ask)."""
        with self._lock:
            self._check_open()
            self._asks[(namespace, session)] = CompactionAsk(instructions, time.time())

    def compaction_ask(self, namespace: str, session: str) -> CompactionAsk | None:
        """The session's pending ask, or None."""
        with self._lock:
            self._check_open()
            return self._asks.get((namespace, session))

    def clear_compaction_ask(self, namespace: str, session: str, asked_at: float) -> None:
        """Clear the session's ask if it is still the one made at ``asked_at``."""
        with self._lock:
            self._check_open()
            ask = self._asks.get((namespace, session))
            if ask is not None and ask.asked_at == asked_at:
                del self._asks[(namespace, session)]


CLEAR_IF_SAME = """
-- KEYS: the ask; ARGV: asked_at, as it was written
local body = redis.call('GET', KEYS[1])
if body and cjson.decode(body)['asked_at'] == ARGV[1] then
  redis.call('DEL', KEYS[1])
end
return 1
"""


class RedisAsks:
    """``CompactionAsks`` in Redis (mixed into ``RedisStore``): one JSON string per session."""

    _redis: Any
    _key: Callable[..., str]
    _guard: Callable[[], AbstractContextManager[None]]
    _run: Callable[[str, list[str], list[Any]], Any]

    def ask_compaction(self, namespace: str, session: str, instructions: str | None) -> None:
        """Ask for a compaction at the session's next request (replacing a pending ask)."""
        # The time as text, so the clear compares it exactly (Lua numbers are doubles).
        body = json.dumps({"instructions": instructions, "asked_at": repr(time.time())})
        with self._guard():
            self._redis.set(self._key("ask", namespace, session), body)

    def compaction_ask(self, namespace: str, session: str) -> CompactionAsk | None:
        """The session's pending ask, or None."""
        with self._guard():
            body = self._redis.get(self._key("ask", namespace, session))
        if body is None:
            return None
        data = json.loads(body)
        return CompactionAsk(data.get("instructions"), float(data["asked_at"]))

    def clear_compaction_ask(self, namespace: str, session: str, asked_at: float) -> None:
        """Clear the session's ask if it is still the one made at ``asked_at``."""
        self._run("clear_ask", [self._key("ask", namespace, session)], [repr(asked_at)])
