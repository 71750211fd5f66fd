"""Checkpoints and the stores that keep them: round trips, lookup, isolation, atomicity."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from context_summarizer.core.checkpoints import Checkpoint, Slot
from context_summarizer.core.errors import ConfigurationError
from context_summarizer.core.messages import canonical_json, prefix_chain
from context_summarizer.stores import (
    SCHEMA_VERSION,
    MemoryStore,
    RedisStore,
    SQLiteStore,
    Store,
    open_store,
    prefix_candidates,
)

REPO = Path(__file__).resolve().parents[1]


def conversation(n: int, *, tag: str = "") -> list[dict[str, Any]]:
    """A system prompt then ``n - 1`` alternating user/assistant messages."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are terse."}]
    for i in range(1, n):
        role = "user" if i % 2 else "assistant"
        messages.append({"role": role, "content": f"{tag}message {i} — ünïcødé ✓"})
    return messages


def make(
    raw: list[dict[str, Any]],
    covered: int,
    *,
    namespace: str = "ns-a",
    session: str = "s1",
    **fields: Any,
) -> Checkpoint:
    """A checkpoint computed from ``raw[:covered]`` (hash seeded with nothing, like the
    caller's): message 0 kept, the rest summarized."""
    summary = {"role": "user", "content": f"summary of {covered}"}
    values: dict[str, Any] = {
        "namespace": namespace,
        "session": session,
        "basis_count": covered,
        "basis_hash": prefix_chain(raw[:covered])[-1],
        "slots": [Slot(start=1, end=covered, message=summary)] if covered > 1 else [],
        "summary": f"summary of {covered}",
        "tokens_before": 1000,
        "tokens_after": 200,
        "model": "gpt-4o",
        "summary_model": "gpt-4o-mini",
        "trigger": "threshold",
    }
    values.update(fields)
    return Checkpoint(**values)


class Harness:
    """A store under test, and a way to "restart" it (reopen the same SQLite file, reconnect to
    the same Redis keys)."""

    def __init__(self, kind: str, tmp_path: Path, redis_url: str = "") -> None:
        self.kind = kind
        self.path = tmp_path / "nested" / "dir" / "checkpoints.sqlite3"
        self.redis_url = redis_url
        self.prefix = f"test-{uuid.uuid4().hex}:"  # each test its own keys on the shared server
        self.store: Store = self._open()

    def _open(self) -> Store:
        if self.kind == "redis":
            return RedisStore(self.redis_url, prefix=self.prefix)
        return MemoryStore() if self.kind == "memory" else SQLiteStore(self.path)

    def restart(self) -> Store:
        """A fresh connection on the same file or keys; the same store for memory."""
        if self.kind != "memory":
            self.store.close()
            self.store = self._open()
        return self.store

    def another(self) -> Store:
        """A second store on the same data, as another process would open it (memory: the
        same store)."""
        return self.store if self.kind == "memory" else self._open()


STORE_KINDS = ["memory", "sqlite", "redis"]


def redis_url_for(request: pytest.FixtureRequest, kind: str) -> str:
    """The shared test redis-server's URL when ``kind`` is redis (started on first use)."""
    return request.getfixturevalue("redis_server").url if kind == "redis" else ""


@pytest.fixture(params=STORE_KINDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    h = Harness(request.param, tmp_path, redis_url_for(request, request.param))
    yield h
    h.store.close()


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "cp.sqlite3"


# --------------------------------------------------------------------------- the model


def test_checkpoint_defaults_and_json_round_trip_keeps_int_override_keys() -> None:
    raw = conversation(6)
    cp = make(raw, 4, slots=[Slot(start=1, end=2, message={"role": "user", "content": "s"})])
    cp = cp.model_copy(update={"overrides": {2: {"role": "assistant", "content": "[elided]"}}})
    assert len(cp.id) == 32 and int(cp.id, 16) >= 0
    assert cp.created_at > 0 and cp.applicable
    assert make(raw, 4).id != cp.id
    back = Checkpoint.model_validate_json(cp.model_dump_json())
    assert back == cp
    assert list(back.overrides) == [2] and isinstance(next(iter(back.overrides)), int)


def test_checkpoint_is_frozen() -> None:
    cp = make(conversation(4), 3)
    with pytest.raises(ValueError):
        setattr(cp, "summary", "changed")  # noqa: B010


def _slot(start: int, end: int) -> dict[str, Any]:
    return {"start": start, "end": end, "message": {"role": "user", "content": "s"}}


@pytest.mark.parametrize(
    ("basis", "slots", "overrides"),
    [
        (4, [_slot(1, 5)], {}),  # past the basis
        (6, [_slot(3, 5), _slot(1, 2)], {}),  # out of order
        (6, [_slot(1, 3), _slot(2, 4)], {}),  # overlapping
        (6, [_slot(2, 2)], {}),  # empty
        (6, [_slot(1, 3)], {2: {"role": "tool"}}),  # an override inside a slot
        (6, [], {6: {"role": "tool"}}),  # an override past the basis
        (6, [], {-1: {"role": "tool"}}),
        (0, [], {}),
    ],
)
def test_checkpoint_rejects_bad_layouts(
    basis: int, slots: list[dict[str, Any]], overrides: dict[int, Any]
) -> None:
    with pytest.raises(ValueError):
        Checkpoint(
            namespace="",
            session="s",
            basis_count=basis,
            basis_hash="h",
            slots=slots,
            overrides=overrides,
            tokens_before=1,
            tokens_after=1,
            model="m",
            summary_model="m",
            trigger="manual",
        )


def test_rewrite_composition() -> None:
    raw = conversation(12)
    early = {"role": "user", "content": "summary of 2-3"}
    late = {"role": "user", "content": "summary of 5-7"}
    elided_kept = {"role": "user", "content": "[tool output elided]"}
    elided_tail = {"role": "assistant", "content": "[elided]"}
    cp = make(
        raw,
        9,
        slots=[Slot(start=2, end=4, message=early), Slot(start=5, end=8, message=late)],
        overrides={1: elided_kept, 8: elided_tail},
    )

    out = cp.rewrite(raw)

    # each summary sits where the run it replaces was; everything else keeps its raw order
    expected = [raw[0], elided_kept, early, raw[4], late, elided_tail, raw[9], raw[10], raw[11]]
    assert out == expected
    # the caller's objects pass through; the checkpoint's own are copies
    assert out[0] is raw[0] and out[3] is raw[4] and out[8] is raw[11]
    assert out[1] is not cp.overrides[1] and out[2] is not cp.slots[0].message
    out[2]["content"] = "mutated"
    out[1]["content"] = "mutated"
    assert cp.slots[0].message["content"] == "summary of 2-3"
    assert cp.overrides[1] == elided_kept
    # the same input always rewrites to the same bytes
    assert canonical_json(cp.rewrite(raw)) == canonical_json(cp.rewrite(raw))
    # exactly the basis, then nothing more
    assert cp.rewrite(raw[:9]) == expected[:6]
    with pytest.raises(ValueError, match="computed from 9"):
        cp.rewrite(raw[:8])
    assert cp.covered_count == 8 and cp.slot_at(6) == cp.slots[1] and cp.slot_at(4) is None


def test_a_version_1_record_loads_for_reading_but_never_applies() -> None:
    raw = conversation(8)
    v1 = {
        "id": "a" * 32,
        "namespace": "ns-a",
        "session": "s1",
        "covered_count": 5,
        "covered_prefix_hash": prefix_chain(raw[:5])[-1],
        "kept_indices": [0, 1],
        "summary_message": {"role": "user", "content": "old summary"},
        "overrides": {"6": {"role": "assistant", "content": "[elided]"}},
        "summary": "old summary",
        "ledger": [],
        "score": 0.5,
        "tokens_before": 900,
        "tokens_after": 300,
        "model": "gpt-4o",
        "summary_model": "gpt-4o",
        "trigger": "threshold",
        "created_at": 1.0,
    }
    cp = Checkpoint.model_validate(v1)
    assert not cp.applicable and cp.format == 1
    assert cp.summary == "old summary" and cp.score == 0.5
    assert [(s.start, s.end) for s in cp.slots] == [(2, 5)]
    store = MemoryStore()
    store.put(cp)
    assert store.get("ns-a", cp.id) == cp
    assert store.find_latest("ns-a", prefix_candidates(prefix_chain(raw))) is None


# --------------------------------------------------------------------------- both stores


def test_open_store() -> None:
    with open_store(None) as memory:
        assert isinstance(memory, MemoryStore) and isinstance(memory, Store)
    with open_store(":memory:") as sqlite_store:
        assert isinstance(sqlite_store, SQLiteStore) and isinstance(sqlite_store, Store)
    with pytest.raises(ConfigurationError):
        open_store("")


def test_round_trip_survives_restart(harness: Harness) -> None:
    raw = conversation(8)
    raw[3]["x_vendor_field"] = {"nested": ["ß", "日本語", "🙂", {"deep": None}], "n": 1.5}
    summary_message = {
        "role": "user",
        "content": [{"type": "text", "text": "Summary — résumé 🙂\n\u2028line"}],
        "cache_control": {"type": "ephemeral"},
        "unknown_future_field": {"z": 1, "a": [True, False, None], "big": 2**70, "f": 0.1},
        "name": "summarizer",
    }
    cp = make(
        raw,
        7,
        slots=[Slot(start=3, end=5, message=summary_message, summary="s", score=0.5)],
        overrides={2: {"role": "user", "content": "[elided ✂]"}, 6: {"role": "x", "k": [1]}},
        ledger=[{"kind": "file", "text": "src/ü.py"}, {"kind": "decision", "text": "use WAL"}],
        score=0.75,
        failure=None,
        parent_id="abc",
    )
    before = canonical_json(cp.rewrite(raw))
    harness.store.put(cp)

    got = harness.store.get("ns-a", cp.id)
    assert got == cp
    assert got is not cp

    store = harness.restart()
    got = store.get("ns-a", cp.id)
    assert got == cp
    assert got is not None and all(isinstance(k, int) for k in got.overrides)
    assert canonical_json(got.rewrite(raw)) == before
    # key order inside messages is kept too, not only the canonical form
    assert list(got.slots[0].message) == list(summary_message)
    assert got.model_dump_json() == cp.model_dump_json()


def test_put_same_id_is_idempotent_and_replaces(harness: Harness) -> None:
    raw = conversation(6)
    cp = make(raw, 3, session="s")
    harness.store.put(cp)
    harness.store.put(cp)
    assert harness.store.list_session("ns-a", "s") == [cp]
    changed = cp.model_copy(update={"summary": "better"})
    harness.store.put(changed)
    assert harness.store.list_session("ns-a", "s") == [changed]
    assert harness.store.get("ns-a", cp.id) == changed


def test_find_latest_picks_the_longest_basis_the_conversation_extends(harness: Harness) -> None:
    raw = conversation(12)
    chain = prefix_chain(raw)
    store = harness.store
    small = make(raw, 4, created_at=300.0)
    large = make(raw, 7, created_at=100.0)  # older but longer: still wins
    store.put(small)
    store.put(large)
    assert store.find_latest("ns-a", prefix_candidates(chain)) == large
    # a conversation that diverged after message 5 only matches the shorter one
    diverged = raw[:5] + conversation(7, tag="other ")[5:]
    assert store.find_latest("ns-a", prefix_candidates(prefix_chain(diverged))) == small
    # a conversation shorter than both checkpoints matches nothing
    assert store.find_latest("ns-a", prefix_candidates(chain[:3])) is None
    assert store.find_latest("ns-a", {}) is None


def test_find_latest_ties_go_to_newest(harness: Harness) -> None:
    raw = conversation(10)
    chain = prefix_chain(raw)
    store = harness.store
    old = make(raw, 6, created_at=100.0, summary="old")
    new = make(raw, 6, created_at=200.0, summary="new")
    store.put(new)
    store.put(old)  # written later, but older
    assert store.find_latest("ns-a", prefix_candidates(chain)) == new
    # equal created_at: the one written last wins
    same_first = make(raw, 6, created_at=200.0, summary="same, first")
    same_last = make(raw, 6, created_at=200.0, summary="same, last")
    store.put(same_first)
    store.put(same_last)
    assert store.find_latest("ns-a", prefix_candidates(chain)) == same_last
    assert harness.restart().find_latest("ns-a", prefix_candidates(chain)) == same_last


def test_find_latest_ignores_other_namespaces_and_mismatched_counts(harness: Harness) -> None:
    raw = conversation(12)
    chain = prefix_chain(raw)
    store = harness.store
    mine = make(raw, 4)
    store.put(mine)
    store.put(make(raw, 9, namespace="ns-b"))  # longer, but another tenant's
    # right hash, wrong count: must not be taken for a 9-message prefix
    store.put(make(raw, 5, basis_hash=chain[8]))
    assert store.find_latest("ns-a", prefix_candidates(chain)) == mine
    assert store.find_latest("ns-c", prefix_candidates(chain)) is None
    found_b = store.find_latest("ns-b", prefix_candidates(chain))
    assert found_b is not None and found_b.namespace == "ns-b"


def test_namespaces_are_isolated(harness: Harness) -> None:
    raw = conversation(6)
    store = harness.store
    a = make(raw, 3, namespace="ns-a", session="shared")
    b = make(raw, 3, namespace="ns-b", session="shared")
    store.put(a)
    store.put(b)
    assert store.get("ns-b", a.id) is None
    assert store.get("ns-a", b.id) is None
    assert store.get("ns-a", a.id) == a
    assert store.list_session("ns-a", "shared") == [a]
    assert store.list_session("ns-b", "shared") == [b]
    assert store.list_session("", "shared") == []
    store.update_reported("ns-b", a.id, reported_tokens_after=1)  # not b's: no effect
    assert store.get("ns-a", a.id) == a
    # the same id in two namespaces is two rows, neither overwriting the other
    twin = make(raw, 3, namespace="ns-b", id=a.id, summary="twin")
    store.put(twin)
    assert store.get("ns-a", a.id) == a
    assert store.get("ns-b", a.id) == twin


def test_list_session_oldest_first(harness: Harness) -> None:
    raw = conversation(12)
    store = harness.store
    c2 = make(raw, 6, created_at=200.0)
    c1 = make(raw, 3, created_at=100.0)
    c3 = make(raw, 9, created_at=300.0, parent_id=c2.id)
    tie = make(raw, 10, created_at=300.0)  # same time as c3, written after it
    for cp in (c2, c3, c1, tie):
        store.put(cp)
    store.put(make(raw, 4, session="other"))
    assert store.list_session("ns-a", "s1") == [c1, c2, c3, tie]
    store = harness.restart()
    assert store.list_session("ns-a", "s1") == [c1, c2, c3, tie]
    assert store.list_session("ns-a", "missing") == []


def test_update_reported(harness: Harness) -> None:
    cp = make(conversation(6), 3)
    harness.store.put(cp)
    harness.store.update_reported("ns-a", cp.id, reported_tokens_after=180)
    got = harness.store.get("ns-a", cp.id)
    assert got is not None
    assert (got.reported_tokens_after, got.reported_tokens_before) == (180, None)
    harness.store.update_reported("ns-a", cp.id, reported_tokens_before=990)
    harness.store.update_reported("ns-a", cp.id)  # nothing to change
    harness.store.update_reported("ns-a", "no-such-id", reported_tokens_after=5)
    got = harness.restart().get("ns-a", cp.id)
    assert got == cp.model_copy(
        update={"reported_tokens_after": 180, "reported_tokens_before": 990}
    )


def test_a_lone_surrogate_round_trips_exactly(harness: Harness) -> None:
    """JSON text may carry a lone UTF-16 surrogate (``\\ud800``), so a conversation may hold
    one, and so may a checkpoint's summary, ledger or cut tool output."""
    raw = conversation(6)
    lone = {"role": "user", "content": "lone \ud800 surrogate"}
    cp = make(raw, 5, slots=[Slot(start=1, end=3, message=lone, summary="s \udfff")])
    cp = cp.model_copy(update={"overrides": {3: {"role": "tool", "content": "x\ud800y"}}})
    harness.store.put(cp)
    got = harness.restart().get("ns-a", cp.id)
    assert got == cp and got is not None
    assert got.slots[0].message["content"] == "lone \ud800 surrogate"
    assert got.rewrite(raw) == cp.rewrite(raw)


def test_failed_serialisation_leaves_no_row(harness: Harness) -> None:
    raw = conversation(6)
    unwritable = {"role": "user", "content": object()}
    bad = make(raw, 3, slots=[Slot(start=1, end=3, message=unwritable)])
    with pytest.raises(ValueError):  # pydantic's serialisation error is a ValueError
        harness.store.put(bad)
    store = harness.restart()
    assert store.get("ns-a", bad.id) is None
    assert store.list_session("ns-a", "s1") == []
    good = make(raw, 3)
    store.put(good)  # the store is still usable
    assert store.list_session("ns-a", "s1") == [good]


def test_closed_store_refuses_and_keeps_nothing(harness: Harness) -> None:
    cp = make(conversation(6), 3)
    with harness.store as store:
        assert store is harness.store
    with pytest.raises(ValueError, match="closed"):
        store.put(cp)
    with pytest.raises(ValueError, match="closed"):
        store.get("ns-a", cp.id)
    store.close()  # twice is fine
    if harness.kind != "memory":
        assert harness.restart().get("ns-a", cp.id) is None


def test_concurrent_puts_from_threads(harness: Harness) -> None:
    raw = conversation(20)
    store = harness.store
    per_thread = 25
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(t: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                store.put(make(raw, 1 + (i % 19), session=f"t{t}"))
                store.find_latest("ns-a", prefix_candidates(prefix_chain(raw)))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store = harness.restart()
    for t in range(8):
        assert len(store.list_session("ns-a", f"t{t}")) == per_thread


def test_find_latest_with_a_long_chain(harness: Harness) -> None:
    raw = conversation(5000)
    chain = prefix_chain(raw)
    candidates = prefix_candidates(chain)
    assert len(candidates) == 5000
    store = harness.store
    # many unrelated checkpoints, in this and other namespaces
    other = prefix_chain(conversation(300, tag="unrelated "))
    for i, digest in enumerate(other):
        store.put(make(raw, i + 1, basis_hash=digest, namespace=f"ns-{i % 3}"))
    early = make(raw, 10)
    store.put(early)
    assert store.find_latest("ns-a", candidates) == early  # every batch searched
    middle = make(raw, 2500)
    store.put(middle)
    late = make(raw, 4999)
    store.put(late)
    assert store.find_latest("ns-a", candidates) == late
    assert store.find_latest("ns-a", prefix_candidates(chain[:3000])) == middle
    assert store.find_latest("ns-b", candidates) is None


# --------------------------------------------------------------------------- SQLite only


def test_sqlite_creates_parents_private_file_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "cp.db"
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION >= 1
    assert path.exists()
    if os.name == "posix":
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT basis_hash, basis_count, created_at, seq "
            "FROM checkpoints WHERE namespace = ? AND basis_hash IN (?, ?, ?)",
            ("ns", "a", "b", "c"),
        ).fetchall()
    finally:
        conn.close()
    assert any("checkpoints_basis" in str(row) for row in plan), plan
    # reopening an up-to-date database changes nothing
    with SQLiteStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION


def test_sqlite_memory_path_works() -> None:
    cp = make(conversation(4), 2)
    with SQLiteStore(":memory:") as store:
        store.put(cp)
        assert store.get("ns-a", cp.id) == cp


def test_sqlite_refuses_newer_schema(sqlite_path: Path) -> None:
    SQLiteStore(sqlite_path).close()
    conn = sqlite3.connect(sqlite_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(ConfigurationError, match=f"schema version {SCHEMA_VERSION + 1}"):
        SQLiteStore(sqlite_path)


class _FailingCommit:
    """A connection stand-in whose COMMIT fails, as a full disk would."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full (simulated)")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_sqlite_put_failing_mid_transaction_rolls_back(sqlite_path: Path) -> None:
    raw = conversation(6)
    store = SQLiteStore(sqlite_path)
    real = store._conn
    store._conn = _FailingCommit(real)  # type: ignore[assignment]
    cp = make(raw, 3)
    with pytest.raises(sqlite3.OperationalError, match="simulated"):
        store.put(cp)
    store._conn = real
    assert not real.in_transaction
    assert store.get("ns-a", cp.id) is None
    store.put(make(raw, 4))  # not left locked or mid-transaction
    store.close()
    with SQLiteStore(sqlite_path) as reopened:
        assert reopened.get("ns-a", cp.id) is None
        assert len(reopened.list_session("ns-a", "s1")) == 1


def test_sqlite_crash_before_commit_leaves_no_row(sqlite_path: Path) -> None:
    """A process killed inside ``put`` (after the INSERT, before COMMIT) writes nothing."""
    script = textwrap.dedent(
        f"""
        import os
        from context_summarizer.core.checkpoints import Checkpoint, Slot
        from context_summarizer.stores import SQLiteStore

        store = SQLiteStore({str(sqlite_path)!r})
        store.put(Checkpoint(
            id="kept", namespace="ns", session="s", basis_count=1, basis_hash="h",
            summary="ok",
            tokens_before=1, tokens_after=1, model="m", summary_model="m", trigger="manual",
        ))
        def die(statement):
            if statement == "COMMIT":
                os._exit(17)
        store._conn.set_trace_callback(die)
        store.put(Checkpoint(
            id="lost", namespace="ns", session="s", basis_count=2, basis_hash="h2",
            slots=[Slot(start=0, end=2, message={{"role": "user", "content": "x" * 100000}})],
            summary="x",
            tokens_before=1, tokens_after=1, model="m", summary_model="m", trigger="manual",
        ))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 17, result.stderr
    with SQLiteStore(sqlite_path) as store:
        assert store.get("ns", "kept") is not None
        assert store.get("ns", "lost") is None
        assert [c.id for c in store.list_session("ns", "s")] == ["kept"]
    conn = sqlite3.connect(sqlite_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_sqlite_several_processes_share_a_file(sqlite_path: Path) -> None:
    SQLiteStore(sqlite_path).close()
    script = textwrap.dedent(
        f"""
        import sys
        from context_summarizer.core.checkpoints import Checkpoint, Slot
        from context_summarizer.stores import SQLiteStore

        worker = sys.argv[1]
        with SQLiteStore({str(sqlite_path)!r}) as store:
            for i in range(30):
                cp = Checkpoint(
                    namespace="ns", session="p" + worker, basis_count=1 + i,
                    basis_hash=f"h{{i}}", summary="s", tokens_before=1, tokens_after=1, model="m",
                    summary_model="m", trigger="manual",
                )
                store.put(cp)
                store.update_reported("ns", cp.id, reported_tokens_after=i)
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(w)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with SQLiteStore(sqlite_path) as store:
        for w in range(4):
            rows = store.list_session("ns", f"p{w}")
            assert len(rows) == 30
            assert [c.reported_tokens_after for c in rows] == list(range(30))


def test_sqlite_threads_with_separate_connections(sqlite_path: Path) -> None:
    """Several stores on one file (as several processes would have) write without losing rows."""
    raw = conversation(10)
    stores = [SQLiteStore(sqlite_path) for _ in range(4)]
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for _ in range(20):
                stores[n].put(make(raw, 5, session=f"c{n}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()
    assert errors == []
    with SQLiteStore(sqlite_path) as store:
        assert all(len(store.list_session("ns-a", f"c{n}")) == 20 for n in range(4))


# --------------------------------------------------------------------------- generation


def test_generation_changes_with_every_write_and_only_then(harness: Harness) -> None:
    store = harness.store
    raw = conversation(6)
    first = store.generation()
    assert first is not None
    store.find_latest("ns-a", {prefix_chain(raw)[-1]: 6})
    assert store.generation() == first  # reads change nothing
    checkpoint = make(raw, 4)
    store.put(checkpoint)
    second = store.generation()
    assert second != first
    store.update_reported("ns-a", checkpoint.id, reported_tokens_after=180)
    assert store.generation() != second


def test_sqlite_generation_sees_another_connections_writes(sqlite_path: Path) -> None:
    with SQLiteStore(sqlite_path) as mine, SQLiteStore(sqlite_path) as theirs:
        before = mine.generation()
        theirs.put(make(conversation(6), 4))
        assert mine.generation() != before


# --------------------------------------------------------------------------- migration and leases


def test_a_version_1_database_is_migrated_and_its_rows_are_listed_but_never_applied(
    sqlite_path: Path,
) -> None:
    """0.1.0 matched a checkpoint by a covered prefix, which applied it to forks of the
    conversation too; its rows keep their text but no longer rewrite anything."""
    from context_summarizer.stores import MIGRATIONS

    raw = conversation(8)
    chain = prefix_chain(raw)
    conn = sqlite3.connect(sqlite_path)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 1")
    body = {
        "id": "b" * 32,
        "namespace": "ns-a",
        "session": "s1",
        "covered_count": 5,
        "covered_prefix_hash": chain[4],
        "kept_indices": [0, 1],
        "summary_message": {"role": "user", "content": "old summary"},
        "summary": "old summary",
        "tokens_before": 900,
        "tokens_after": 300,
        "model": "gpt-4o",
        "summary_model": "gpt-4o",
        "trigger": "threshold",
        "created_at": 1.0,
    }
    conn.execute(
        "INSERT INTO checkpoints (namespace, id, session, covered_prefix_hash, covered_count, "
        "created_at, body) VALUES (?, ?, ?, ?, ?, ?, ?)",
        ("ns-a", body["id"], "s1", chain[4], 5, 1.0, canonical_json(body)),
    )
    conn.commit()
    conn.close()
    with SQLiteStore(sqlite_path) as store:
        assert store.schema_version == SCHEMA_VERSION == 6
        store.ask_compaction("ns-a", "s1", None)  # version 5's table is there too
        assert store.compaction_ask("ns-a", "s1") is not None
        listed = store.list_session("ns-a", "s1")
        assert [c.summary for c in listed] == ["old summary"] and not listed[0].applicable
        assert store.find_latest("ns-a", prefix_candidates(chain)) is None
        store.update_reported("ns-a", "b" * 32, reported_tokens_after=280)
        assert store.find_latest("ns-a", prefix_candidates(chain)) is None
        fresh = make(raw, 6)
        store.put(fresh)
        assert store.find_latest("ns-a", prefix_candidates(chain)) == fresh
    conn = sqlite3.connect(sqlite_path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


def test_lease_is_exclusive_renewable_and_expires(harness: Harness) -> None:
    store = harness.store
    assert store.try_lease("ns-a", "s1", "one", 60)
    assert store.try_lease("ns-a", "s1", "one", 60)  # its holder renews it
    assert not store.try_lease("ns-a", "s1", "two", 60)
    assert store.try_lease("ns-b", "s1", "two", 60)  # another tenant's session of that name
    assert store.try_lease("ns-a", "s2", "two", 60)
    store.release_lease("ns-a", "s1", "two")  # not its lease: nothing happens
    assert not store.try_lease("ns-a", "s1", "two", 60)
    store.release_lease("ns-a", "s1", "one")
    assert store.try_lease("ns-a", "s1", "two", 0.05)
    assert not store.try_lease("ns-a", "s1", "one", 60)
    threading.Event().wait(0.1)
    assert store.try_lease("ns-a", "s1", "one", 60)  # the other's lease expired


def test_sqlite_lease_holds_across_connections(sqlite_path: Path) -> None:
    with SQLiteStore(sqlite_path) as first, SQLiteStore(sqlite_path) as second:
        assert first.try_lease("ns", "s", "p1", 60)
        assert not second.try_lease("ns", "s", "p2", 60)
        first.release_lease("ns", "s", "p1")
        assert second.try_lease("ns", "s", "p2", 60)
        assert not first.try_lease("ns", "s", "p1", 60)
