"""Ahead-of-time compaction (``prepare_ratio``): the summary is drafted in the background past
the prepare threshold, the request that crosses the trigger adopts it without waiting for the
model, and a draft of a conversation that moved elsewhere is never used. The summary responder
is held on a gate the test opens, so "did not wait" is a fact of the protocol, not a timing."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from typer.testing import CliRunner

from context_summarizer.cli.main import app
from context_summarizer.testing import Reply, RoutingResponder, TestUpstream, echo_responder
from context_summarizer.testing.agents import summary_responder

from .conftest import ProxyFactory
from .test_proxy import MODEL, chat_requests, long_history
from .test_wrong_context import check_belongs_and_in_order

KEY = "sk-test-ahead-0123456789abcdef"


class Gate:
    """Summary answers wait until the test opens the gate."""

    def __init__(self) -> None:
        self.open = threading.Event()
        self.asked = threading.Event()
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            self.count += 1
        self.asked.set()
        assert self.open.wait(30), "the test never opened the gate"
        return summary_responder(body)


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def upstream(gate: Gate) -> Iterator[TestUpstream]:
    responder = RoutingResponder(echo_responder, summary=gate)
    with TestUpstream(responder=responder) as server:
        yield server


def send(proxy: Any, messages: list[dict[str, Any]]) -> Any:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    raw.parse()
    return raw


def ahead_counts(proxy: Any) -> dict[str, float]:
    text = httpx2.get(proxy.base_url.removesuffix("/v1") + "/metrics").text
    found = re.findall(r'summarizer_ahead_compactions_total\{outcome="(\w+)"\} (\S+)', text)
    return {outcome: float(value) for outcome, value in found}


def wait_for(condition: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def grown(turns: int, **kw: Any) -> list[dict[str, Any]]:
    """An agent's conversation after ``turns`` tool exchanges (ending on the last tool output):
    each is the one before plus a turn."""
    return long_history(turns, **kw)[:-1]


def test_the_request_over_the_trigger_adopts_the_draft_without_waiting(
    upstream: TestUpstream, gate: Gate, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    proxy = start_proxy(prepare_ratio=0.55)
    below = send(proxy, grown(3))
    assert below.headers["x-summarizer-compacted"] == "false" and not gate.asked.is_set()

    over_prepare = send(proxy, grown(5))  # the draft starts; the request is not held
    assert over_prepare.headers["x-summarizer-compacted"] == "false"
    wait_for(gate.asked.is_set)
    # Over the trigger while the draft is still being written (the gate is shut): it fits the
    # window, so it goes out as it is, at once.
    over_trigger = send(proxy, grown(6))
    assert over_trigger.headers["x-summarizer-compacted"] == "false"
    assert ahead_counts(proxy).get("deferred") == 1

    gate.open.set()
    wait_for(lambda: len(chat_requests(upstream, summary=True)) == 1)
    time.sleep(0.3)  # the draft is built once its answer is in
    conversation = grown(7)
    adopted = send(proxy, conversation)
    assert adopted.headers["x-summarizer-compacted"] == "true"
    counts = ahead_counts(proxy)
    assert counts.get("adopted") == 1 and counts.get("started") == 1
    assert len(chat_requests(upstream, summary=True)) == 1, "no second summary call"
    sent = chat_requests(upstream, summary=False)[-1]
    check_belongs_and_in_order(conversation, sent.body["messages"])
    assert int(adopted.headers["x-summarizer-prompt-tokens"]) <= 16_000 * 0.8
    # The next request of the conversation is append-only on the adopted rewrite.
    follow = [*conversation, {"role": "user", "content": "And now?"}]
    send(proxy, follow)
    after = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert after[: len(sent.body["messages"])] == sent.body["messages"]
    # `summarizer show` says the compaction was drafted ahead of time.
    time.sleep(0.3)
    session = adopted.headers["x-summarizer-session"]
    shown = CliRunner().invoke(app, ["show", session, "--store", str(tmp_path / "checkpoints.db")])
    assert "drafted ahead of time" in shown.output, shown.output


def test_a_request_that_does_not_fit_waits_for_the_draft_under_way(
    upstream: TestUpstream, gate: Gate, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(prepare_ratio=0.55)
    send(proxy, grown(5))
    wait_for(gate.asked.is_set)
    result: dict[str, Any] = {}
    conversation = grown(9)  # over the window: it cannot go out as it is
    waiting = threading.Thread(target=lambda: result.update(raw=send(proxy, conversation)))
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive(), "it went out without its compaction"
    gate.open.set()
    waiting.join(30)
    assert result["raw"].headers["x-summarizer-compacted"] == "true"
    counts = ahead_counts(proxy)
    assert counts.get("waited") == 1 and counts.get("adopted") == 1
    sent = chat_requests(upstream, summary=False)[-1].body["messages"]
    check_belongs_and_in_order(conversation, sent)


def test_a_draft_of_another_branch_is_never_used(
    upstream: TestUpstream, gate: Gate, start_proxy: ProxyFactory
) -> None:
    gate.open.set()
    proxy = start_proxy(prepare_ratio=0.55)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)

    def send_one(messages: list[dict[str, Any]]) -> Any:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=messages, extra_headers={"x-summarizer-session": "one"}
        )
        raw.parse()
        return raw

    send_one(grown(5, task="Fix the failing invoice test. [branch A]"))
    wait_for(lambda: len(chat_requests(upstream, summary=True)) == 1)
    time.sleep(0.3)
    # B shares nothing past the system prompt: same session name, another conversation.
    branch_b = grown(7, task="Fix the failing refund test. [branch B]")
    send_one(branch_b)
    sent = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert "[branch A]" not in str(sent)
    check_belongs_and_in_order(branch_b, sent)
    assert "adopted" not in ahead_counts(proxy)
    # B's request left A's draft alone: A, over its trigger, adopts its own and nothing of B's.
    wait_for(lambda: len(chat_requests(upstream, summary=True)) == 2)  # B's own draft
    later_a = grown(9, task="Fix the failing invoice test. [branch A]")
    assert send_one(later_a).headers["x-summarizer-compacted"] == "true"
    sent = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert "[branch B]" not in str(sent)
    check_belongs_and_in_order(later_a, sent)
    counts = ahead_counts(proxy)
    # A's next draft started with its adoption (A stays over the prepare threshold).
    assert counts.get("adopted") == 1 and counts.get("started") == 3 and "stale" not in counts
    wait_for(lambda: len(chat_requests(upstream, summary=True)) == 3)
    assert "[branch B]" not in str(chat_requests(upstream, summary=True)[-1].body)


def test_an_edit_below_the_drafted_prefix_never_uses_the_draft(
    upstream: TestUpstream, gate: Gate, start_proxy: ProxyFactory
) -> None:
    gate.open.set()
    proxy = start_proxy(prepare_ratio=0.55)
    send(proxy, grown(5))
    wait_for(lambda: len(chat_requests(upstream, summary=True)) == 1)
    time.sleep(0.3)
    edited = grown(7)
    edited[3] = {**edited[3], "content": edited[3]["content"].replace("raised", "EDITED raised")}
    # Over the trigger, and the draft is of the unedited turns: dropped. A draft of the edited
    # conversation starts, and the request fits the window, so it goes out as it is meanwhile.
    raw = send(proxy, edited)
    assert raw.headers["x-summarizer-compacted"] == "false"
    assert chat_requests(upstream, summary=False)[-1].body["messages"] == edited
    counts = ahead_counts(proxy)
    assert counts.get("started") == 2 and "adopted" not in counts
    wait_for(lambda: len(chat_requests(upstream, summary=True)) == 2)
    redraft = chat_requests(upstream, summary=True)[-1].body["messages"]
    assert "EDITED raised" in str(redraft), "the new draft summarizes the edited turns"
    time.sleep(0.3)
    later = grown(8)
    later[3] = edited[3]
    assert send(proxy, later).headers["x-summarizer-compacted"] == "true"
    assert ahead_counts(proxy).get("adopted") == 1
    assert len(chat_requests(upstream, summary=True)) == 2
    check_belongs_and_in_order(later, chat_requests(upstream, summary=False)[-1].body["messages"])


# -- the library, sync (a worker thread drafts), and two processes on one store --------------


def summary_text(call: Any) -> Any:
    from context_summarizer.core.results import SummaryOutcome

    return SummaryOutcome(
        text="## Task and constraints\nFix the failing invoice test.\n## Current state\nreading"
    )


def test_the_library_drafts_on_a_thread_and_prepare_adopts_it(tmp_path: Any) -> None:
    from context_summarizer import ContextManager

    calls: list[Any] = []
    outcomes: list[str] = []

    def summarize(call: Any) -> Any:
        calls.append(call)
        return summary_text(call)

    manager = ContextManager(
        summarizer=summarize,
        context_window=16_000,
        prepare_ratio=0.55,
        on_ahead=outcomes.append,
        store=tmp_path / "a.db",
    )
    assert not manager.prepare(grown(5), model=MODEL).compacted
    wait_for(
        lambda: (
            bool(manager.drafts.jobs.all()) and all(job.done() for job in manager.drafts.jobs.all())
        )
    )
    conversation = grown(7)
    result = manager.prepare(conversation, model=MODEL)
    assert result.compacted and result.event is not None and result.event.ahead_of_time
    assert outcomes == ["started", "adopted"] and len(calls) == 1
    check_belongs_and_in_order(conversation, result.messages)
    manager.close()


def test_a_draft_is_dropped_when_another_process_compacted_the_session(tmp_path: Any) -> None:
    from context_summarizer import ContextManager

    outcomes: list[str] = []
    drafting = ContextManager(
        summarizer=summary_text,
        context_window=16_000,
        prepare_ratio=0.55,
        on_ahead=outcomes.append,
        store=tmp_path / "shared.db",
    )
    other = ContextManager(
        summarizer=summary_text, context_window=16_000, store=tmp_path / "shared.db"
    )
    drafting.prepare(grown(5), model=MODEL)
    wait_for(lambda: all(job.done() for job in drafting.drafts.jobs.all()))
    # The other process compacts the session first (its own summary, its own checkpoint).
    assert other.prepare(grown(7), model=MODEL).compacted
    conversation = grown(8)
    result = drafting.prepare(conversation, model=MODEL)
    # The draft stood on no checkpoint; the session now has one: never adopted.
    assert "adopted" not in outcomes
    assert result.checkpoint_id is not None
    assert not result.event or not result.event.ahead_of_time
    check_belongs_and_in_order(conversation, result.messages)
    drafting.close()
    other.close()
