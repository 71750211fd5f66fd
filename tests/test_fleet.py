"""A fleet: three real ``summarizer serve`` replicas (subprocesses) sharing one real
redis-server (AOF on, fsync on every write), in front of one test upstream, driven by the real
openai SDK.

- (a) 100 sessions whose requests go to replicas at random, each growing past the trigger:
  one summary call per compaction, and all three replicas send the same bodies upstream for the
  same conversation;
- (b) 20 concurrent requests of one session crossing the trigger, spread over the replicas:
  one summary call, twenty 200s with the same rewrite;
- (c) the replica holding a session's lease killed (SIGKILL) mid-summary: another completes the
  session's request once the lease expires, and nothing is wedged or lost;
- (d) redis-server restarted mid-run: every acknowledged checkpoint is still there and applied;
  requests during the outage get a clean 503 in the API's error shape, then succeed again.

Marked ``fleet`` (slow, many processes): ``pytest -m fleet -s`` prints the fleet's figures.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest

from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.stores import RedisStore
from context_summarizer.testing import (
    Fault,
    RoutingResponder,
    TestUpstream,
    echo_responder,
    is_summary_request,
)

from .conftest import wait_until_serving
from .redis_server import RedisServer, free_port

pytestmark = pytest.mark.fleet

KEY = "sk-fleet-tenant-0123456789abcdef"
NAMESPACE = credential_namespace(KEY)
MODEL = "gpt-4o-mini"
LEASE_TTL_S = 3.0
REPLICAS = 3
# With a 6,000-token window a conversation of 7 tool exchanges crosses the trigger.
# Drafts ahead of time off: each replica drafts for the requests it sees (docs/how-it-works.md,
# "Ahead of time"), and these tests count the summaries one compaction per session makes across
# replicas.
SERVE_FLAGS = ["--context-window", "6000", "--max-summary-tokens", "300", "--prepare-ratio", "off"]
CROSSES_AT = 7


def history(tag: str, exchanges: int) -> list[dict[str, Any]]:
    """A coding session of ``exchanges`` tool calls (~560 tokens each); each is a prefix of the
    next, as an agent's history grows."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": f"{tag}: fix the failing invoice test."},
    ]
    for turn in range(exchanges):
        call_id = f"call_{turn}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"n": {turn}}}'},
                    }
                ],
            }
        )
        body = f"{tag} src/billing/module_{turn}.py raised ValueError: bad total {turn}\n"
        body += " ".join(f"line{turn}_{i} value {i * turn}" for i in range(75))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": body})
    return messages


class Fleet:
    """The redis-server, the replicas, and what the test saw of each replica."""

    def __init__(self, folder: Path, upstream: TestUpstream) -> None:
        self.folder = folder
        self.upstream = upstream
        self.redis = RedisServer(folder / "redis", durable=True).start()
        self.ports = [free_port() for _ in range(REPLICAS)]
        self.processes: list[subprocess.Popen[str] | None] = [None] * REPLICAS
        self.figures: dict[int, Counter[str]] = {i: Counter() for i in range(REPLICAS)}
        self.acknowledged: dict[str, str] = {}
        """Checkpoint id -> session, for every compaction a client got a 200 for."""
        self.compacted: dict[str, tuple[int, str | None]] = {}
        """Tag -> (exchanges, session header) of conversations compacted and acknowledged."""
        self.summary_calls = 0
        """Summary calls the upstream logged before its log was last cleared."""
        self._lock = threading.Lock()

    def clear_log(self) -> None:
        """Clear the upstream's log (each test reads its own), keeping the summary count."""
        self.summary_calls += sum(1 for r in self.upstream.requests if _is_summary(r))
        self.upstream.clear_log()

    def start(self, index: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SUMMARIZER_")}
        env.pop("OPENAI_BASE_URL", None)
        log = (self.folder / f"replica-{index}.log").open("a")
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "context_summarizer.cli",
                "serve",
                "--store",
                self.redis.url,
                "--port",
                str(self.ports[index]),
                "--upstream",
                self.upstream.base_url,
                "--lease-ttl",
                str(LEASE_TTL_S),
                "--log-level",
                "warning",
                *SERVE_FLAGS,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,  # a file: a pipe nobody reads would fill and block it
            text=True,
            env=env,
        )
        self.processes[index] = process
        try:
            wait_until_serving(process, self.url(index), timeout=120)
        except AssertionError:
            print((self.folder / f"replica-{index}.log").read_text()[-3000:])
            raise

    def url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports[index]}"

    def client(self, index: int, timeout: float = 60) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.url(index) + "/v1", api_key=KEY, max_retries=0, timeout=timeout
        )

    def send(self, index: int, messages: list[dict[str, Any]], session: str | None = None) -> Any:
        """One chat completion through replica ``index`` (counted); the raw response."""
        headers = {"x-summarizer-session": session} if session else {}
        try:
            raw = self.client(index).chat.completions.with_raw_response.create(
                model=MODEL, messages=messages, extra_headers=headers
            )
        except Exception:
            self.count(index, "errors")
            raise
        self.count(index, "requests")
        if raw.headers.get("x-summarizer-compacted") == "true":
            self.count(index, "compactions")
            with self._lock:
                self.acknowledged[raw.headers["x-summarizer-checkpoint"]] = raw.headers[
                    "x-summarizer-session"
                ]
        return raw

    def count(self, index: int, what: str) -> None:
        with self._lock:
            self.figures[index][what] += 1

    def kill(self, index: int) -> None:
        process = self.processes[index]
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        self.processes[index] = None

    def stop(self) -> None:
        for index, process in enumerate(self.processes):
            if process is not None:
                process.terminate()
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                self.processes[index] = None
        self.redis.stop()

    def store(self) -> RedisStore:
        return RedisStore(self.redis.url)

    def report(self, title: str) -> None:
        summaries = self.summary_calls + sum(1 for r in self.upstream.requests if _is_summary(r))
        print(f"\n[fleet] {title}, so far: summary calls {summaries}")
        for index, figures in self.figures.items():
            print(
                f"[fleet]   replica {index}: requests {figures['requests']}, compactions "
                f"{figures['compactions']}, errors {figures['errors']}, 503s during the Redis "
                f"outage {figures['unavailable']}, lost with the killed process "
                f"{figures['killed']}"
            )


def _is_summary(record: Any) -> bool:
    return isinstance(record.body, dict) and is_summary_request(record.body)


def _of(tag: str, records: list[Any]) -> list[Any]:
    """The chat completion requests of the session tagged ``tag``."""
    marker = json.dumps(f"{tag}:")[1:-1]
    return [
        r for r in records if r.path.endswith("/chat/completions") and marker in json.dumps(r.body)
    ]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with TestUpstream(responder=RoutingResponder(echo_responder)) as upstream:
        fleet = Fleet(tmp_path_factory.mktemp("fleet"), upstream)
        try:
            with ThreadPoolExecutor(REPLICAS) as pool:
                list(pool.map(fleet.start, range(REPLICAS)))
            yield fleet
            fleet.report("whole run")
        finally:
            fleet.stop()


def test_a_hundred_sessions_over_random_replicas_summarize_once_and_rewrite_alike(
    fleet: Fleet,
) -> None:
    rng = random.Random(15)
    fleet.clear_log()

    def run(index: int) -> str:
        tag = f"Fleet session {index}"
        for exchanges in (CROSSES_AT - 1, CROSSES_AT):
            raw = fleet.send(rng.randrange(REPLICAS), history(tag, exchanges))
            assert raw.parse().choices[0].message is not None
        # The grown conversation, once through each replica: the same body must go upstream.
        final = history(tag, CROSSES_AT + 1)
        checkpoints = {fleet.send(i, final).headers["x-summarizer-checkpoint"] for i in range(3)}
        assert len(checkpoints) == 1 and "" not in checkpoints
        fleet.compacted[tag] = (CROSSES_AT + 1, None)
        return tag

    with ThreadPoolExecutor(8) as pool:
        tags = list(pool.map(run, range(100)))
    records = fleet.upstream.requests
    summaries = [r for r in records if _is_summary(r)]
    compacted_sessions = set(fleet.acknowledged.values())
    assert len(compacted_sessions) == 100
    # Exactly one summary call per compaction, and one compaction (checkpoint) per session.
    assert len(summaries) == len(fleet.acknowledged) == 100
    with fleet.store() as store:
        for tag in tags:
            mine = _of(tag, summaries)
            assert len(mine) == 1, tag
        stored = {
            checkpoint.id
            for session in compacted_sessions
            for checkpoint in store.list_session(NAMESPACE, session)
        }
    assert stored == set(fleet.acknowledged)
    for tag in tags:
        sent = [r for r in _of(tag, records) if not _is_summary(r)]
        last_three = [json.dumps(r.body) for r in sent[-3:]]
        assert len(last_three) == 3 and len(set(last_three)) == 1, tag
    fleet.report("(a) 100 sessions")


def test_twenty_concurrent_requests_of_one_session_summarize_once(fleet: Fleet) -> None:
    fleet.clear_log()
    tag = "Fleet burst"
    fleet.send(0, history(tag, CROSSES_AT - 1))
    fleet.upstream.inject(Fault(kind="delay", seconds=1.5, match="summary"))
    crossing = history(tag, CROSSES_AT)
    with ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda i: fleet.send(i % REPLICAS, crossing), range(20)))
    assert [a.status_code for a in answers] == [200] * 20
    assert len({a.headers["x-summarizer-checkpoint"] for a in answers}) == 1
    records = _of(tag, fleet.upstream.requests)
    assert len([r for r in records if _is_summary(r)]) == 1
    sent = [json.dumps(r.body) for r in records if not _is_summary(r)][-20:]
    assert len(sent) == 20 and len(set(sent)) == 1
    fleet.compacted[tag] = (CROSSES_AT, None)
    fleet.report("(b) 20 concurrent requests of one session")


def _lease_held(fleet: Fleet, session: str) -> bool:
    with fleet.store() as store:
        return bool(store._redis.exists(store._key("lease", NAMESPACE, session)))


def test_a_replica_killed_mid_summary_does_not_wedge_its_session(fleet: Fleet) -> None:
    fleet.clear_log()
    tag, session = "Fleet killed", "fleet-killed"
    fleet.send(0, history(tag, CROSSES_AT - 1), session)
    fleet.upstream.inject(Fault(kind="delay", seconds=6, match="summary"))
    crossing = history(tag, CROSSES_AT)
    lost: list[BaseException] = []

    def doomed_request() -> None:
        try:
            fleet.send(0, crossing, session)
        except BaseException as exc:
            lost.append(exc)

    doomed = threading.Thread(target=doomed_request, daemon=True)
    doomed.start()
    deadline = time.monotonic() + 20
    while not _lease_held(fleet, session):
        assert time.monotonic() < deadline, "replica 0 never took the lease"
        time.sleep(0.02)
    time.sleep(0.5)  # its summary call is out, and delayed
    fleet.kill(0)
    killed_at = time.monotonic()
    doomed.join(10)
    assert len(lost) == 1 and isinstance(lost[0], openai.APIConnectionError)
    # The killed replica's own request fails with it (expected): counted apart from errors.
    fleet.figures[0]["errors"] -= 1
    fleet.count(0, "killed")
    answer = fleet.send(1, crossing, session)
    waited = time.monotonic() - killed_at
    assert answer.status_code == 200 and answer.headers["x-summarizer-compacted"] == "true"
    checkpoint = answer.headers["x-summarizer-checkpoint"]
    later = fleet.send(2, history(tag, CROSSES_AT + 1), session)
    assert later.headers["x-summarizer-checkpoint"] == checkpoint
    assert later.headers["x-summarizer-compacted"] == "false"
    fleet.compacted[tag] = (CROSSES_AT + 1, session)
    with fleet.store() as store:
        assert [c.id for c in store.list_session(NAMESPACE, session)] == [checkpoint]
    # Two summary calls: the taker's, and the killed replica's (the upstream logs it once its
    # delay is over, answering a connection nobody holds any more).
    deadline = time.monotonic() + 15
    while len(summaries := [r for r in _of(tag, fleet.upstream.requests) if _is_summary(r)]) < 2:
        assert time.monotonic() < deadline, "the killed replica's summary call never arrived"
        time.sleep(0.1)
    assert len(summaries) == 2
    print(f"\n[fleet] (c) lease taken over {waited:.1f} s after the kill (TTL {LEASE_TTL_S} s)")
    fleet.start(0)  # back to three for what follows
    fleet.report("(c) kill -9 mid-summary")


def test_a_redis_restart_loses_no_acknowledged_checkpoint_and_answers_503_meanwhile(
    fleet: Fleet,
) -> None:
    assert fleet.acknowledged, "the earlier fleet tests compact sessions"
    fleet.clear_log()
    statuses: Counter[int] = Counter()
    stop = threading.Event()

    def traffic() -> None:  # a client that keeps going through the restart
        n = 0
        while not stop.is_set():
            index = n % REPLICAS
            n += 1
            try:
                fleet.send(index, history(f"Fleet steady {n}", 2))
                statuses[200] += 1
            except openai.APIStatusError as exc:
                statuses[exc.status_code] += 1
                if exc.status_code == 503:
                    fleet.count(index, "unavailable")
                    fleet.figures[index]["errors"] -= 1
            except Exception:  # a hang (timeout) or a dropped connection: counted, and fails
                statuses[-1] += 1
            time.sleep(0.02)

    background = threading.Thread(target=traffic)
    background.start()
    time.sleep(0.5)
    fleet.redis.stop(signal.SIGTERM)
    try:
        for index in range(REPLICAS):
            began = time.monotonic()
            with pytest.raises(openai.APIStatusError) as refused:
                fleet.client(index, timeout=20).chat.completions.create(
                    model=MODEL, messages=history("Fleet outage", 3)
                )
            assert time.monotonic() - began < 15
            assert refused.value.status_code == 503
            body = refused.value.body
            assert isinstance(body, dict) and body["code"] == "store_unavailable"
            assert body["type"] == "server_error" and body["message"]
            fleet.count(index, "unavailable")
        time.sleep(0.5)
    finally:
        fleet.redis.start()
    time.sleep(1.0)
    stop.set()
    background.join(30)
    assert set(statuses) <= {200, 503} and statuses[200] > 0 and statuses[503] > 0
    # Every checkpoint acknowledged before the restart is there...
    with fleet.store() as store:
        for checkpoint_id in fleet.acknowledged:
            assert store.get(NAMESPACE, checkpoint_id) is not None, checkpoint_id
    # ...and applied: compacted sessions continue with their checkpoints, no new summary.
    before = sum(1 for r in fleet.upstream.requests if _is_summary(r))
    assert fleet.compacted
    for n, (tag, (exchanges, session)) in enumerate(list(fleet.compacted.items())[-6:]):
        answer = fleet.send(n % REPLICAS, history(tag, exchanges + 1), session)
        assert answer.headers["x-summarizer-compacted"] == "false", tag
        assert answer.headers["x-summarizer-checkpoint"] in fleet.acknowledged, tag
    assert sum(1 for r in fleet.upstream.requests if _is_summary(r)) == before
    health = [httpx2.get(fleet.url(i) + "/healthz").status_code for i in range(REPLICAS)]
    assert health == [200] * REPLICAS
    print(f"\n[fleet] (d) statuses during the restart: {dict(statuses)}")
    fleet.report("(d) redis restart")
