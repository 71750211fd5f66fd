"""Ahead-of-time drafts belong to the conversation they were drafted from, not to the session
name (issue 26, item 5): two conversations that share a session (the same system prompt and task:
parallel attempts, sub-agents) interleaved request by request each draft once and adopt their own
draft, never the other's; neither cancels the other's. The summary responder is held on a gate
the test opens, so what is deferred and what waits is a fact of the protocol, not a timing."""

from __future__ import annotations

import concurrent.futures
from typing import Any

import openai
import pytest

from context_summarizer.library.ahead import AheadJobs
from context_summarizer.testing import TestUpstream

from .conftest import ProxyFactory
from .test_ahead import KEY, Gate, ahead_counts, gate, grown, summary_text, upstream, wait_for
from .test_proxy import MODEL, chat_requests
from .test_wrong_context import check_belongs_and_in_order

__all__ = ["gate", "upstream"]  # fixtures

NAMES = ("alpha", "bravo")


def branch(turns: int, name: str) -> list[dict[str, Any]]:
    """``grown(turns)`` whose every tool output carries ``[name]``: the same system prompt and
    task as every other branch (so the same derived session), a conversation of its own."""
    messages = grown(turns)
    return [
        {**m, "content": f"[{name}] {m['content']}"} if m["role"] == "tool" else m for m in messages
    ]


def other(name: str) -> str:
    return NAMES[1 - NAMES.index(name)]


def send(proxy: Any, messages: list[dict[str, Any]]) -> Any:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0)
    raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=messages)
    raw.parse()
    return raw


def test_interleaved_branches_of_one_session_each_adopt_their_own_draft(
    upstream: TestUpstream, gate: Gate, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(prepare_ratio=0.55)
    sessions = set()
    # Over the prepare threshold, then over the trigger, turn by turn, the branches alternating;
    # the gate is shut, so every draft is still being written and each request fits: it goes
    # out as it is.
    for turns in (5, 6):
        for name in NAMES:
            raw = send(proxy, branch(turns, name))
            assert raw.headers["x-summarizer-compacted"] == "false"
            sessions.add(raw.headers["x-summarizer-session"])
    assert len(sessions) == 1, "one derived session for both branches"
    counts = ahead_counts(proxy)  # counted before each answer: no wait needed
    assert counts.get("started") == 2, f"one draft per branch, none restarted: {counts}"
    assert counts.get("deferred") == 2 and "stale" not in counts
    wait_for(lambda: gate.count == 2)
    gate.open.set()
    # Each branch then arrives over the window: it waits for its own draft and adopts it.
    for name in NAMES:
        conversation = branch(9, name)
        assert send(proxy, conversation).headers["x-summarizer-compacted"] == "true"
        sent = chat_requests(upstream, summary=False)[-1].body["messages"]
        assert f"[{other(name)}]" not in str(sent), f"{name} got {other(name)}'s context"
        check_belongs_and_in_order(conversation, sent)
    counts = ahead_counts(proxy)
    assert counts.get("adopted") == 2 and "stale" not in counts
    # Each adoption left its branch over the prepare threshold (four turns verbatim): each
    # branch's next draft started with it, of its own conversation as compacted.
    assert counts.get("started") == 4
    wait_for(lambda: gate.count == 4)
    for call in chat_requests(upstream, summary=True):
        drafted = str(call.body["messages"])
        assert ("[alpha]" in drafted) != ("[bravo]" in drafted), "a draft of one branch only"


def test_the_library_keeps_a_draft_per_branch_of_one_session(tmp_path: Any) -> None:
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
    for name in NAMES:
        assert not manager.prepare(branch(5, name), model=MODEL, session="one").compacted
    assert outcomes == ["started", "started"], "each branch drafts; neither cancels the other"
    wait_for(lambda: all(job.done() for job in manager.drafts.jobs.all()))
    for name in NAMES:
        conversation = branch(7, name)
        result = manager.prepare(conversation, model=MODEL, session="one")
        assert result.compacted and result.event is not None and result.event.ahead_of_time
        assert f"[{other(name)}]" not in str(result.messages)
        check_belongs_and_in_order(conversation, result.messages)
    assert outcomes == ["started", "started", "adopted", "adopted"] and len(calls) == 2
    manager.close()


class Checkpoint:
    def __init__(self, ident: str, basis_count: int) -> None:
        self.id = ident
        self.basis_count = basis_count


def at(session: str, chain: list[str], checkpoint: Checkpoint | None = None) -> Any:
    """The fields of a ``Located`` the jobs read."""

    class Located:
        namespace = "ns"
        calibrated_tokens = 1_000

    item: Any = Located()
    item.session = session
    item.chain = chain
    item.checkpoint = checkpoint
    item.checkpoint_id = checkpoint.id if checkpoint is not None else None
    return item


def finished(job: Any) -> None:
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_result(None)
    job.future = future


def test_jobs_are_kept_per_branch_and_bounded() -> None:
    outcomes: list[str] = []
    jobs = AheadJobs(max_running=2, per_session=2, on_outcome=outcomes.append)
    a = jobs.claim(at("s1", ["p", "a"]))
    assert a is not None and jobs.claim(at("s1", ["p", "a"])) is None  # one per conversation
    b = jobs.claim(at("s1", ["p", "b"]))  # another branch of the session: its own job
    assert b is not None
    assert jobs.claim(at("s2", ["c"])) is None  # two running: busy
    assert outcomes == ["started", "started", "busy"]
    # Interleaved, each branch finds its own job; neither is cancelled by the other.
    for _ in range(3):
        assert jobs.current(at("s1", ["p", "a", "a2"])) is a
        assert jobs.current(at("s1", ["p", "b", "b2"])) is b
    assert jobs.current(at("s1", ["p", "x"])) is None  # a third branch: no job, none dropped
    assert jobs.all() == [a, b] and outcomes[-1] == "busy"
    # A third branch's draft evicts the session's least recently used one.
    finished(a)
    finished(b)
    jobs.current(at("s1", ["p", "a"]))  # a used last
    c = jobs.claim(at("s1", ["p", "x"]))
    assert c is not None and jobs.all() == [a, c] and outcomes[-2:] == ["evicted", "started"]
    assert b.future is not None and b.future.done()


def test_a_job_is_dropped_only_by_a_request_that_shows_it_unusable() -> None:
    outcomes: list[str] = []
    jobs = AheadJobs(on_outcome=outcomes.append)
    cp = Checkpoint("cp1", 2)
    short = jobs.claim(at("s", ["p", "q", "r"], cp))
    long = jobs.claim(at("s", ["p", "q", "r", "s", "t"], cp))
    assert short is not None and long is not None
    # The longest basis a request continues, on its checkpoint, is the one it uses.
    assert jobs.current(at("s", ["p", "q", "r", "s", "t", "u"], cp)) is long
    assert jobs.current(at("s", ["p", "q", "r", "x"], cp)) is short
    # A checkpoint written past the short draft's basis, by a later turn of the branch that
    # continues it: not this branch's draft, but a sibling that left earlier may still use it.
    later = Checkpoint("cp2", 6)
    assert jobs.current(at("s", ["p", "q", "r", "s", "t", "u", "v"], later)) is None
    assert len(jobs.all()) == 2 and "stale" not in outcomes
    # A checkpoint at or below both bases: every continuation stands on it; both are stale.
    below = Checkpoint("cp3", 3)
    assert jobs.current(at("s", ["p", "q", "r", "s", "t", "u"], below)) is None
    assert jobs.all() == [] and outcomes.count("stale") == 2


def test_one_job_per_session_when_so_bounded() -> None:
    outcomes: list[str] = []
    jobs = AheadJobs(per_session=1, on_outcome=outcomes.append)
    first = jobs.claim(at("s", ["p", "a"]))
    second = jobs.claim(at("s", ["p", "b"]))
    assert first is not None and second is not None and jobs.all() == [second]
    assert outcomes == ["started", "evicted", "started"]
    assert jobs.current(at("s", ["p", "b", "more"])) is second


@pytest.mark.parametrize("per_session", [1, 4])
def test_the_process_bound_evicts_the_least_recently_used_session(per_session: int) -> None:
    outcomes: list[str] = []
    jobs = AheadJobs(
        max_running=100, max_kept=3, per_session=per_session, on_outcome=outcomes.append
    )
    made = [jobs.claim(at(f"s{i}", [f"c{i}"])) for i in range(3)]
    jobs.current(at("s0", ["c0", "more"]))  # s0 used last
    fourth = jobs.claim(at("s3", ["c3"]))
    assert fourth is not None and outcomes[-2:] == ["evicted", "started"]
    assert jobs.all() == [made[2], made[0], fourth]
