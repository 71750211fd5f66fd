"""The Redis store's activity log (``ActivityLog``), bounded:

- ``req:{ns}:{session}``: a session's newest ``MAX_RECORDS_PER_SESSION`` request records (a list
  trimmed on every append); ``roll:{ns}:{session}``: its roll-up, updated by the same script, so
  ``summarizer sessions`` still counts every request the list no longer holds;
- ``active`` and ``active:{ns}``: sessions by last activity; past ``MAX_SESSIONS`` the least
  recently active session is dropped with its records and roll-up;
- ``rec:{ns}:{session}``: a session's recorded conversation, indexed by ``recs`` and
  ``recs:{ns}``, the oldest dropped past ``MAX_SESSIONS``;
- ``sum:{ns}:{session}``: a session's newest ``MAX_SUMMARY_RECORDS_PER_SESSION`` summary
  records (a list), indexed by ``sums`` and ``sums:{ns}`` (by the newest record's ``at``), the
  oldest session dropped past ``MAX_SESSIONS``, like recordings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import unquote

from ..core.activity import Recording, RequestRecord, SessionRow
from ..core.summary_records import SummaryRecord

MAX_RECORDS_PER_SESSION = 1_000
"""Request records kept per session in Redis (the roll-up counts them all)."""
MAX_SESSIONS = 100_000
"""Sessions whose records (and, separately, recordings and summary records) Redis keeps; the
least recent go."""
MAX_SUMMARY_RECORDS_PER_SESSION = 100
"""Summary records kept per session in Redis (the oldest go first)."""


class RedisActivity:
    """``ActivityLog`` over the store's connection (mixed into ``RedisStore``)."""

    prefix: str
    _redis: Any  # a redis.Redis answering str
    _guard: Callable[[], AbstractContextManager[None]]
    _key: Callable[..., str]
    _run: Callable[[str, list[str], list[Any]], Any]
    _scripts: dict[str, Any]

    def _member(self, namespace: str, session: str) -> str:
        """The suffix of a session's keys, ``{ns}:{session}`` quoted: its index member."""
        return self._key("", namespace, session)[len(self.prefix) + 1 :]

    def log_request(self, record: RequestRecord) -> None:
        """Append one request's record and update its session's roll-up (one script)."""
        ns, session = record.namespace, record.session
        self._run(
            "log",
            [
                self._key("req", ns, session),
                self._key("roll", ns, session),
                self._key("active"),
                self._key("active", ns),
            ],
            [
                record.model_dump_json(),
                ns,
                session,
                repr(record.at),
                record.model,
                record.tokens_sent,
                record.window,
                record.reported_tokens or 0,
                record.cached_tokens or 0,
                int(record.compacted),
                MAX_RECORDS_PER_SESSION,
                MAX_SESSIONS,
                self._member(ns, session),
                self.prefix,
            ],
        )

    def list_sessions(
        self, namespace: str | None = None, *, since: float | None = None
    ) -> list[SessionRow]:
        """Each session's roll-up (of ``namespace``, or all), newest activity first."""
        index = self._key("active") if namespace is None else self._key("active", namespace)
        low = "-inf" if since is None else repr(since)
        with self._guard():
            members = self._redis.zrevrangebyscore(index, "+inf", low)
            pipe = self._redis.pipeline(transaction=False)
            for member in members:
                pipe.hgetall(f"{self.prefix}roll:{member}")
            rolls = pipe.execute() if members else []
        rows = [_session_row(roll) for roll in rolls if roll]
        return sorted(rows, key=lambda row: row.last_seen, reverse=True)

    def session_requests(self, namespace: str | None, session: str) -> list[RequestRecord]:
        """A session's kept request records, oldest first (of every namespace for None)."""
        with self._guard():
            if namespace is not None:
                members = [self._member(namespace, session)]
            else:
                members = _of_session(self._redis.zrange(self._key("active"), 0, -1), session)
            bodies = self._list_bodies("req", members)
        records = [RequestRecord.model_validate_json(body) for body in bodies]
        return sorted(records, key=lambda r: r.at)

    def log_requests(self, records: Sequence[RequestRecord]) -> None:
        """Append several records (one script call each: each updates its session's roll-up)."""
        for record in records:
            self.log_request(record)

    def record_conversation(self, recording: Recording) -> None:
        """Keep ``recording`` as its session's latest conversation."""
        ns, session = recording.namespace, recording.session
        self._run(
            "record",
            [self._key("rec", ns, session), self._key("recs"), self._key("recs", ns)],
            [
                recording.model_dump_json(),
                repr(recording.at),
                self._member(ns, session),
                MAX_SESSIONS,
                self.prefix,
            ],
        )

    def recordings(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[Recording]:
        """The recorded conversations (of ``namespace`` / ``session``, or all), oldest first."""
        index = self._key("recs") if namespace is None else self._key("recs", namespace)
        with self._guard():
            members = self._redis.zrange(index, 0, -1)
            if session is not None:
                members = _of_session(members, session)
            bodies = self._redis.mget([f"{self.prefix}rec:{m}" for m in members]) if members else []
        found = [Recording.model_validate_json(body) for body in bodies if body is not None]
        return sorted(found, key=lambda r: r.at)

    def record_summaries(self, records: Sequence[SummaryRecord]) -> None:
        """Append the summary records of a compaction: one script per session, so a session's
        records are written whole or not at all, then trimmed to its newest ones."""
        by_session: dict[tuple[str, str], list[SummaryRecord]] = {}
        for record in records:
            by_session.setdefault((record.namespace, record.session), []).append(record)
        for (ns, session), kept in by_session.items():
            self._run(
                "summaries",
                [self._key("sum", ns, session), self._key("sums"), self._key("sums", ns)],
                [
                    MAX_SUMMARY_RECORDS_PER_SESSION,
                    MAX_SESSIONS,
                    self._member(ns, session),
                    self.prefix,
                    repr(max(record.at for record in kept)),
                    *(record.model_dump_json() for record in kept),
                ],
            )

    def summary_records(
        self, namespace: str | None = None, session: str | None = None
    ) -> list[SummaryRecord]:
        """The kept summary records (of ``namespace`` / ``session``, or all), oldest first (by
        ``at``, then as written)."""
        index = self._key("sums") if namespace is None else self._key("sums", namespace)
        with self._guard():
            members = self._redis.zrange(index, 0, -1)
            if session is not None:
                members = _of_session(members, session)
            bodies = self._list_bodies("sum", members)
        found = [SummaryRecord.model_validate_json(body) for body in bodies]
        return sorted(found, key=lambda r: r.at)  # stable: a session's list is in written order

    def _list_bodies(self, kind: str, members: Sequence[str]) -> list[str]:
        """Every item of the ``kind`` lists (``req``, ``sum``) of ``members``, list by list, in
        one round trip."""
        if not members:
            return []
        pipe = self._redis.pipeline(transaction=False)
        for member in members:
            pipe.lrange(f"{self.prefix}{kind}:{member}", 0, -1)
        return [body for bodies in pipe.execute() for body in bodies]


def _of_session(members: Iterable[str], session: str) -> list[str]:
    """The index members (``{ns}:{session}``, quoted) of ``session``, in any namespace."""
    return [m for m in members if unquote(m.split(":", 1)[1], errors="surrogatepass") == session]


def _session_row(roll: dict[str, str]) -> SessionRow:
    return SessionRow(
        namespace=roll["namespace"],
        session=roll["session"],
        model=roll["model"],
        requests=int(roll["requests"]),
        compactions=int(roll["compactions"]),
        tokens_now=int(roll["tokens_now"]),
        tokens_peak=int(roll["tokens_peak"]),
        window=int(roll["window"]),
        reported_tokens=int(roll["reported"]),
        cached_tokens=int(roll["cached"]),
        first_seen=float(roll["first"]),
        last_seen=float(roll["last"]),
    )
