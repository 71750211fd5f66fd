"""``serve --record`` keeps each compaction's summary records, through a real proxy in front of
the test upstream, driven by the real ``openai`` and ``anthropic`` SDKs: one record per
summarized run, whose request is exactly the summary request the upstream received and whose
answer is the upstream's; ahead-of-time drafts adopted later carry theirs; keys never reach a
stored record (SQLite file bytes, Redis values); without ``--record`` nothing is kept."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from context_summarizer.core.activity import REDACTED
from context_summarizer.core.summary_records import SummaryRecord
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.stores import RedisStore, SQLiteStore
from context_summarizer.testing import (
    RoutingResponder,
    ScriptedToolAgent,
    TestUpstream,
    echo_responder,
    summary_responder,
)
from context_summarizer.testing.scenario import CodingSession

from .conftest import ProxyFactory
from .redis_server import RedisServer
from .test_ahead import ahead_counts
from .test_proxy import MODEL, chat_requests, long_history
from .test_proxy_messages import messages_requests
from .test_proxy_messages import run_session as run_messages_session
from .test_proxy_responses import responses_requests
from .test_proxy_responses import run_session as run_responses_session

KEY = "sk-test-records-0123456789abcdef"


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(context_window=16_000, responder=RoutingResponder(echo_responder)) as server:
        yield server


def send(
    proxy: ProxyServer, messages: list[dict[str, Any]], headers: dict[str, str] | None = None
) -> Any:
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        extra_headers=headers,
    )
    raw.parse()
    return raw


def compacting_session(
    proxy: ProxyServer, task: str = "Fix the failing invoice test.", session: str | None = None
) -> str:
    """Three requests of one session, the third over the trigger: its session id."""
    headers = {"x-summarizer-session": session} if session else None
    for turns in (2, 3, 8):
        raw = send(proxy, long_history(turns, task=task), headers)
    assert raw.headers["x-summarizer-compacted"] == "true"
    return str(raw.headers["x-summarizer-session"])


def wait_for_records(read: Callable[[], list[SummaryRecord]]) -> list[SummaryRecord]:
    """The records once some are written (the writer runs after each answer is sent)."""
    deadline = time.monotonic() + 10
    while not (records := read()):
        assert time.monotonic() < deadline, "no summary record was written"
        time.sleep(0.05)
    return records


def sqlite_records(db: Path, session: str | None = None) -> Callable[[], list[SummaryRecord]]:
    def read() -> list[SummaryRecord]:
        with SQLiteStore(db) as store:
            return store.summary_records(credential_namespace(KEY), session)

    return read


def test_each_summarized_run_is_recorded_as_the_upstream_received_it(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy(record=True)
    session = compacting_session(proxy)
    records = wait_for_records(sqlite_records(tmp_path / "checkpoints.db", session))

    asked = chat_requests(upstream, summary=True)
    assert asked and len(records) == len({(r.checkpoint_id, r.start) for r in records})
    assert sum(len(r.attempts) for r in records) == len(asked)
    with SQLiteStore(tmp_path / "checkpoints.db") as store:
        (checkpoint,) = store.list_session(credential_namespace(KEY), session)
    runs = sorted((slot.start, slot.end) for slot in checkpoint.slots if slot.summary)
    assert sorted((r.start, r.end) for r in records) == runs
    received = [r.body for r in asked]
    for record in records:
        assert record.checkpoint_id == checkpoint.id and record.session == session
        assert record.verdict == "accepted" and record.model == MODEL and record.cap > 0
        assert record.facts and all({"kind", "text"} <= set(fact) for fact in record.facts)
        first = record.attempts[0]
        assert first.attempt == "first" and first.problem is None
        body = next(b for b in received if b["messages"] == first.request["messages"])
        assert first.request["messages"][-1] == body["messages"][-1]  # the instruction, last
        assert first.summary == (summary_responder(body).content or "").strip()
        assert first.score is not None and first.tokens > 0
        assert record.used == first


def test_a_draft_adopted_later_carries_its_records(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy(record=True, prepare_ratio=0.55)
    send(proxy, long_history(3)[:-1])
    send(proxy, long_history(5)[:-1])  # past the prepare threshold: the draft starts
    deadline = time.monotonic() + 20
    while ahead_counts(proxy).get("started") != 1 or not chat_requests(upstream, summary=True):
        assert time.monotonic() < deadline, "no draft started"
        time.sleep(0.05)
    time.sleep(0.5)  # the draft is built once its answer is in
    adopted = send(proxy, long_history(7)[:-1])
    assert adopted.headers["x-summarizer-compacted"] == "true"
    assert ahead_counts(proxy).get("adopted") == 1
    session = adopted.headers["x-summarizer-session"]
    records = wait_for_records(sqlite_records(tmp_path / "checkpoints.db", session))
    asked = [r.body["messages"] for r in chat_requests(upstream, summary=True)]
    assert [r.checkpoint_id for r in records] == [records[0].checkpoint_id] * len(records)
    assert all(r.attempts[0].request["messages"] in asked for r in records)


@pytest.mark.parametrize("door", ["messages", "responses"])
def test_the_other_front_doors_record_their_summaries(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path, door: str
) -> None:
    session = CodingSession(turns=30, seed=7)
    upstream.responder = ScriptedToolAgent(session.steps)
    proxy = start_proxy(context_window=8_000, record=True)
    if door == "messages":
        run_messages_session(proxy, session, steps=30)
        asked = messages_requests(upstream, summary=True)
    else:
        run_responses_session(proxy, session, steps=30)
        asked = responses_requests(upstream, summary=True)
    assert asked
    with SQLiteStore(tmp_path / "checkpoints.db") as store:
        wait_for_records(store.summary_records)
        proxy.stop()  # everything queued is written
        records = store.summary_records()
    assert sum(len(r.attempts) for r in records) == len(asked)
    sent = json.dumps([r.body for r in asked])
    for record in records:
        # The engine's Chat Completions body; its instruction went upstream in this API's shape.
        instruction = record.attempts[0].request["messages"][-1]["content"]
        assert isinstance(instruction, str) and instruction[:200] in sent.replace("\\n", "\n")
        assert record.attempts[0].summary and record.facts


@pytest.fixture(params=["sqlite", "redis"])
def store_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "records.db")
        return
    redis = RedisServer(tmp_path / "redis").start()
    try:
        yield redis.url
    finally:
        redis.stop()


def test_the_requests_own_key_never_reaches_a_stored_record(
    upstream: TestUpstream, store_spec: str, tmp_path: Path
) -> None:
    is_redis = "://" in store_spec
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        store=store_spec if is_redis else None,
        db=None if is_redis else Path(store_spec),
        context_window=16_000,
        client_keys=[KEY],
        record=True,
        prepare_ratio=None,
    )
    with ProxyServer(settings) as proxy:
        session = compacting_session(proxy, task=f"Fix the invoice test. My API key is {KEY}.")
    # The summary request the upstream received quoted the key: there was something to redact.
    assert any(KEY in json.dumps(r.body) for r in chat_requests(upstream, summary=True))
    if is_redis:
        with RedisStore(store_spec) as store:
            records = store.summary_records(credential_namespace(KEY), session)
            raw = json.dumps(
                [store._redis.lrange(key, 0, -1) for key in store._redis.scan_iter("*sum:*")]
            )
    else:
        with SQLiteStore(store_spec) as store:
            records = store.summary_records(credential_namespace(KEY), session)
        raw = "".join(
            p.read_bytes().decode("latin-1") for p in tmp_path.glob("records.db*") if p.is_file()
        )
    assert records and REDACTED in raw
    assert KEY not in raw
    stored = json.dumps([r.model_dump(mode="json") for r in records])
    assert KEY not in stored and REDACTED in stored


def test_a_session_named_like_a_credential_keeps_its_name(
    start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    named = "task-refactor-billing-module-2"  # ``sk-`` and 16 more: a credential's shape
    proxy = start_proxy(record=True)
    assert compacting_session(proxy, session=named) == named
    records = wait_for_records(sqlite_records(tmp_path / "checkpoints.db", named))
    assert {(r.namespace, r.session) for r in records} == {(credential_namespace(KEY), named)}


def test_without_record_no_summary_record_is_kept(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy()
    session = compacting_session(proxy)
    proxy.stop()  # everything queued is written
    assert chat_requests(upstream, summary=True)
    with SQLiteStore(tmp_path / "checkpoints.db") as store:
        assert store.list_session(credential_namespace(KEY), session)  # it did compact
        assert [r.requests for r in store.list_sessions()] == [3]
        assert store.summary_records() == []


def _responses_input(turns: int) -> list[dict[str, Any]]:
    """``long_history``'s conversation as Responses input items."""
    items: list[dict[str, Any]] = []
    for message in long_history(turns, task="Fix the compact endpoint's test."):
        if message["role"] == "tool":
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message["tool_call_id"],
                    "output": message["content"],
                }
            )
        elif message.get("tool_calls"):
            for call in message["tool_calls"]:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call["id"],
                        "name": call["function"]["name"],
                        "arguments": call["function"]["arguments"],
                    }
                )
        else:
            items.append({"role": message["role"], "content": message["content"]})
    return items


@pytest.mark.parametrize("how", ["endpoint", "trigger"])
def test_compactions_the_responses_compact_paths_make_are_recorded(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path, how: str
) -> None:
    # POST /v1/responses/compact, and a Codex-style compaction trigger, answer no model request
    # (no request record), yet their summaries are kept with --record like any other's.
    upstream.responder = RoutingResponder(echo_responder, summary_responder)
    proxy = start_proxy(record=True)
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    items = _responses_input(6)
    if how == "endpoint":
        sdk.responses.compact(model=MODEL, input=items)  # type: ignore[arg-type]
    else:
        sdk.responses.create(model=MODEL, input=[*items, {"type": "compaction_trigger"}])  # type: ignore[list-item]
    proxy.stop()  # everything queued is written
    with SQLiteStore(tmp_path / "checkpoints.db") as store:
        records = store.summary_records()
    assert records and all(r.attempts[0].summary for r in records)
    instruction = records[0].attempts[0].request["messages"][-1]["content"]
    sent = json.dumps([r.body for r in upstream.requests if r.is_summary])
    assert instruction[:200] in sent.replace("\\n", "\n")


def test_the_responses_compact_endpoint_records_nothing_without_record(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    upstream.responder = RoutingResponder(echo_responder, summary_responder)
    proxy = start_proxy()
    sdk = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    sdk.responses.compact(model=MODEL, input=_responses_input(6))  # type: ignore[arg-type]
    proxy.stop()
    assert any(r.is_summary for r in upstream.requests)
    with SQLiteStore(tmp_path / "checkpoints.db") as store:
        assert store.summary_records() == []
