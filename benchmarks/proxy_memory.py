"""Resident memory of ``summarizer serve`` against the number of sessions it has stored.

Method. The test upstream (``summarizer.testing.TestUpstream``: the agent gets a one-word reply,
summary requests get ``summary_responder``'s deterministic summary) runs on 127.0.0.1 in this
process; ``summarizer serve`` runs in its own process, as users run it, with a SQLite store and a
context window of 1.2 x the session size, so that each session's single request is over the
trigger (80 % of the window) and compacts exactly once: every session really is stored, as one
checkpoint row in SQLite. Sessions are distinct from their first user message on: each is a
tool-using coding-agent conversation (``read_file``, ``grep``, ``run_tests``, ``list_dir`` calls
and their outputs, with some assistant reasoning) generated from its own seed, with its own
repository, identifiers, file names and tool-output sizes, counted exactly with tiktoken to the
session size. Requests rotate over four API keys, so the store holds four credential namespaces.

Run A (one proxy process): the proxy's RSS (``VmRSS``) and peak RSS (``VmHWM``) are read from
``/proc`` after startup, after a warm-up (a few small requests and one compacting session under
a separate key), and once the stored-session count reaches each checkpoint (10, 100, 250, 500,
1,000; quick mode 3, 10, 20 of ~5k tokens). Then the ten oldest sessions, long evicted from
the chain cache and the checkpoint memo, come back with one more turn: the proxy must rewrite
them from their stored checkpoint without compacting again.

Run B (a fresh proxy over the same, full SQLite file): the same warm-up and ten new sessions, as
run A's first ten, then the ten revisits. Its RSS against run A's at ten sessions is the memory
a store of 1,000 sessions costs a proxy that is not serving them.

Cache footprints (this process): 50 sessions (quick: 10) of the same size go through a
``ContextManager`` configured as the proxy's, under ``tracemalloc``; emptying each cache in turn
gives its bytes per entry, hence its size at its bound, and which caches are still filling at
the last count.

Floors: (1) plateau: RSS growth from the half-way count to the last (500 to 1,000 sessions) is
at most 5 % of the RSS at the last count; a proxy holding anything per stored session would grow
linearly there, by 500 x its per-session footprint. (2) state in the store: run B's RSS after
its ten new sessions is at most 1.10 x run A's at ten sessions (10 % allows for allocator noise
between two processes).

    python -m benchmarks.proxy_memory [--quick] [--counts 10,100] [--tokens N]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import json
import random
import sqlite3
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2

from summarizer.core.caches import ChainCache
from summarizer.core.engine import ContextEngine
from summarizer.core.results import SummarizeCall, SummaryOutcome
from summarizer.core.tokens import TiktokenCounter
from summarizer.library.manager import ContextManager
from summarizer.loaders.tokenizers import load_encoding, make_counter
from summarizer.proxy.settings import Settings
from summarizer.testing import Reply, RoutingResponder, TestUpstream, summary_responder

from .processes import rss_bytes, serve_process
from .results import Floor, Section, markdown_table, print_section

TITLE = "Memory"
COMMAND = "python -m benchmarks.proxy_memory"

MODEL = "gpt-4o-mini"
KEYS = ("bench-memory-key-0", "bench-memory-key-1", "bench-memory-key-2", "bench-memory-key-3")
"""Session ``i`` is sent with ``KEYS[i % 4]``: four credential namespaces in one store."""
WARMUP_KEY = "bench-memory-warmup"
FULL_COUNTS = (10, 100, 250, 500, 1_000)
FULL_TOKENS = 50_000
QUICK_COUNTS = (3, 10, 20)
QUICK_TOKENS = 5_000
REVISITS = 10
PLATEAU_SHARE = 0.05
RESTART_RATIO = 1.10
MIB = 1024 * 1024

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Repository path."}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "grep",
            "description": "Search the repository for a regular expression.",
            "parameters": {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression."},
                    "glob": {"type": "string", "description": "Files to search."},
                },
                "required": ["pattern"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite, or part of it.",
            "parameters": {
                "type": "object",
                "properties": {"target": {"type": "string", "description": "Test path."}},
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a directory.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
]

_VOCABULARY = (
    "invoice total ledger tax rate amount currency rounding cents customer order line item "
    "discount coupon refund payment gateway retry queue worker batch export report parser schema "
    "record field value config loader cache session token user account balance period month "
    "quarter fiscal vendor supplier shipment address region locale format timestamp window "
    "buffer stream chunk index offset cursor page limit filter sort key migration handler router "
    "request response client server upload archive snapshot metric counter gauge alert threshold "
    "budget forecast pricing plan tier subscription renewal trial credit debit statement"
)
_WORDS = _VOCABULARY.split()
_TASKS = (
    "Find why the {a} totals in {repo} are off by a few cents and fix it.",
    "The nightly {a} export in {repo} fails for some customers; find the cause and fix it.",
    "Add {a} support to the {b} parser of {repo}, with tests.",
    "Make the {a} {b} endpoint of {repo} paginate correctly; page two repeats items.",
    "Track down the flaky {a} test in {repo} and make it deterministic.",
    "Refactor the {a} {b} module of {repo} so the {c} logic lives in one place.",
    "Upgrade {repo} to the new {a} API and keep every {b} test passing.",
    "The {a} report of {repo} double-counts {b} rows after a retry; fix it.",
)
_SYSTEMS = (
    "You are a careful coding agent. Work in small steps and run the tests after each change.",
    "You are an autonomous software engineer. Read before you edit; explain each decision.",
    "You are a senior developer pairing with the user. Prefer minimal, well-tested changes.",
)


def _ident(rng: random.Random) -> str:
    return "_".join(rng.sample(_WORDS, 2))


def _code_file(rng: random.Random, tag: str, lines: int) -> str:
    out = [f'"""{rng.choice(_WORDS).title()} {rng.choice(_WORDS)} helpers ({tag})."""', ""]
    while len(out) < lines:
        name, arg, attr = _ident(rng), rng.choice(_WORDS), _ident(rng)
        out += [
            f"def {name}_{tag}(self, {arg}: int) -> int:",
            f"    {attr} = self.{attr} * {rng.randint(2, 999)} + {arg}",
            f"    if {attr} > {rng.randint(10, 99_999)}:  # {rng.choice(_WORDS)} {_ident(rng)}",
            f"        raise ValueError('{rng.choice(_WORDS)} {arg} out of range')",
            f"    return round({attr} / {rng.randint(2, 100)}, {rng.randint(0, 4)})",
            "",
        ]
    return "\n".join(out)


def _grep_output(rng: random.Random, repo: str, pattern: str, hits: int) -> str:
    return "\n".join(
        f"src/{repo}/{rng.choice(_WORDS)}/{_ident(rng)}.py:{rng.randint(1, 900)}:"
        f"    {pattern} = {_ident(rng)}({rng.choice(_WORDS)}, {rng.randint(0, 9999)})"
        for _ in range(hits)
    )


def _test_output(rng: random.Random, repo: str, cases: int) -> str:
    lines = []
    failed = 0
    for _ in range(cases):
        path = f"tests/test_{rng.choice(_WORDS)}.py::test_{_ident(rng)}"
        if rng.random() < 0.08:
            failed += 1
            lines.append(f"{path} FAILED")
            lines.append(
                f"E   AssertionError: expected {rng.randint(0, 99_999)} cents, "
                f"got {rng.randint(0, 99_999)} in {repo}.{_ident(rng)}"
            )
        else:
            lines.append(f"{path} PASSED")
    lines.append(
        f"==== {cases - failed} passed, {failed} failed in {rng.uniform(0.5, 40):.2f}s ===="
    )
    return "\n".join(lines)


def _listing(rng: random.Random, repo: str, entries: int) -> str:
    return "\n".join(
        f"{rng.choice(['-rw-r--r--', 'drwxr-xr-x'])} {rng.randint(80, 90_000):>6} "
        f"{repo}/{_ident(rng)}{rng.choice(['.py', '.md', '.toml', '/', '.json'])}"
        for _ in range(entries)
    )


def _tool_turn(
    rng: random.Random, repo: str, turn: int, tag: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One assistant tool call (sometimes with reasoning text) and the tool's output."""
    kind = rng.choices(["read_file", "grep", "run_tests", "list_dir"], weights=[5, 3, 2, 1])[0]
    if kind == "read_file":
        path = f"src/{repo}/{rng.choice(_WORDS)}/{_ident(rng)}.py"
        arguments: dict[str, str] = {"path": path}
        output = _code_file(rng, tag, rng.randint(30, 240))
    elif kind == "grep":
        pattern = _ident(rng)
        arguments = {"pattern": pattern, "glob": f"src/{repo}/**/*.py"}
        output = _grep_output(rng, repo, pattern, rng.randint(10, 80))
    elif kind == "run_tests":
        arguments = {"target": f"tests/test_{rng.choice(_WORDS)}.py"}
        output = _test_output(rng, repo, rng.randint(20, 120))
    else:
        arguments = {"path": f"src/{repo}/{rng.choice(_WORDS)}"}
        output = _listing(rng, repo, rng.randint(10, 60))
    call_id = f"call_{tag}_{turn}"
    content: str | None = None
    if rng.random() < 0.3:
        content = (
            f"The {rng.choice(_WORDS)} value comes from {_ident(rng)}; "
            f"next I check {arguments.get('path') or arguments.get('pattern') or 'the tests'}."
        )
        if rng.random() < 0.3:
            content += f" NOTE: {_ident(rng)} must stay below {rng.randint(10, 9999)}."
    call = {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": kind, "arguments": json.dumps(arguments)},
            }
        ],
    }
    return call, {"role": "tool", "tool_call_id": call_id, "content": output}


@dataclass
class Conversation:
    """One session's messages and their exact token count (tools and reply priming included)."""

    index: int
    messages: list[dict[str, Any]]
    tokens: int


class ConversationBuilder:
    """Distinct, deterministic tool-using sessions of a given size."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens
        # A private counter, uncached: the benchmark must not grow a cache of its own per session.
        self._counter = TiktokenCounter(load_encoding("o200k_base"), cache_size=0)
        self._tools_tokens = self._counter.count_tools(TOOLS) + 3

    def build(self, index: int) -> Conversation:
        """Session ``index``: its own seed, task, repository and tool outputs."""
        rng = random.Random(f"proxy-memory-{index}")
        repo = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}-{index}"
        a, b, c = rng.sample(_WORDS, 3)
        task = rng.choice(_TASKS).format(a=a, b=b, c=c, repo=repo)
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": rng.choice(_SYSTEMS)},
            {"role": "user", "content": f"{task} (ticket {repo.upper()}-{rng.randint(1, 9999)})"},
        ]
        count = self._counter.count_message
        total = self._tools_tokens + sum(count(m) for m in messages)
        turn = 0
        while total < self.tokens:
            for message in _tool_turn(rng, repo, turn, f"s{index}"):
                messages.append(message)
                total += count(message)
            turn += 1
        return Conversation(index, messages, total)

    def follow_up(self, conversation: Conversation) -> list[dict[str, Any]]:
        """``conversation`` with one more tool turn, as the agent's next request."""
        rng = random.Random(f"proxy-memory-follow-up-{conversation.index}")
        repo = f"follow-up-{conversation.index}"
        call, output = _tool_turn(rng, repo, 10_000, f"s{conversation.index}")
        output["content"] = output["content"][:2_000]
        return [*conversation.messages, call, output]


def request_body(messages: Sequence[dict[str, Any]]) -> bytes:
    """A chat completion request for ``messages``, serialized."""
    body = {"model": MODEL, "messages": list(messages), "tools": TOOLS, "max_completion_tokens": 16}
    return json.dumps(body).encode()


# -- measuring ------------------------------------------------------------------------------------


def proc_kib(pid: int, field: str) -> int:
    """A ``/proc/<pid>/status`` field (``VmRSS``, ``VmHWM``...), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


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
    extra = ["--max-summary-tokens", str(summary_tokens)]
    with (
        serve_process(upstream, context_window=window, db=db, extra=extra) as (base, process),
        httpx2.Client(timeout=120) as client,
    ):
        run = ProxyRun(process.pid, base, db, client)
        run.measure("startup")
        yield run


@dataclass
class Footprint:
    """What one in-process cache held after the in-process sessions: entries, traced bytes."""

    entries: int
    bytes: int


def _summarize(call: SummarizeCall) -> SummaryOutcome:
    reply = summary_responder(dict(call.body))
    return SummaryOutcome(text=reply.content, finish_reason="stop")


def cache_footprints(
    builder: ConversationBuilder, *, sessions: int, window: int, summary_tokens: int
) -> dict[str, Footprint]:
    """Bytes per cache, measured in this process with the proxy's engine and configuration.

    ``sessions`` sessions go through a ``ContextManager`` configured as ``summarizer serve`` is
    (its ``Settings.compaction``, a SQLite store), each parsed from its request bytes
    as the proxy parses it, under ``tracemalloc``. Then each cache is emptied in turn and the
    traced memory it frees is its footprint: the chain cache first, then the token counts
    (which so count the message digests they share with it, as they do for every conversation
    the chain cache has evicted), then the latest-checkpoint memo.
    """
    settings = Settings(context_window=window, max_summary_tokens=summary_tokens)
    counter = make_counter(MODEL)
    if not isinstance(counter, TiktokenCounter):
        raise RuntimeError(f"{MODEL} is not counted with tiktoken here: {counter!r}")
    with tempfile.TemporaryDirectory() as folder:
        context = ContextManager(
            store=Path(folder) / "c.db", summarizer=_summarize, config=settings.compaction
        )
        engine = context.engine

        def send(index: int) -> None:
            body = json.loads(request_body(builder.build(index).messages))
            result = context.prepare(
                body["messages"], model=MODEL, tools=body["tools"], request=body
            )
            if not result.compacted:
                raise RuntimeError(f"session {index} did not compact in process")

        send(-3)  # warm-up: everything loaded before tracing starts
        engine._chains = ChainCache()
        engine._latest.clear()
        counter.clear_cache()
        gc.collect()
        tracemalloc.start()
        try:
            for index in range(sessions):
                send(-1_000 - index)
            gc.collect()
            found: dict[str, Footprint] = {}
            chains = engine._chains._entries  # private: the benchmark looks inside the caches
            clears = {
                "chains": (len(chains), chains.clear),
                "tokens": (counter.cache_info().size, counter.clear_cache),
                "latest": (len(engine._latest), engine._latest.clear),
            }
            for name, (entries, clear) in clears.items():
                before = tracemalloc.get_traced_memory()[0]
                clear()
                gc.collect()
                found[name] = Footprint(entries, before - tracemalloc.get_traced_memory()[0])
        finally:
            tracemalloc.stop()
            context.close()
    return found


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
    responder = RoutingResponder(lambda body: Reply(content="ok"), summary_responder)
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


# -- reporting ------------------------------------------------------------------------------------


def _default(function: Any, name: str) -> Any:
    return inspect.signature(function).parameters[name].default


def _per_entry(footprint: Footprint | None, bound: int) -> tuple[str, str]:
    """Measured bytes per entry, and that times the bound, as table cells."""
    if footprint is None or footprint.entries == 0:
        return "", ""
    each = footprint.bytes / footprint.entries
    return f"{each / 1024:.1f} KiB", f"{each * bound / MIB:.0f} MiB"


def cache_bounds(page_cache_kib: int, footprints: dict[str, Footprint]) -> list[list[str]]:
    """Every in-process cache on the proxy's request path: where it is set, its bound, and
    (for the three that grow with sessions) its measured size per entry and at the bound."""
    from summarizer.proxy import chat_context

    chain_size = _default(ChainCache, "size")
    memo_size = _default(ContextEngine, "memo_size")
    counter_size = _default(TiktokenCounter, "cache_size")
    return [
        [
            "prefix chains (`ChainCache`): each entry holds a whole request's messages, "
            "digests and prefix hashes",
            "`summarizer/core/caches.py` `ChainCache(size=...)`, built by `ContextEngine.__init__`",
            f"{chain_size} conversations",
            *_per_entry(footprints.get("chains"), chain_size),
        ],
        [
            "latest checkpoint per session (`ContextEngine._latest`)",
            "`summarizer/core/engine.py` `ContextEngine(memo_size=...)`",
            f"{memo_size:,} checkpoints",
            *_per_entry(footprints.get("latest"), memo_size),
        ],
        [
            "token count per message digest (`TiktokenCounter._messages`)",
            "`summarizer/core/tokens/counters.py` `TiktokenCounter(cache_size=...)`; one counter "
            "per encoding, process-wide (`summarizer/loaders/tokenizers.py` `make_counter`)",
            f"{counter_size:,} messages",
            *_per_entry(footprints.get("tokens"), counter_size),
        ],
        [
            "token count per tool-definition list (`TiktokenCounter._tools`)",
            "`summarizer/core/tokens/counting.py` `_ChatCounter.__init__`",
            f"min(cache_size, 256) = {min(counter_size, 256)} lists",
            "",
            "",
        ],
        [
            "per-session compaction locks (`ContextManager._alocks`)",
            "`summarizer/library/sessions.py`, a `WeakValueDictionary`",
            "sessions with a compaction running or waiting",
            "",
            "",
        ],
        [
            "calibration ratio per tenant and model (`Calibration._ratios`)",
            "`summarizer/core/tokens/calibration.py` `Calibration(max_entries=...)`",
            "4,096 (namespace, model) pairs, least recently used dropped",
            "",
            "",
        ],
        [
            "models warned about (`ProxyState.warned_models`)",
            "`summarizer/proxy/chat_context.py` `_MAX_WARNED_MODELS`",
            f"{chat_context._MAX_WARNED_MODELS:,} model names",
            "",
            "",
        ],
        [
            "SQLite page cache (one connection)",
            "`summarizer/stores/sqlite.py` sets none: SQLite's default `PRAGMA cache_size`",
            f"{page_cache_kib:,} KiB",
            "",
            f"{page_cache_kib / 1024:.0f} MiB",
        ],
    ]


def _mib(value: int) -> str:
    return f"{value / MIB:.1f}"


def _point_rows(points: Sequence[Point]) -> list[list[str]]:
    rows = []
    previous: Point | None = None
    for p in points:
        added = p.sessions - previous.sessions if previous is not None else 0
        slope = f"{(p.rss - previous.rss) / added / 1024:.1f}" if previous and added > 0 else ""
        rows.append(
            [
                p.label,
                _mib(p.rss),
                _mib(p.hwm),
                slope,
                _mib(p.db_bytes),
                str(p.rows),
                f"{p.elapsed:.1f}",
            ]
        )
        previous = p
    return rows


_HEADER = [
    "point",
    "RSS (MiB)",
    "peak RSS (MiB)",
    "per session (KiB)",
    "SQLite (MiB)",
    "checkpoints",
    "elapsed (s)",
]


def floors(figures: Figures, counts: Sequence[int]) -> list[Floor]:
    """The plateau floor and the restart floor (see the module docstring)."""
    by_count = {p.sessions: p for p in figures.run_a if p.label.endswith(" sessions")}
    half = max(c for c in counts if c <= counts[-1] // 2)
    last = by_count[counts[-1]]
    growth = last.rss - by_count[half].rss
    restarted = next(p for p in figures.run_b if p.label.endswith("new sessions"))
    first = by_count[REVISITS]
    return [
        Floor(
            name=f"RSS growth from {half:,} to {counts[-1]:,} sessions, "
            f"as a share of RSS at {counts[-1]:,}",
            measured=f"{growth / MIB:+.1f} MiB = {growth / last.rss:+.1%}",
            limit=f"≤ {PLATEAU_SHARE:.0%}",
            met=growth <= PLATEAU_SHARE * last.rss,
        ),
        Floor(
            name=f"RSS of a proxy restarted over {counts[-1]:,} stored sessions, after "
            f"{REVISITS} new sessions, against the first proxy's at {REVISITS}",
            measured=f"{_mib(restarted.rss)} / {_mib(first.rss)} MiB = "
            f"{restarted.rss / first.rss:.2f}×",
            limit=f"≤ {RESTART_RATIO:.2f}×",
            met=restarted.rss <= RESTART_RATIO * first.rss,
        ),
    ]


def _filling(figures: Figures, sessions: int) -> list[str]:
    """A note on each growing cache still under its bound after ``sessions`` sessions."""
    caches = {
        "chains": ("chain cache", _default(ChainCache, "size")),
        "latest": ("checkpoint memo", _default(ContextEngine, "memo_size")),
        "tokens": ("token-count cache", _default(TiktokenCounter, "cache_size")),
    }
    notes = []
    for key, (label, bound) in caches.items():
        footprint = figures.footprints.get(key)
        if footprint is None or footprint.entries == 0:
            continue
        per_session = footprint.entries / figures.footprint_sessions
        if per_session * sessions < bound:
            kib = footprint.bytes / figures.footprint_sessions / 1024
            notes.append(
                f"At {sessions:,} sessions the {label} holds ~{per_session * sessions:,.0f} of "
                f"its {bound:,} entries ({per_session:.0f} per session): it still grows by "
                f"~{kib:.1f} KiB per session, until ~{bound / per_session:,.0f} sessions."
            )
    return [" ".join(notes), ""] if notes else []


def report(figures: Figures, counts: Sequence[int]) -> str:
    """The section body: method, both runs' tables, the cache bounds."""
    by_count = {p.sessions: p for p in figures.run_a if p.label.endswith(" sessions")}
    last, ten = by_count[counts[-1]], by_count.get(REVISITS)
    lines = [
        f"`summarizer serve` in its own process with a SQLite store, context window "
        f"{figures.window:,} tokens (trigger 80 %, target 40 %); the test upstream on 127.0.0.1 "
        f"answers summary requests with `summary_responder`. Each session is a distinct "
        f"tool-using coding-agent conversation of {figures.mean_tokens:,.0f} tokens on average "
        f"(its own task, repository, files and tool outputs from its own seed), sent once: it "
        f"compacts and leaves one checkpoint in SQLite. Sessions rotate over {len(KEYS)} API "
        f"keys (credential namespaces); the warm-up uses a fifth and stores one more checkpoint. "
        f"RSS is `VmRSS` of the proxy process, peak RSS its `VmHWM`; SQLite is the database "
        f"file plus its WAL; per session is the RSS growth since the previous row over the "
        f"sessions added.",
        "",
        f"**Run A**: one proxy, sessions added up to {counts[-1]:,} "
        f"({figures.seconds_a:.0f} s). Then the {REVISITS} oldest sessions send one more turn; "
        f"each is rewritten from its stored checkpoint (same checkpoint id, no new compaction).",
        "",
        markdown_table(_HEADER, _point_rows(figures.run_a)),
        "",
        f"**Run B**: a fresh proxy over run A's store ({figures.seconds_b:.0f} s): the same "
        f"warm-up, {REVISITS} new sessions, then the {REVISITS} oldest sessions of run A, found "
        f"in the store by a process that never saw them.",
        "",
        markdown_table(_HEADER, _point_rows(figures.run_b)),
        "",
    ]
    if ten is not None:
        lines += [
            f"RSS at {counts[-1]:,} sessions against {REVISITS}: "
            f"{_mib(last.rss)} / {_mib(ten.rss)} MiB = {last.rss / ten.rss:.2f}×. "
            f"Store: {_mib(last.db_bytes)} MiB with its WAL for {last.rows:,} checkpoints, whose "
            f"JSON bodies average {last.body_bytes / last.rows / 1024:.1f} KiB.",
            "",
        ]
    lines += _filling(figures, last.sessions)
    lines += [
        "In-process caches on the proxy's path, their default bounds, and what the three that "
        "grow with sessions hold:",
        "",
        markdown_table(
            ["cache", "set in", "bound", "per entry", "at the bound"],
            cache_bounds(figures.page_cache_kib, figures.footprints),
            align="lllrr",
        ),
        "",
        f"Per entry: the traced bytes a cache frees when emptied after "
        f"{figures.footprint_sessions} sessions of this size went through a `ContextManager` "
        f"configured as the proxy's, in this process under `tracemalloc` "
        f"({figures.seconds_footprints:.0f} s); a chain-cache entry grows with its "
        f"conversation's length. Also bounded, by what they are keyed on: Prometheus label sets "
        f"(route, status, trigger), one tokenizer and one token counter per encoding, prompt "
        f"templates per version, `sqlite3`'s statement cache (128).",
    ]
    return "\n".join(lines)


def run(
    *,
    quick: bool,
    out_dir: Path,
    counts: Sequence[int] | None = None,
    tokens: int | None = None,
) -> Section:
    """Measure (quick: 3, 10, 20 sessions of ~5k tokens) and report; ``counts`` and ``tokens``
    override the mode's sizes."""
    counts = counts or (QUICK_COUNTS if quick else FULL_COUNTS)
    tokens = tokens or (QUICK_TOKENS if quick else FULL_TOKENS)
    footprint_sessions = 10 if quick else 50
    figures = measure(counts=counts, tokens=tokens, footprint_sessions=footprint_sessions)
    found = floors(figures, counts)
    return Section(
        title=TITLE,
        command=COMMAND,
        body=report(figures, counts),
        floors=found,
    )


def main() -> None:
    """Command line: print the section body and its floors."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, ~15 s")
    parser.add_argument(
        "--counts", help="comma-separated session counts to measure at (default: the mode's)"
    )
    parser.add_argument("--tokens", type=int, help="tokens per session (default: the mode's)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")] if args.counts else None
    started = time.perf_counter()
    # This section writes no files.
    section = run(quick=args.quick, out_dir=Path("."), counts=counts, tokens=args.tokens)
    print_section(section)
    print(f"\n{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
