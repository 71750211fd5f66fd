"""``MemoryStore``: checkpoints in this process's memory, lost on exit."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence

from ..core.activity import Recording, RequestRecord, SessionRow, roll_up
from ..core.checkpoints import Checkpoint
from ..core.errors import LeaseLost
from ..core.summary_records import SummaryRecord
from .base import _Closable, _fold, _grant, _reported_update, _Row, new_secret
from .compaction_asks import CompactionAsk, MemoryAsks

MAX_MEMORY_RECORDS = 100_000
"""Request records a ``MemoryStore`` keeps (the oldest are dropped first)."""
MAX_MEMORY_CALIBRATIONS = 4096
"""Calibrated (namespace, model) pairs a ``MemoryStore`` keeps (least recently observed go)."""


class MemoryStore(MemoryAsks, _Closable):
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
        # (namespace, session) -> (owner, expires_at, fencing token); a released lease keeps
        # its token with no owner.
        self._leases: dict[tuple[str, str], tuple[str, float, int]] = {}
        self._calibration: dict[tuple[str, str], tuple[float, float]] = {}
        self._requests: deque[RequestRecord] = deque(maxlen=MAX_MEMORY_RECORDS)
        self._recordings: dict[tuple[str, str], Recording] = {}
        self._summaries: list[SummaryRecord] = []
        self._secret = new_secret()
        self._asks: dict[tuple[str, str], CompactionAsk] = {}

    def compaction_secret(self) -> bytes:
        """The secret compaction items are signed with: random, this process's own."""
        return self._secret

    def put(self, checkpoint: Checkpoint, *, fence: int | None = None) -> None:
        """Save ``checkpoint``; saving the same (namespace, id) again replaces it (``LeaseLost``
        for a ``fence`` older than the session's lease token)."""
        body = checkpoint.to_json()  # may raise: nothing is changed yet
        key = (checkpoint.namespace, checkpoint.id)
        with self._lock:
            self._check_open()
            if fence is not None:
                held = self._leases.get((checkpoint.namespace, checkpoint.session))
                current = held[2] if held is not None else 0
                if current > fence:
                    raise LeaseLost(checkpoint.namespace, checkpoint.session, fence, current)
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
        return None if entry is None else Checkpoint.from_json(entry[3])

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
        return None if best is None else Checkpoint.from_json(best[1])

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
        return [Checkpoint.from_json(body) for _, body in found]

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
            checkpoint = Checkpoint.from_json(entry[3]).model_copy(update=update)
            self._rows[key] = (entry[0], entry[1], entry[2], checkpoint.to_json())
            self._writes += 1

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> int | None:
        """Take or renew the session's compaction lease: its fencing token, or None (see
        ``Store``)."""
        now = time.time()
        with self._lock:
            self._check_open()
            holder, expires_at, token = self._leases.get((namespace, session), ("", 0.0, 0))
            granted = _grant(holder, expires_at, token, owner, now)
            if granted is not None:
                self._leases[(namespace, session)] = (owner, now + ttl_s, granted)
            return granted

    def release_lease(self, namespace: str, session: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it (its fencing token is kept)."""
        with self._lock:
            held = self._leases.get((namespace, session))
            if held is not None and held[0] == owner:
                self._leases[(namespace, session)] = ("", 0.0, held[2])

    def fold_calibration(
        self, namespace: str, model: str, *, reported: float, estimated: float, alpha: float
    ) -> tuple[float, float]:
        """Fold one observation into ``(namespace, model)``'s sums (see ``Store``)."""
        with self._lock:
            self._check_open()
            sums = _fold(self._calibration.get((namespace, model)), reported, estimated, alpha)
            self._calibration.pop((namespace, model), None)
            self._calibration[(namespace, model)] = sums  # newest last
            while len(self._calibration) > MAX_MEMORY_CALIBRATIONS:
                del self._calibration[next(iter(self._calibration))]
            return sums

    def read_calibration(self, namespace: str, model: str) -> tuple[float, float] | None:
        """The calibration sums of ``(namespace, model)``, or None."""
        with self._lock:
            self._check_open()
            return self._calibration.get((namespace, model))

    # -- activity (see ``ActivityLog``) ----------------------------------------------------------

    def log_request(self, record: RequestRecord) -> None:
        """Append one request's record (the oldest go past ``MAX_MEMORY_RECORDS``)."""
        with self._lock:
            self._check_open()
            self._requests.append(record)

    def log_requests(self, records: Sequence[RequestRecord]) -> None:
        """Append several records at once."""
        with self._lock:
            self._check_open()
            self._requests.extend(records)

    def list_sessions(
        self, namespace: str | None = None, *, since: float | None = None
    ) -> list[SessionRow]:
        """Each session's roll-up, newest activity first."""
        with self._lock:
            self._check_open()
            records = [r for r in self._requests if namespace is None or r.namespace == namespace]
        rows = roll_up(records)
        return [row for row in rows if since is None or row.last_seen >= since]

    def session_requests(self, namespace: str | None, session: str) -> list[RequestRecord]:
        """A session's request records, oldest first."""
        with self._lock:
            self._check_open()
            found = [
                r
                for r in self._requests
                if r.session == session and (namespace is None or r.namespace == namespace)
            ]
        return sorted(found, key=lambda r: r.at)

    def record_conversation(self, recording: Recording) -> None:
        """Keep ``recording`` as its session's latest conversation."""
        with self._lock:
            self._check_open()
            self._recordings[(recording.namespace, recording.session)] = recording

    def recordings(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[Recording]:
        """The recorded conversations, oldest first."""
        with self._lock:
            self._check_open()
            found = [
                r
                for r in self._recordings.values()
                if (namespace is None or r.namespace == namespace)
                and (session is None or r.session == session)
            ]
        return sorted(found, key=lambda r: r.at)

    def record_summaries(self, records: Sequence[SummaryRecord]) -> None:
        """Append the summary records of a compaction."""
        with self._lock:
            self._check_open()
            self._summaries.extend(records)

    def summary_records(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[SummaryRecord]:
        """The kept summary records, oldest first (by ``at``, then as written)."""
        with self._lock:
            self._check_open()
            found = [
                r
                for r in self._summaries
                if (namespace is None or r.namespace == namespace)
                and (session is None or r.session == session)
            ]
        return sorted(found, key=lambda r: r.at)  # stable: ties keep the written order

    def close(self) -> None:
        """Drop everything; later calls raise ``ValueError``."""
        with self._lock:
            self._closed = True
            self._rows.clear()
            self._by_prefix.clear()
            self._leases.clear()
            self._calibration.clear()
            self._requests.clear()
            self._recordings.clear()
            self._summaries.clear()
