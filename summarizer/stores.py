"""Where checkpoints live between requests: in memory, or in a SQLite file that survives restarts.

Invariants every store keeps:

- a checkpoint is written whole or not at all (one transaction per ``put``), and reads back equal
  to what was written (it is stored as its own JSON), so rewrites stay byte-identical;
- rows are scoped by ``namespace``: ``get``, ``find_latest`` and ``list_session`` never return
  another namespace's checkpoint. A store holds only the namespace hash the caller gives it, never
  a credential;
- every method is safe to call from several threads; ``SQLiteStore`` also from several processes;
- a *lease* per session (``try_lease``/``release_lease``) lets one compaction run at a time for a
  session across every process sharing the store; an expired lease (its holder died) is taken over.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from .checkpoints import Checkpoint
from .errors import ConfigurationError

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "MemoryStore",
    "SQLiteStore",
    "Store",
    "open_store",
    "prefix_candidates",
]


@runtime_checkable
class Store(Protocol):
    """Persistence for checkpoints, scoped by namespace."""

    def put(self, checkpoint: Checkpoint) -> None:
        """Save ``checkpoint`` atomically; saving the same (namespace, id) again replaces it."""
        ...

    def get(self, namespace: str, checkpoint_id: str) -> Checkpoint | None:
        """The checkpoint with this id in ``namespace``, or None."""
        ...

    def find_latest(self, namespace: str, prefix_hashes: Mapping[str, int]) -> Checkpoint | None:
        """The checkpoint whose basis is among ``prefix_hashes`` (hash -> count).

        Only applicable checkpoints with ``prefix_hashes[basis_hash] == basis_count`` match; the
        largest ``basis_count`` wins, then the newest ``created_at``, then the latest written.
        """
        ...

    def list_session(self, namespace: str, session: str) -> list[Checkpoint]:
        """Every checkpoint of a session, oldest first."""
        ...

    def update_reported(
        self,
        namespace: str,
        checkpoint_id: str,
        *,
        reported_tokens_after: int | None = None,
        reported_tokens_before: int | None = None,
    ) -> None:
        """Record provider-reported token counts (None leaves a field as is; unknown id: no-op)."""
        ...

    def generation(self) -> int | None:
        """A number that changes whenever anything is written to the store, by this process or
        another; None when the store cannot tell (callers then assume every call changes it).

        It lets a caller that found no checkpoint for some prefixes skip asking again.
        """
        ...

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the session's compaction lease for ``owner`` until ``ttl_s`` from now;
        False while another owner holds an unexpired one."""
        ...

    def release_lease(self, namespace: str, session: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it (otherwise nothing happens)."""
        ...

    def close(self) -> None:
        """Release resources; later calls raise ``ValueError``. Closing twice is harmless."""
        ...

    def __enter__(self) -> Self:
        """The store itself."""
        ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the store."""
        ...


def prefix_candidates(chain: Sequence[str], start: int = 0) -> dict[str, int]:
    """The ``find_latest`` argument for a prefix chain: ``{chain[i]: i + 1}`` for ``i >= start``
    (a caller that knows a checkpoint covering ``start`` messages asks only for longer ones)."""
    return {chain[index]: index + 1 for index in range(start, len(chain))}


@dataclass(frozen=True, slots=True)
class _Row:
    """What ``find_latest`` ranks by, without parsing the checkpoint."""

    covered_count: int
    created_at: float
    seq: int

    @property
    def rank(self) -> tuple[int, float, int]:
        return (self.covered_count, self.created_at, self.seq)


def _batches(prefix_hashes: Mapping[str, int], size: int) -> Iterable[list[tuple[str, int]]]:
    """Candidates by descending count, in batches, so a search can stop at the first hits."""
    items = sorted(prefix_hashes.items(), key=lambda item: item[1], reverse=True)
    for start in range(0, len(items), size):
        yield items[start : start + size]


class _Closable:
    """Context-manager support and the closed check shared by both stores."""

    _closed: bool = False

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("checkpoint store is closed")

    def close(self) -> None:
        """Release resources; later calls raise ``ValueError``. Closing twice is harmless."""
        self._closed = True

    def __enter__(self) -> Self:
        """The store itself."""
        self._check_open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the store."""
        self.close()


class MemoryStore(_Closable):
    """Checkpoints in this process's memory, lost on exit (library mode's default).

    Each checkpoint is kept as its JSON and parsed on read, exactly like ``SQLiteStore``, so a
    caller mutating a checkpoint it put or got never alters the stored one.
    """

    def __init__(self) -> None:
        """An empty store."""
        self._lock = threading.Lock()
        self._seq = 0
        self._writes = 0
        # (namespace, id) -> (row, session, covered_prefix_hash, json)
        self._rows: dict[tuple[str, str], tuple[_Row, str, str, str]] = {}
        self._by_prefix: dict[tuple[str, str], set[str]] = {}
        self._leases: dict[tuple[str, str], tuple[str, float]] = {}

    def put(self, checkpoint: Checkpoint) -> None:
        """Save ``checkpoint``; saving the same (namespace, id) again replaces it."""
        body = checkpoint.model_dump_json()  # may raise: nothing is changed yet
        key = (checkpoint.namespace, checkpoint.id)
        with self._lock:
            self._check_open()
            old = self._rows.get(key)
            if old is None:
                self._seq += 1
                seq = self._seq
            else:
                seq = old[0].seq
                self._by_prefix[(key[0], old[2])].discard(key[1])
            # A record that may not be applied is kept under a basis no chain can produce.
            basis = checkpoint.basis_hash if checkpoint.applicable else ""
            row = _Row(checkpoint.basis_count, checkpoint.created_at, seq)
            self._rows[key] = (row, checkpoint.session, basis, body)
            self._by_prefix.setdefault((key[0], basis), set()).add(key[1])
            self._writes += 1

    def generation(self) -> int | None:
        """Changes with every write (see ``Store``)."""
        with self._lock:
            return self._writes

    def get(self, namespace: str, checkpoint_id: str) -> Checkpoint | None:
        """The checkpoint with this id in ``namespace``, or None."""
        with self._lock:
            self._check_open()
            entry = self._rows.get((namespace, checkpoint_id))
        return None if entry is None else Checkpoint.model_validate_json(entry[3])

    def find_latest(self, namespace: str, prefix_hashes: Mapping[str, int]) -> Checkpoint | None:
        """The best checkpoint whose basis is among ``prefix_hashes`` (see ``Store``)."""
        best: tuple[_Row, str] | None = None
        with self._lock:
            self._check_open()
            for digest, count in prefix_hashes.items():
                for checkpoint_id in self._by_prefix.get((namespace, digest), ()):
                    entry = self._rows[(namespace, checkpoint_id)]
                    row = entry[0]
                    if row.covered_count == count and (best is None or row.rank > best[0].rank):
                        best = (row, entry[3])
        return None if best is None else Checkpoint.model_validate_json(best[1])

    def list_session(self, namespace: str, session: str) -> list[Checkpoint]:
        """Every checkpoint of a session, oldest first."""
        with self._lock:
            self._check_open()
            found = [
                (row, body)
                for (ns, _), (row, sess, _, body) in self._rows.items()
                if ns == namespace and sess == session
            ]
        found.sort(key=lambda item: (item[0].created_at, item[0].seq))
        return [Checkpoint.model_validate_json(body) for _, body in found]

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
        key = (namespace, checkpoint_id)
        with self._lock:
            self._check_open()
            entry = self._rows.get(key)
            if entry is None or not update:
                return
            checkpoint = Checkpoint.model_validate_json(entry[3]).model_copy(update=update)
            self._rows[key] = (entry[0], entry[1], entry[2], checkpoint.model_dump_json())
            self._writes += 1

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the session's compaction lease (see ``Store``)."""
        now = time.time()
        with self._lock:
            self._check_open()
            held = self._leases.get((namespace, session))
            if held is not None and held[0] != owner and held[1] > now:
                return False
            self._leases[(namespace, session)] = (owner, now + ttl_s)
            return True

    def release_lease(self, namespace: str, session: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it."""
        with self._lock:
            held = self._leases.get((namespace, session))
            if held is not None and held[0] == owner:
                del self._leases[(namespace, session)]

    def close(self) -> None:
        """Drop every checkpoint; later calls raise ``ValueError``."""
        with self._lock:
            self._closed = True
            self._rows.clear()
            self._by_prefix.clear()
            self._leases.clear()


def _reported_update(after: int | None, before: int | None) -> dict[str, Any]:
    update: dict[str, Any] = {}
    if after is not None:
        update["reported_tokens_after"] = after
    if before is not None:
        update["reported_tokens_before"] = before
    return update


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
)
SCHEMA_VERSION = len(MIGRATIONS)
"""The schema version this code writes; a database with a higher one is refused."""

_BATCH = 500  # bound variables per query, well under SQLite's oldest limit of 999
_BUSY_TIMEOUT_S = 30.0


class SQLiteStore(_Closable):
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

    def put(self, checkpoint: Checkpoint) -> None:
        """Save ``checkpoint`` in one transaction; the same (namespace, id) again replaces it."""
        body = checkpoint.model_dump_json()  # may raise: nothing is written yet
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
                self._conn.execute(sql, params)
            self._writes += 1

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
        return None if row is None else Checkpoint.model_validate_json(row[0])

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
        return None if body is None else Checkpoint.model_validate_json(body[0])

    def list_session(self, namespace: str, session: str) -> list[Checkpoint]:
        """Every checkpoint of a session, oldest first."""
        with self._lock:
            self._check_open()
            rows = self._conn.execute(
                "SELECT body FROM checkpoints WHERE namespace = ? AND session = ? "
                "ORDER BY created_at, seq",
                (namespace, session),
            ).fetchall()
        return [Checkpoint.model_validate_json(body) for (body,) in rows]

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
                    checkpoint = Checkpoint.model_validate_json(row[0]).model_copy(update=update)
                    self._conn.execute(
                        "UPDATE checkpoints SET body = ? WHERE namespace = ? AND id = ?",
                        (checkpoint.model_dump_json(), namespace, checkpoint_id),
                    )
            self._writes += 1

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> bool:
        """Take or renew the session's compaction lease, in one write transaction, so two
        processes never both hold it (see ``Store``)."""
        now = time.time()
        with self._lock:
            self._check_open()
            with self._transaction():
                row = self._conn.execute(
                    "SELECT owner, expires_at FROM leases WHERE namespace = ? AND session = ?",
                    (namespace, session),
                ).fetchone()
                if row is not None and row[0] != owner and row[1] > now:
                    return False
                self._conn.execute(
                    "INSERT OR REPLACE INTO leases (namespace, session, owner, expires_at) "
                    "VALUES (?, ?, ?, ?)",
                    (namespace, session, owner, now + ttl_s),
                )
                return True

    def release_lease(self, namespace: str, session: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it."""
        with self._lock:
            if self._closed:
                return
            with self._transaction():
                self._conn.execute(
                    "DELETE FROM leases WHERE namespace = ? AND session = ? AND owner = ?",
                    (namespace, session, owner),
                )

    def close(self) -> None:
        """Close the connection; later calls raise ``ValueError``. Closing twice is harmless."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._conn.close()


def open_store(spec: str | os.PathLike[str] | None) -> Store:
    """``MemoryStore()`` for None, else ``SQLiteStore(spec)`` (a path, or ``":memory:"``)."""
    if spec is None:
        return MemoryStore()
    if not os.fspath(spec):
        raise ConfigurationError("the checkpoint store path is empty; pass a path or None")
    return SQLiteStore(spec)
