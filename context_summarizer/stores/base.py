"""What every checkpoint store is: the ``Store`` protocol and the pieces both stores share."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from ..core.activity import Recording, RequestRecord, SessionRow
from ..core.checkpoints import Checkpoint
from ..core.summary_records import SummaryRecord


@runtime_checkable
class Store(Protocol):
    """Persistence for checkpoints, scoped by namespace."""

    def put(self, checkpoint: Checkpoint, *, fence: int | None = None) -> None:
        """Save ``checkpoint`` atomically; saving the same (namespace, id) again replaces it.

        ``fence``: the fencing token of the session lease the write is made under (from
        ``try_lease``). When the session's lease has since been granted to another owner (its
        token is newer), nothing is written and ``LeaseLost`` is raised.
        """
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

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> int | None:
        """Take or renew the session's compaction lease for ``owner`` until ``ttl_s`` from now:
        its fencing token, or None while another owner holds an unexpired one.

        The token (a positive int) grows by one each time the lease is granted while nobody
        held it unexpired, and is kept across releases; renewing one's own unexpired lease keeps
        it. A ``put`` carrying an older token than the session's is refused.
        """
        ...

    def release_lease(self, namespace: str, session: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it (otherwise nothing happens)."""
        ...

    def fold_calibration(
        self, namespace: str, model: str, *, reported: float, estimated: float, alpha: float
    ) -> tuple[float, float]:
        """Fold one observation into the shared calibration sums of ``(namespace, model)``
        atomically, ``sums = (1 - alpha) * sums + (reported, estimated)``; the new sums."""
        ...

    def read_calibration(self, namespace: str, model: str) -> tuple[float, float] | None:
        """The shared calibration sums (reported, estimated) of ``(namespace, model)``, or None
        before any observation."""
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


COMPACTION_SECRET = "compaction-hmac"
"""The name of the secret summarizer's compaction items are signed with."""


@runtime_checkable
class SecretKeeper(Protocol):
    """A store that keeps the server's secrets, the same for every process sharing it."""

    def compaction_secret(self) -> bytes:
        """The secret compaction items are signed with: created on first use (by whichever
        process asks first), then the same for every process and every restart."""
        ...


def new_secret() -> bytes:
    """A fresh random secret (32 bytes)."""
    return secrets.token_bytes(32)


@runtime_checkable
class ActivityLog(Protocol):
    """What a store keeps of the traffic it served: one ``RequestRecord`` per managed request
    and, when recording is on, each session's latest conversation and the ``SummaryRecord`` of
    every summary a compaction asked a model for.

    ``namespace=None`` in a read means every namespace: only the operator's own tools (the
    ``summarizer sessions`` command) read that way; the proxy always passes the caller's.
    """

    def log_request(self, record: RequestRecord) -> None:
        """Append one request's record."""
        ...

    def log_requests(self, records: Sequence[RequestRecord]) -> None:
        """Append several records at once (one transaction where the store has them)."""
        ...

    def list_sessions(
        self, namespace: str | None = None, *, since: float | None = None
    ) -> list[SessionRow]:
        """Each session's roll-up (of ``namespace``, or all), newest activity first; with
        ``since``, only sessions seen at or after it."""
        ...

    def session_requests(self, namespace: str | None, session: str) -> list[RequestRecord]:
        """A session's request records, oldest first (of every namespace for None)."""
        ...

    def record_conversation(self, recording: Recording) -> None:
        """Keep ``recording`` as its session's latest conversation (replacing the one before)."""
        ...

    def recordings(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[Recording]:
        """The recorded conversations (of ``namespace`` / ``session``, or all), oldest first."""
        ...

    def record_summaries(self, records: Sequence[SummaryRecord]) -> None:
        """Append the summary records of a compaction (recording on); a record is never
        replaced, even by one with the same checkpoint and start."""
        ...

    def summary_records(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[SummaryRecord]:
        """The kept summary records (of ``namespace`` / ``session``, or all), oldest first:
        by ``at``, then in the order they were written."""
        ...


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


def _reported_update(after: int | None, before: int | None) -> dict[str, Any]:
    update: dict[str, Any] = {}
    if after is not None:
        update["reported_tokens_after"] = after
    if before is not None:
        update["reported_tokens_before"] = before
    return update


def _grant(holder: str | None, expires_at: float, token: int, owner: str, now: float) -> int | None:
    """The fencing token ``owner`` gets for a session whose lease is held by ``holder`` until
    ``expires_at`` with ``token``: the same token to renew one's own unexpired lease, None while
    another owner holds one, else the next token."""
    if holder and expires_at > now:
        return token if holder == owner else None
    return token + 1


def _fold(
    sums: tuple[float, float] | None, reported: float, estimated: float, alpha: float
) -> tuple[float, float]:
    """``(1 - alpha) * sums + (reported, estimated)``: one calibration observation folded in."""
    old_reported, old_estimated = sums or (0.0, 0.0)
    keep = 1 - alpha
    return (keep * old_reported + reported, keep * old_estimated + estimated)
