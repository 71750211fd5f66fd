"""Where checkpoints live between requests: in memory, in a SQLite file that survives restarts, or
in a Redis server that several proxy replicas share.

Invariants every store keeps:

- a checkpoint is written whole or not at all (one transaction per ``put``), and reads back equal
  to what was written (it is stored as its own JSON), so rewrites stay byte-identical;
- rows are scoped by ``namespace``: ``get``, ``find_latest`` and ``list_session`` never return
  another namespace's checkpoint. A store holds only the namespace hash the caller gives it, never
  a credential;
- every method is safe to call from several threads; ``SQLiteStore`` and ``RedisStore`` also from
  several processes (``RedisStore`` from several machines);
- a *lease* per session (``try_lease``/``release_lease``) lets one compaction run at a time for a
  session across every process sharing the store; an expired lease (its holder died) is taken over;
  each grant carries a *fencing token*, and a ``put`` made under an older token than the
  session's current one is refused (``LeaseLost``), so a holder paused past its lease never
  overwrites what the next holder wrote;
- the calibration sums (``fold_calibration``/``read_calibration``) are shared by every process
  using the store, each fold one atomic step;
- a store that cannot be reached raises ``StoreUnavailable`` (the proxy answers 503);
- every store is also an ``ActivityLog``: a record per managed request the proxy served, and (when
  recording is on) each session's latest conversation, for ``summarizer sessions`` and ``/ui``.
"""

from __future__ import annotations

import os

from ..core.checkpoints import prefix_candidates
from ..core.errors import ConfigurationError
from .base import ActivityLog, SecretKeeper, Store
from .compaction_asks import CompactionAsk, CompactionAsks
from .memory import MemoryStore
from .redis import RedisStore
from .sqlite import MIGRATIONS, SCHEMA_VERSION, SQLiteStore

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ActivityLog",
    "CompactionAsk",
    "CompactionAsks",
    "MemoryStore",
    "RedisStore",
    "SQLiteStore",
    "SecretKeeper",
    "Store",
    "open_store",
    "prefix_candidates",
]


REDIS_SCHEMES = ("redis://", "rediss://")


def open_store(spec: str | os.PathLike[str] | None) -> Store:
    """``MemoryStore()`` for None, ``RedisStore(spec)`` for a ``redis://`` or ``rediss://``
    URL, else ``SQLiteStore(spec)`` (a path, or ``":memory:"``)."""
    if spec is None:
        return MemoryStore()
    if not os.fspath(spec):
        raise ConfigurationError("the checkpoint store path is empty; pass a path or None")
    if isinstance(spec, str) and spec.startswith(REDIS_SCHEMES):
        return RedisStore(spec)
    return SQLiteStore(spec)
