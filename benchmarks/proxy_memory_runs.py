"""The memory benchmark's runs: ``summarizer serve`` fed sessions, its memory read from ``/proc``.

Run A stores sessions up to the last count and then revisits the oldest; run B restarts a proxy
over run A's store (see ``benchmarks.proxy_memory``). ``measure`` runs both, then the caches'
footprints in this process.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from context_summarizer.testing import Reply, RoutingResponder, TestUpstream

from .processes import proc_kib, rss_bytes, serve_process
from .proxy_memory_footprints import Footprint, cache_footprints, compact_summary
from .proxy_memory_sessions import (
    KEYS,
    WARMUP_KEY,
    Conversation,
    ConversationBuilder,
    request_body,
)

REVISITS = 10
"""The oldest sessions that come back with one more turn, and run B's new sessions."""


def db_bytes(db: Path) -> int:
    """The SQLite file plus its WAL and shared-memory files, in bytes."""
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists())


def db_rows(db: Path) -> tuple[int, int]:
    """Checkpoint rows in the store and the bytes of their JSON bodies (read-only connection,
    beside the proxy's)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows, body = conn.execute("SELECT COUNT(*), SUM(LENGTH(body)) FROM checkpoints").fetchone()
    return int(rows), int(body or 0)


@dataclass
class Point:
    """The proxy's memory and the store's size at one moment of a run."""

    label: str
    sessions: int
    rss: int
    hwm: int
    db_bytes: int
    rows: int
    body_bytes: int
    elapsed: float


class ProxyRun:
    """One ``summarizer serve`` process and the client that feeds it sessions."""

    def __init__(self, pid: int, base: str, db: Path, client: httpx2.Client) -> None:
        self.pid = pid
        self.url = f"{base}/chat/completions"
        self.db = db
        self.client = client
        self.points: list[Point] = []
        self.started = time.perf_counter()
        self.sessions = 0
        self.checkpoints: dict[int, str] = {}

    def post(self, messages: Sequence[dict[str, Any]], key: str) -> httpx2.Response:
        """Send one chat request with ``key``; raise unless it succeeds."""
        response = self.client.post(
            self.url,
            content=request_body(messages),
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        )
        if response.status_code != 200:
            raise RuntimeError(f"proxy answered {response.status_code}: {response.text[:300]}")
        return response

    def new_session(self, conversation: Conversation, key: str) -> None:
        """Send a session's only request; it must compact and store a checkpoint."""
        response = self.post(conversation.messages, key)
        if response.headers.get("x-summarizer-compacted") != "true":
            raise RuntimeError(f"session {conversation.index} did not compact")
        self.checkpoints[conversation.index] = response.headers["x-summarizer-checkpoint"]
        self.sessions += 1

    def revisit(self, builder: ConversationBuilder, conversation: Conversation, key: str) -> None:
        """The session's next request: rewritten from its stored checkpoint, no new compaction."""
        response = self.post(builder.follow_up(conversation), key)
        expected = self.checkpoints.get(conversation.index)
        if response.headers.get("x-summarizer-compacted") != "false" or (
            expected is not None and response.headers.get("x-summarizer-checkpoint") != expected
        ):
            raise RuntimeError(
                f"session {conversation.index} was not rewritten from its stored checkpoint: "
                f"{dict(response.headers)}"
            )
        if expected is None:
            self.checkpoints[conversation.index] = response.headers["x-summarizer-checkpoint"]

    def warm_up(self, builder: ConversationBuilder, seed: int) -> None:
        """Load every code path: small requests that do not compact, and one session that does
        (``seed``: a negative index, distinct per run, so it is new to the store)."""
        small = builder.build(seed).messages[:6]
        for _ in range(3):
            self.post(small, WARMUP_KEY)
        self.new_session(builder.build(seed), WARMUP_KEY)
        self.sessions -= 1  # the warm-up session is not counted among the N sessions

    def measure(self, label: str) -> Point:
        """Record the proxy's memory and the store's size now."""
        rows, body_bytes = db_rows(self.db)
        point = Point(
            label=label,
            sessions=self.sessions,
            rss=rss_bytes(self.pid),
            hwm=proc_kib(self.pid, "VmHWM") * 1024,
            db_bytes=db_bytes(self.db),
            rows=rows,
            body_bytes=body_bytes,
            elapsed=time.perf_counter() - self.started,
        )
        self.points.append(point)
        return point


@contextmanager
def proxy_run(upstream: str, db: Path, *, window: int, summary_tokens: int) -> Iterator[ProxyRun]:
    """A fresh ``summarizer serve`` on ``db``, measured right after startup."""
    # Each session must compact where the replay expects it (no drafts ahead of time: §8).
    extra = ["--max-summary-tokens", str(summary_tokens), "--prepare-ratio", "off"]
    with (
        serve_process(upstream, context_window=window, db=db, extra=extra) as (base, process),
        httpx2.Client(timeout=120) as client,
    ):
        run = ProxyRun(process.pid, base, db, client)
        run.measure("startup")
        yield run


@dataclass
class Figures:
    """Everything both runs measured."""

    tokens: int
    window: int
    mean_tokens: float
    run_a: list[Point]
    run_b: list[Point]
    seconds_a: float
    seconds_b: float
    page_cache_kib: int
    footprints: dict[str, Footprint]
    footprint_sessions: int
    seconds_footprints: float


def measure(*, counts: Sequence[int], tokens: int, footprint_sessions: int) -> Figures:
    """Run A (sessions up to ``counts[-1]``, measured at each count), run B (restart), and the
    caches' footprints in process."""
    builder = ConversationBuilder(tokens)
    window = int(tokens * 1.2)
    summary_tokens = min(2_000, tokens // 20)
    session_tokens: list[int] = []
    responder = RoutingResponder(lambda body: Reply(content="ok"), compact_summary)
    with (
        TestUpstream(responder=responder, max_log=1) as upstream,
        tempfile.TemporaryDirectory() as folder,
    ):
        db = Path(folder) / "checkpoints.db"
        settings = {"window": window, "summary_tokens": summary_tokens}
        with proxy_run(upstream.base_url, db, **settings) as run_a:
            run_a.warm_up(builder, -1)
            run_a.measure("warm-up")
            kept: dict[int, Conversation] = {}
            for index in range(counts[-1]):
                conversation = builder.build(index)
                session_tokens.append(conversation.tokens)
                if index < REVISITS:
                    kept[index] = conversation
                run_a.new_session(conversation, KEYS[index % len(KEYS)])
                if run_a.sessions in counts:
                    run_a.measure(f"{run_a.sessions} sessions")
            for index, conversation in kept.items():
                run_a.revisit(builder, conversation, KEYS[index % len(KEYS)])
            run_a.measure(f"+ {len(kept)} oldest revisited")
            seconds_a = time.perf_counter() - run_a.started
        with proxy_run(upstream.base_url, db, **settings) as run_b:
            run_b.checkpoints = dict(run_a.checkpoints)
            run_b.warm_up(builder, -2)
            run_b.measure("warm-up")
            first = counts[-1]
            for index in range(first, first + REVISITS):
                run_b.new_session(builder.build(index), KEYS[index % len(KEYS)])
            run_b.measure(f"{REVISITS} new sessions")
            for index, conversation in kept.items():
                run_b.revisit(builder, conversation, KEYS[index % len(KEYS)])
            run_b.measure(f"+ {len(kept)} oldest revisited")
            seconds_b = time.perf_counter() - run_b.started
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            page_cache_kib = -int(conn.execute("PRAGMA cache_size").fetchone()[0])
    started = time.perf_counter()
    footprints = cache_footprints(
        builder, sessions=footprint_sessions, window=window, summary_tokens=summary_tokens
    )
    seconds_footprints = time.perf_counter() - started
    return Figures(
        tokens=tokens,
        window=window,
        mean_tokens=sum(session_tokens) / len(session_tokens),
        run_a=run_a.points,
        run_b=run_b.points,
        seconds_a=seconds_a,
        seconds_b=seconds_b,
        page_cache_kib=page_cache_kib,
        footprints=footprints,
        footprint_sessions=footprint_sessions,
        seconds_footprints=seconds_footprints,
    )
