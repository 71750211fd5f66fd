"""``SQLiteStore``: checkpoints in a SQLite file (WAL mode), shared by threads and processes."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..core.checkpoints import Checkpoint
from ..core.errors import ConfigurationError, LeaseLost
from .base import (
    COMPACTION_SECRET,
    _batches,
    _Closable,
    _fold,
    _grant,
    _reported_update,
    _Row,
    new_secret,
)
from .compaction_asks import ASKS_MIGRATION, SQLiteAsks
from .sqlite_activity import ACTIVITY_MIGRATION, SUMMARIES_MIGRATION, SQLiteActivity

# Migration ``i`` brings the schema from version ``i`` to ``i + 1`` (``PRAGMA user_version``).
# Append new migrations; never edit a released one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """
        CREATE TABLE checkpoints (
            seq INTEGER PRIMARY KEY,
            namespace TEXT NOT NULL,
            id TEXT NOT NULL,
            session TEXT NOT NULL,
            covered_prefix_hash TEXT NOT NULL,
            covered_count INTEGER NOT NULL,
            created_at REAL NOT NULL,
            body TEXT NOT NULL,
            UNIQUE (namespace, id)
        )
        """,
        "CREATE INDEX checkpoints_prefix ON checkpoints (namespace, covered_prefix_hash)",
        "CREATE INDEX checkpoints_session ON checkpoints (namespace, session, created_at, seq)",
    ),
    # 2: checkpoints match by the exact conversation they were computed from (their basis), not
    # by a covered prefix; version-1 rows keep a NULL basis and are never applied again. Leases
    # give one compaction per session across processes.
    (
        "ALTER TABLE checkpoints ADD COLUMN basis_hash TEXT",
        "ALTER TABLE checkpoints ADD COLUMN basis_count INTEGER",
        "CREATE INDEX checkpoints_basis ON checkpoints (namespace, basis_hash)",
        "DROP INDEX checkpoints_prefix",
        """
        CREATE TABLE leases (
            namespace TEXT NOT NULL,
            session TEXT NOT NULL,
            owner TEXT NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (namespace, session)
        )
        """,
    ),
    # 3: what the proxy served (request records, recorded conversations) for `summarizer
    # sessions`, `show`, `export` and /ui; the calibration table replicas share; and each
    # lease's fencing token (a released lease keeps its row, with no owner, for the token).
    (
        *ACTIVITY_MIGRATION,
        "ALTER TABLE leases ADD COLUMN token INTEGER NOT NULL DEFAULT 0",
        """
        CREATE TABLE calibration (
            namespace TEXT NOT NULL,
            model TEXT NOT NULL,
            reported REAL NOT NULL,
            estimated REAL NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (namespace, model)
        )
        """,
    ),
    # 4: the server's secrets every process shares (the key compaction items are signed with).
    ("CREATE TABLE secrets (name TEXT PRIMARY KEY, value BLOB NOT NULL)",),
    # 5: sessions' pending asks for a compaction (POST /v1/summarizer/sessions/{id}/compact).
    ASKS_MIGRATION,
    # 6: each compaction's summary records (requests as sent, answers, verdicts), kept with
    # `serve --record` for `summarizer export`.
    SUMMARIES_MIGRATION,
)
SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes; a database with a higher one is refused."""

_BATCH = 500  # bound variables per query, well under SQLite's oldest limit of 999
_BUSY_TIMEOUT_S = 30.0


class SQLiteStore(SQLiteActivity, SQLiteAsks, _Closable):
    """Checkpoints in a SQLite file (WAL mode), shared by threads and processes.

    ``path`` may be ``":memory:"``. Missing parent directories are created; a new database file
    is created readable by its owner only, since it holds conversation text.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        """Open (creating and migrating if needed) the database at ``path``."""
        self.path = os.fspath(path)
        if self.path != ":memory:":
            self.path = os.path.expanduser(self.path)
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
        self._lock = threading.Lock()
        self._writes = 0
        self._conn = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_S * 1000)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            # In WAL mode a commit then reaches the disk at the next checkpoint, not at once: a
            # crash of the process loses nothing, one of the machine at most the last commits
            # (never a half-written one). Syncing each commit held the store's lock through a
            # disk sync per request, which every request's locating waits on.
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    @property
    def schema_version(self) -> int:
        """The database's ``PRAGMA user_version``."""
        with self._lock:
            self._check_open()
            return self._user_version()

    def _user_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _refuse_newer(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise ConfigurationError(
                f"checkpoint database {self.path!r} has schema version {version}, newer than "
                f"version {SCHEMA_VERSION} that this summarizer knows; upgrade summarizer or use "
                "another store path"
            )

    def _migrate(self) -> None:
        version = self._user_version()
        self._refuse_newer(version)
        if version == SCHEMA_VERSION:
            return
        with self._transaction():  # one migrator at a time across processes
            version = self._user_version()
            self._refuse_newer(version)
            for steps in MIGRATIONS[version:]:
                for statement in steps:
                    self._conn.execute(statement)
                version += 1
                self._conn.execute(f"PRAGMA user_version = {version}")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One immediate (write-locking) transaction: everything inside commits, or nothing."""
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
            self._conn.execute("COMMIT")
        except BaseException:
            if self._conn.in_transaction:  # a failed COMMIT can leave it open
                self._conn.execute("ROLLBACK")
            raise

    def put(self, checkpoint: Checkpoint, *, fence: int | None = None) -> None:
        """Save ``checkpoint`` in one transaction; the same (namespace, id) again replaces it
        (``LeaseLost`` for a ``fence`` older than the session's lease token)."""
        body = checkpoint.to_json()  # may raise: nothing is written yet
        applicable = checkpoint.applicable
        params = (
            checkpoint.namespace,
            checkpoint.id,
            checkpoint.session,
            # Version 1's NOT NULL columns, no longer read: they hold the basis too.
            checkpoint.basis_hash,
            checkpoint.basis_count,
            checkpoint.basis_hash if applicable else None,
            checkpoint.basis_count if applicable else None,
            checkpoint.created_at,
            body,
        )
        sql = """
            INSERT INTO checkpoints
                (namespace, id, session, covered_prefix_hash, covered_count, basis_hash,
                 basis_count, created_at, body)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            ON CONFLICT (namespace, id) DO UPDATE SET
                session = excluded.session,
                covered_prefix_hash = excluded.covered_prefix_hash,
                covered_count = excluded.covered_count,
                basis_hash = excluded.basis_hash,
                basis_count = excluded.basis_count,
                created_at = excluded.created_at,
                body = excluded.body
        """
        with self._lock:
            self._check_open()
            with self._transaction():
                if fence is not None:
                    self._check_fence(checkpoint.namespace, checkpoint.session, fence)
                self._conn.execute(sql, params)
            self._writes += 1

    def _check_fence(self, namespace: str, session: str, fence: int) -> None:
        row = self._conn.execute(
            "SELECT token FROM leases WHERE namespace = ? AND session = ?", (namespace, session)
        ).fetchone()
        current = int(row[0]) if row is not None else 0
        if current > fence:
            raise LeaseLost(namespace, session, fence, current)

    def generation(self) -> int | None:
        """Changes with every write, this connection's or another's (``PRAGMA data_version``
        tracks the others)."""
        with self._lock:
            self._check_open()
            (others,) = self._conn.execute("PRAGMA data_version").fetchone()
            return (int(others) << 40) + self._writes

    def get(self, namespace: str, checkpoint_id: str) -> Checkpoint | None:
        """The checkpoint with this id in ``namespace``, or None."""
        with self._lock:
            self._check_open()
            row = self._conn.execute(
                "SELECT body FROM checkpoints WHERE namespace = ? AND id = ?",
                (namespace, checkpoint_id),
            ).fetchone()
        return None if row is None else Checkpoint.from_json(row[0])

    def find_latest(self, namespace: str, prefix_hashes: Mapping[str, int]) -> Checkpoint | None:
        """The best checkpoint whose basis is among ``prefix_hashes`` (see ``Store``).

        Looks candidates up through the ``(namespace, basis_hash)`` index in batches,
        longest prefixes first, and stops once no later batch can beat the best match.
        """
        best: _Row | None = None
        with self._lock:
            self._check_open()
            for batch in _batches(prefix_hashes, _BATCH):
                if best is not None and best.covered_count > batch[0][1]:
                    break
                wanted = dict(batch)
                marks = ",".join("?" * len(batch))
                rows = self._conn.execute(
                    "SELECT basis_hash, basis_count, created_at, seq FROM checkpoints "
                    f"WHERE namespace = ? AND basis_hash IN ({marks})",
                    (namespace, *wanted),
                ).fetchall()
                for digest, count, created_at, seq in rows:
                    if wanted.get(digest) != count:
                        continue
                    row = _Row(count, created_at, seq)
                    if best is None or row.rank > best.rank:
                        best = row
            if best is None:
                return None
            body = self._conn.execute(
                "SELECT body FROM checkpoints WHERE seq = ?", (best.seq,)
            ).fetchone()
        return None if body is None else Checkpoint.from_json(body[0])

    def list_session(self, namespace: str, session: str) -> list[Checkpoint]:
        """Every checkpoint of a session, oldest first."""
        with self._lock:
            self._check_open()
            rows = self._conn.execute(
                "SELECT body FROM checkpoints WHERE namespace = ? AND session = ? "
                "ORDER BY created_at, seq",
                (namespace, session),
            ).fetchall()
        return [Checkpoint.from_json(body) for (body,) in rows]

    def update_reported(
        self,
        namespace: str,
        checkpoint_id: str,
        *,
        reported_tokens_after: int | None = None,
        reported_tokens_before: int | None = None,
    ) -> None:
        """Record provider-reported token counts (None leaves a field as is; unknown id: no-op)."""
        update = _reported_update(reported_tokens_after, reported_tokens_before)
        if not update:
            return
        with self._lock:
            self._check_open()
            with self._transaction():  # read-modify-write, safe across processes
                row = self._conn.execute(
                    "SELECT body FROM checkpoints WHERE namespace = ? AND id = ?",
                    (namespace, checkpoint_id),
                ).fetchone()
                if row is not None:
                    checkpoint = Checkpoint.from_json(row[0]).model_copy(update=update)
                    self._conn.execute(
                        "UPDATE checkpoints SET body = ? WHERE namespace = ? AND id = ?",
                        (checkpoint.to_json(), namespace, checkpoint_id),
                    )
            self._writes += 1

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> int | None:
        """Take or renew the session's compaction lease, in one write transaction, so two
        processes never both hold it: its fencing token, or None (see ``Store``)."""
        now = time.time()
        with self._lock:
            self._check_open()
            with self._transaction():
                row = self._conn.execute(
                    "SELECT owner, expires_at, token FROM leases "
                    "WHERE namespace = ? AND session = ?",
                    (namespace, session),
                ).fetchone()
                holder, expires_at, token = row if row is not None else ("", 0.0, 0)
                granted = _grant(holder, expires_at, token, owner, now)
                if granted is not None:
                    self._conn.execute(
                        "INSERT OR REPLACE INTO leases (namespace, session, owner, expires_at, "
                        "token) VALUES (?, ?, ?, ?, ?)",
                        (namespace, session, owner, now + ttl_s, granted),
                    )
                return granted

    def release_lease(self, namespace: str, session: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it (the row stays, for its fencing token)."""
        with self._lock:
            if self._closed:
                return
            with self._transaction():
                self._conn.execute(
                    "UPDATE leases SET owner = '', expires_at = 0 "
                    "WHERE namespace = ? AND session = ? AND owner = ?",
                    (namespace, session, owner),
                )

    def fold_calibration(
        self, namespace: str, model: str, *, reported: float, estimated: float, alpha: float
    ) -> tuple[float, float]:
        """Fold one observation into ``(namespace, model)``'s sums in one write transaction,
        so concurrent processes never lose one (see ``Store``)."""
        with self._lock:
            self._check_open()
            with self._transaction():
                row = self._conn.execute(
                    "SELECT reported, estimated FROM calibration WHERE namespace = ? AND model = ?",
                    (namespace, model),
                ).fetchone()
                sums = _fold(row, reported, estimated, alpha)
                self._conn.execute(
                    "INSERT OR REPLACE INTO calibration "
                    "(namespace, model, reported, estimated, updated_at) VALUES (?, ?, ?, ?, ?)",
                    (namespace, model, *sums, time.time()),
                )
            return sums

    def read_calibration(self, namespace: str, model: str) -> tuple[float, float] | None:
        """The calibration sums of ``(namespace, model)``, or None."""
        with self._lock:
            self._check_open()
            row = self._conn.execute(
                "SELECT reported, estimated FROM calibration WHERE namespace = ? AND model = ?",
                (namespace, model),
            ).fetchone()
        return None if row is None else (float(row[0]), float(row[1]))

    def compaction_secret(self) -> bytes:
        """The secret compaction items are signed with: made once per database (the first
        process to ask writes it, in a write transaction), the same for every process after."""
        with self._lock:
            self._check_open()
            with self._transaction():
                self._conn.execute(
                    "INSERT OR IGNORE INTO secrets (name, value) VALUES (?, ?)",
                    (COMPACTION_SECRET, new_secret()),
                )
                (value,) = self._conn.execute(
                    "SELECT value FROM secrets WHERE name = ?", (COMPACTION_SECRET,)
                ).fetchone()
        return bytes(value)

    def close(self) -> None:
        """Close the connection; later calls raise ``ValueError``. Closing twice is harmless."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()
