"""Each kind of bad summary a weak model writes, scripted in the test upstream, is repaired by
the strict retry or replaced by the mechanical fallback: never accepted.

The real proxy in front of the real test upstream, driven by the real openai SDK; the upstream's
summary answers come from ``weak_summary_responder``. What the client gets, what the store keeps
and what ``/metrics`` counts are checked for every kind.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

from context_summarizer.core.results import CompactionEvent
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.headers import credential_namespace
from context_summarizer.proxy.settings import Settings
from context_summarizer.stores import SQLiteStore
from context_summarizer.testing import (
    WEAK_KINDS,
    RoutingResponder,
    TestUpstream,
    WeakKind,
    echo_responder,
    weak_summary_responder,
)
from context_summarizer.testing.weak import INVENTED_PATH

from .test_proxy import long_history

MODEL = "gpt-4o-mini"
KEY = "sk-test-weak-summaries-0123456789"
_tasks = itertools.count()


@pytest.fixture(scope="module")
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def events() -> list[CompactionEvent]:
    return []


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("weak") / "checkpoints.db"


@pytest.fixture(scope="module")
def proxy(upstream: TestUpstream, db: Path, events: list[CompactionEvent]) -> Iterator[ProxyServer]:
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        db=db,
        context_window=8_000,
        max_summary_tokens=500,
        prepare_ratio=None,  # each compaction reported as it happens (drafts: test_ahead*)
    )
    with ProxyServer(settings, on_compaction=events.append) as server:
        yield server


def _compact(proxy: ProxyServer, events: list[CompactionEvent]) -> CompactionEvent:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    task = f"Fix the failing invoice test, case {next(_tasks)}."
    before = len(events)
    raw = client.chat.completions.with_raw_response.create(
        # Over the usable window (6,000): a summary that fails leaves only the fallback.
        model=MODEL,
        messages=long_history(9, size=400, task=task),
    )
    assert raw.parse().choices[0].message.content == "ok"
    assert raw.headers["x-summarizer-compacted"] == "true"
    assert len(events) == before + 1
    return events[-1]


def _metric(proxy: ProxyServer, name: str, label: str, value: str) -> float:
    text = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    for line in text.splitlines():
        if line.startswith(f'{name}_total{{{label}="{value}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("kind", WEAK_KINDS)
def test_a_bad_first_answer_is_repaired_by_the_strict_retry(
    upstream: TestUpstream,
    proxy: ProxyServer,
    db: Path,
    events: list[CompactionEvent],
    kind: WeakKind,
) -> None:
    upstream.responder = RoutingResponder(echo_responder, weak_summary_responder(kind))
    repaired = _metric(proxy, "summarizer_summaries", "verdict", "repaired")
    found = _metric(proxy, "summarizer_summary_problems", "problem", kind)
    event = _compact(proxy, events)
    assert event.verdicts == ["repaired"]
    assert event.problems == [kind]
    assert event.failure is None and event.summary.startswith("## Task and constraints")
    assert INVENTED_PATH not in event.summary
    retry = [r for r in upstream.requests if r.body and "could not be used" in str(r.body)][-1]
    assert retry.body is not None
    # The retry says what was wrong, in the online check's words.
    assert "could not be used as the summary: " in retry.body["messages"][-1]["content"]
    assert _metric(proxy, "summarizer_summaries", "verdict", "repaired") == repaired + 1
    assert _metric(proxy, "summarizer_summary_problems", "problem", kind) == found + 1


@pytest.mark.parametrize("kind", WEAK_KINDS)
def test_a_bad_answer_twice_is_replaced_by_the_fallback(
    upstream: TestUpstream,
    proxy: ProxyServer,
    db: Path,
    events: list[CompactionEvent],
    kind: WeakKind,
) -> None:
    upstream.responder = RoutingResponder(
        echo_responder, weak_summary_responder(kind, repair=False)
    )
    event = _compact(proxy, events)
    assert event.verdicts == ["replaced"]
    assert event.problems == [kind, kind]
    assert event.failure is not None
    store = SQLiteStore(db)
    try:
        (checkpoint,) = store.list_session(credential_namespace(KEY), event.session)
    finally:
        store.close()
    (slot,) = checkpoint.slots
    # The mechanical fallback stands in: none of the bad answer is kept.
    assert slot.failure is not None and slot.summary.startswith("The model could not summarize")
    assert INVENTED_PATH not in slot.message["content"]
    assert "任务" not in slot.message["content"]


def test_a_compaction_abandoned_because_both_answers_failed_is_reported(
    upstream: TestUpstream, proxy: ProxyServer, events: list[CompactionEvent]
) -> None:
    """Over the trigger (4,800) but inside the usable window (6,000): when both answers fail,
    the request goes out unchanged; the listener and the metrics still hear of it."""
    upstream.responder = RoutingResponder(
        echo_responder, weak_summary_responder("echo", repair=False)
    )
    abandoned = _abandoned(proxy)
    problems = _metric(proxy, "summarizer_summary_problems", "problem", "echo")
    replaced = _metric(proxy, "summarizer_summaries", "verdict", "replaced")
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    messages = long_history(7, size=400, task=f"Fix the failing invoice test, case {next(_tasks)}.")
    before = len(events)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert upstream.requests[-1].body["messages"] == messages  # sent unchanged
    (event,) = events[before:]
    assert not event.applied and event.checkpoint_id == "" and event.summary == ""
    assert event.tokens_after == event.tokens_before
    assert event.problems == ["echo", "echo"] and event.failure is not None
    assert _abandoned(proxy) == abandoned + 1
    assert _metric(proxy, "summarizer_summary_problems", "problem", "echo") == problems + 2
    # No summary was written: none is counted as replaced.
    assert _metric(proxy, "summarizer_summaries", "verdict", "replaced") == replaced


def _abandoned(proxy: ProxyServer) -> float:
    text = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    for line in text.splitlines():
        if line.startswith("summarizer_compactions_total{") and 'outcome="abandoned"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0
