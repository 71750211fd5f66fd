"""``RedisStore``: checkpoints, leases and calibration in a Redis server that several proxy
replicas share (``open_store("redis://host:port/db")``).

Layout, every key under ``prefix`` (default ``summarizer:``), each namespace, session, id and
model URL-quoted so no value can reach into another's key:

- ``cp:{ns}:{id}``: a checkpoint's hash (its JSON ``body``, ``count``, ``created``, ``seq``);
- ``basis:{ns}:{basis_hash}``: id -> ``"count created seq"`` of the applicable checkpoints with
  that basis, the index ``find_latest`` reads (pipelined, longest prefixes first);
- ``sess:{ns}:{session}``: the ids of a session's checkpoints;
- ``gen`` (INCR on every checkpoint write, by any replica: ``generation()``), ``seq``;
- ``lease:{ns}:{session}`` (the holder, expiring on the server's clock) and
  ``fence:{ns}:{session}`` (its fencing token, kept forever);
- ``cal:{ns}:{model}``: shared calibration sums, dropped after 30 days without an observation;
- ``secret:{name}``: the server's secrets (hex), written once with ``SET NX`` so replicas agree;
- the activity log (``redis_activity``).

Checkpoint writes, lease grants and calibration folds are Lua scripts (``redis_scripts``): one
atomic step each. Any connection failure or server error raises ``StoreUnavailable``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from ..core.checkpoints import Checkpoint
from ..core.errors import ConfigurationError, LeaseLost, StoreUnavailable
from . import redis_scripts as lua
from .base import COMPACTION_SECRET, _batches, _Closable, _reported_update, _Row, new_secret
from .compaction_asks import CLEAR_IF_SAME, RedisAsks
from .redis_activity import RedisActivity

DEFAULT_PREFIX = "summarizer:"
CALIBRATION_TTL_S = 30 * 24 * 3600
"""Shared calibration of a (namespace, model) not observed for this long is dropped."""
_BATCH = 500  # candidate prefixes per pipelined round trip
_CONNECT_TIMEOUT_S = 2.0
_SOCKET_TIMEOUT_S = 5.0


def key_part(value: str) -> str:
    """``value`` URL-quoted (no ``:`` left), so key parts never run into each other."""
    return quote(value, safe="", errors="surrogatepass")


def display_url(url: str) -> str:
    """``scheme://host:port/db`` of a Redis URL: never its username or password."""
    parts = urlsplit(url)
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


class RedisStore(RedisActivity, RedisAsks, _Closable):
    """Checkpoints, leases, calibration and the activity log in Redis (``redis://`` or
    ``rediss://`` URL, the redis-py form). Needs the ``redis`` extra:
    ``pip install 'context-summarizer[redis]'``.

    The connection is checked when the store opens (``StoreUnavailable`` if Redis does not
    answer); later failures raise ``StoreUnavailable`` per call, and the next call reconnects.
    """

    def __init__(self, url: str, *, prefix: str = DEFAULT_PREFIX) -> None:
        """Connect to ``url``; every key is written under ``prefix``."""
        try:
            import redis
        except ImportError:  # pragma: no cover - the dev extra installs it
            raise ConfigurationError(
                "store: a redis:// store needs the redis package: pip install "
                "'context-summarizer[redis]'"
            ) from None
        if not prefix:
            raise ConfigurationError("store: the Redis key prefix must not be empty")
        self.name = display_url(url)
        self.prefix = prefix
        self._errors: tuple[type[Exception], ...] = (redis.exceptions.RedisError,)
        self._state_lock = threading.Lock()
        try:
            # Typed Any: with decode_responses every reply is str, which redis-py's stubs
            # cannot say.
            self._redis: Any = redis.Redis.from_url(
                url,
                socket_connect_timeout=_CONNECT_TIMEOUT_S,
                socket_timeout=_SOCKET_TIMEOUT_S,
                decode_responses=True,
            )
        except ValueError as exc:
            raise ConfigurationError(f"store: not a usable Redis URL ({exc})") from None
        self._scripts = {
            name: self._redis.register_script(source)
            for name, source in {
                "put": lua.PUT,
                "update": lua.UPDATE_BODY,
                "try_lease": lua.TRY_LEASE,
                "release": lua.RELEASE_LEASE,
                "fold": lua.FOLD_CALIBRATION,
                "log": lua.LOG_REQUEST,
                "record": lua.RECORD_CONVERSATION,
                "summaries": lua.RECORD_SUMMARIES,
                "clear_ask": CLEAR_IF_SAME,
            }.items()
        }
        with self._guard():
            self._redis.ping()

    # -- plumbing -------------------------------------------------------------------------------

    def _key(self, kind: str, *parts: str) -> str:
        return self.prefix + kind + "".join(":" + key_part(part) for part in parts)

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Redis errors as ``StoreUnavailable``, and closed-store checks."""
        self._check_open()
        try:
            yield
        except self._errors as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            raise StoreUnavailable(self.name, reason) from exc

    def _run(self, script: str, keys: list[str], args: list[Any]) -> Any:
        with self._guard():
            return self._scripts[script](keys=keys, args=args)

    # -- checkpoints ----------------------------------------------------------------------------

    def put(self, checkpoint: Checkpoint, *, fence: int | None = None) -> None:
        """Save ``checkpoint`` in one script with its indexes (``LeaseLost`` for a ``fence``
        older than the session's lease token)."""
        body = checkpoint.to_json()  # may raise: nothing is written yet
        ns, session = checkpoint.namespace, checkpoint.session
        index = self._key("basis", ns, checkpoint.basis_hash) if checkpoint.applicable else ""
        written, value = self._run(
            "put",
            [
                self._key("fence", ns, session),
                self._key("cp", ns, checkpoint.id),
                self._key("sess", ns, session),
                self._key("gen"),
                self._key("seq"),
            ],
            [
                "" if fence is None else fence,
                checkpoint.id,
                body,
                self._key("sess", ns, session),
                index,
                checkpoint.basis_count,
                repr(checkpoint.created_at),
            ],
        )
        if not written:
            raise LeaseLost(ns, session, fence or 0, int(value))

    def generation(self) -> int | None:
        """The count of checkpoint writes by every replica (see ``Store``)."""
        with self._guard():
            return int(self._redis.get(self._key("gen")) or 0)

    def get(self, namespace: str, checkpoint_id: str) -> Checkpoint | None:
        """The checkpoint with this id in ``namespace``, or None."""
        with self._guard():
            body = self._redis.hget(self._key("cp", namespace, checkpoint_id), "body")
        return None if body is None else Checkpoint.from_json(body)

    def find_latest(self, namespace: str, prefix_hashes: Mapping[str, int]) -> Checkpoint | None:
        """The best checkpoint whose basis is among ``prefix_hashes`` (see ``Store``): the
        ``basis`` index read in pipelined batches, longest prefixes first, stopping once no
        later batch can beat the best match."""
        best: tuple[_Row, str] | None = None
        with self._guard():
            for batch in _batches(prefix_hashes, _BATCH):
                if best is not None and best[0].covered_count > batch[0][1]:
                    break
                pipe = self._redis.pipeline(transaction=False)
                for digest, _ in batch:
                    pipe.hgetall(self._key("basis", namespace, digest))
                for (_, count), entries in zip(batch, pipe.execute(), strict=True):
                    for checkpoint_id, packed in entries.items():
                        stored_count, created, seq = packed.split(" ")
                        if int(stored_count) != count:
                            continue
                        row = _Row(count, float(created), int(seq))
                        if best is None or row.rank > best[0].rank:
                            best = (row, checkpoint_id)
            if best is None:
                return None
            body = self._redis.hget(self._key("cp", namespace, best[1]), "body")
        return None if body is None else Checkpoint.from_json(body)

    def list_session(self, namespace: str, session: str) -> list[Checkpoint]:
        """Every checkpoint of a session, oldest first."""
        with self._guard():
            ids = self._redis.smembers(self._key("sess", namespace, session))
            pipe = self._redis.pipeline(transaction=False)
            for checkpoint_id in ids:
                pipe.hmget(self._key("cp", namespace, checkpoint_id), "body", "created", "seq")
            rows = [row for row in pipe.execute() if row[0] is not None] if ids else []
        rows.sort(key=lambda row: (float(row[1]), int(row[2])))
        return [Checkpoint.from_json(row[0]) for row in rows]

    def update_reported(
        self,
        namespace: str,
        checkpoint_id: str,
        *,
        reported_tokens_after: int | None = None,
        reported_tokens_before: int | None = None,
    ) -> None:
        """Record provider-reported token counts (None leaves a field as is; unknown id: no-op).

        Read, change, and write back only if nobody rewrote the body meanwhile (else again)."""
        update = _reported_update(reported_tokens_after, reported_tokens_before)
        if not update:
            return
        key = self._key("cp", namespace, checkpoint_id)
        for _ in range(10):
            with self._guard():
                body = self._redis.hget(key, "body")
            if body is None:
                return
            changed = Checkpoint.from_json(body).model_copy(update=update).to_json()
            if self._run("update", [key, self._key("gen")], [body, changed]):
                return

    # -- leases ---------------------------------------------------------------------------------

    def try_lease(self, namespace: str, session: str, owner: str, ttl_s: float) -> int | None:
        """Take or renew the session's compaction lease: its fencing token, or None (see
        ``Store``). Expiry runs on the Redis server's clock, so replicas' clocks never matter."""
        token = self._run(
            "try_lease",
            [self._key("lease", namespace, session), self._key("fence", namespace, session)],
            [owner, max(1, round(ttl_s * 1000))],
        )
        return None if token is None else int(token)

    def release_lease(self, namespace: str, session: str, owner: str) -> None:
        """Give the lease up if ``owner`` holds it (its fencing token is kept)."""
        if self._closed:
            return
        self._run("release", [self._key("lease", namespace, session)], [owner])

    # -- calibration ----------------------------------------------------------------------------

    def fold_calibration(
        self, namespace: str, model: str, *, reported: float, estimated: float, alpha: float
    ) -> tuple[float, float]:
        """Fold one observation into ``(namespace, model)``'s shared sums in one script (see
        ``Store``)."""
        sums = self._run(
            "fold",
            [self._key("cal", namespace, model)],
            [repr(float(reported)), repr(float(estimated)), repr(alpha), CALIBRATION_TTL_S],
        )
        return (float(sums[0]), float(sums[1]))

    def read_calibration(self, namespace: str, model: str) -> tuple[float, float] | None:
        """The shared calibration sums of ``(namespace, model)``, or None."""
        with self._guard():
            sums = self._redis.hmget(self._key("cal", namespace, model), "reported", "estimated")
        if sums[0] is None or sums[1] is None:
            return None
        return (float(sums[0]), float(sums[1]))

    # -- secrets ------------------------------------------------------------------------------

    def compaction_secret(self) -> bytes:
        """The secret compaction items are signed with: the first replica to ask sets it (``SET
        NX``), every replica reads the same one after."""
        key = self._key("secret", COMPACTION_SECRET)
        with self._guard():
            self._redis.set(key, new_secret().hex(), nx=True)
            value = self._redis.get(key)
        return bytes.fromhex(value)

    def close(self) -> None:
        """Close the connection pool; later calls raise ``ValueError``. Twice is harmless."""
        with self._state_lock:
            if not self._closed:
                self._closed = True
                self._redis.close()
