"""What goes upstream belongs to *that* conversation, keeps the raw order of what it keeps, and is
refused only when it cannot fit the window: forks, follow-ups, tenants, small windows, two
proxies on one store (issue 11, items 1-4, 17 and 18c), through the real proxy and SDK."""

from __future__ import annotations

import base64
import struct
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from context_summarizer import ContextManager, PinRule
from context_summarizer.proxy import ProxyServer
from context_summarizer.proxy.settings import Settings
from context_summarizer.stores import SQLiteStore
from context_summarizer.testing import Fault, RoutingResponder, TestUpstream, echo_responder

from .conftest import ProxyFactory, tool_turn
from .invariants import check_gaps_summarized, check_valid_conversation, place_messages
from .test_proxy import KEY_A, KEY_B, MODEL, TOOLS, chat_requests, long_history

SUMMARY_OPENING = "[Context summary]"


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    with TestUpstream(responder=RoutingResponder(echo_responder)) as server:
        yield server


def send(proxy: ProxyServer, messages: list[dict[str, Any]], key: str = KEY_A, **kw: Any) -> Any:
    c = openai.OpenAI(base_url=proxy.base_url, api_key=key, max_retries=0)
    raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=messages, **kw)
    raw.parse()
    return raw


def is_summary(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and str(message.get("content", "")).startswith(
        SUMMARY_OPENING
    )


def check_belongs_and_in_order(raw: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    """Every sent message is this conversation's own (at its own index), in raw order; every
    run of raw messages left out has a summary standing exactly where it was; every tool
    message answers the assistant message right before its group (``invariants``); the
    conversation's last message is sent."""
    placed = place_messages(raw, sent)
    check_gaps_summarized(raw, placed)
    check_valid_conversation(sent)
    assert placed and placed[-1].raw_index == len(raw) - 1, "the conversation's end was not sent"


# -- 1. forked conversations ----------------------------------------------------------------------


def test_a_fork_never_gets_the_other_branchs_rewrite(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    """Branch A ends in a huge tool output that its compaction cuts to fit; branch B shares the
    prefix and asks a question instead. B's question reaches the upstream, as B wrote it."""
    proxy = start_proxy(context_window=8_000)
    prefix = long_history(5)[:-1]
    huge = "A-branch output " + " ".join(f"row{i} total {i * 7}" for i in range(2_400))
    branch_a = [*prefix, *tool_turn("call_big", "read_file", '{"n": 99}', huge)]
    assert send(proxy, branch_a, tools=TOOLS).headers["x-summarizer-compacted"] == "true"
    sent_a = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert "A-branch output" in sent_a[-1]["content"] and len(sent_a[-1]["content"]) < len(huge)

    question = "Before going on: which module raised the first ValueError?"
    branch_b = [
        *prefix,
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": question},
    ]
    send(proxy, branch_b, tools=TOOLS)
    sent_b = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert sent_b[-1] == {"role": "user", "content": question}
    assert not any("A-branch output" in str(m.get("content")) for m in sent_b)
    check_belongs_and_in_order(branch_b, sent_b)

    # Branch A again (a retry): its own checkpoint still applies, no new summary, same rewrite.
    summaries = len(chat_requests(upstream, summary=True))
    send(proxy, branch_a, tools=TOOLS)
    assert len(chat_requests(upstream, summary=True)) == summaries
    assert chat_requests(upstream, summary=False)[-1].body["messages"] == sent_a


def test_a_fork_through_wrap_gets_its_own_context(upstream: TestUpstream) -> None:
    import context_summarizer

    client = context_summarizer.wrap(
        openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0),
        context_window=8_000,
    )
    prefix = long_history(5)[:-1]
    huge = "A-branch output " + " ".join(f"row{i} total {i * 7}" for i in range(2_400))
    client.chat.completions.create(
        model=MODEL, messages=[*prefix, *tool_turn("c9", "read_file", "{}", huge)], tools=TOOLS
    )
    question = "Which module raised the first ValueError?"
    branch_b = [
        *prefix,
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": question},
    ]
    client.chat.completions.create(model=MODEL, messages=branch_b, tools=TOOLS)
    sent_b = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert sent_b[-1]["content"] == question
    check_belongs_and_in_order(branch_b, sent_b)


# -- 2. order --------------------------------------------------------------------------------------


def _with_follow_up(before: int, after: int, words: int) -> tuple[list[dict[str, Any]], ...]:
    messages = long_history(2)[:-1]
    rule = {"role": "developer", "content": "Mid-session rule: never touch migrations/."}
    messages.append(rule)
    for turn in range(before):
        output = " ".join(f"a{turn}_{i}" for i in range(words))
        messages += tool_turn(f"w{turn}", "read_file", "{}", output)
    follow_up = {"role": "user", "content": "Also update CHANGELOG.md when you are done."}
    messages.append(follow_up)
    for turn in range(after):
        output = " ".join(f"b{turn}_{i}" for i in range(words))
        messages += tool_turn(f"x{turn}", "read_file", "{}", output)
    return messages, rule, follow_up


def test_a_follow_up_and_a_mid_conversation_rule_stay_where_they_were(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(context_window=16_000)
    messages, rule, follow_up = _with_follow_up(3, 4, 300)
    raw = send(proxy, messages, tools=TOOLS)
    assert raw.headers["x-summarizer-compacted"] == "true"
    sent = chat_requests(upstream, summary=False)[-1].body["messages"]
    assert rule in sent and follow_up in sent
    check_belongs_and_in_order(messages, sent)
    # Each summary request is the live conversation up to the end of the turns it replaces;
    # the turns after the follow-up are summarized with the follow-up quoted as their anchor.
    requests = chat_requests(upstream, summary=True)
    for request in requests:
        prefix = request.messages[:-1]
        assert prefix == messages[: len(prefix)]
    assert any("CHANGELOG.md" in r.messages[-1]["content"] for r in requests)


def test_every_run_of_a_conversation_arriving_over_the_window_gets_a_model_summary(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    """The live prefix up to the later run is over the window, so the provider cannot have cached
    it: that run's request is built on the earlier runs' new summaries instead, and fits."""
    proxy = start_proxy(context_window=12_000)
    messages, _, follow_up = _with_follow_up(3, 5, 900)  # about 35k tokens
    raw = send(proxy, messages, tools=TOOLS)
    assert int(raw.headers["x-summarizer-prompt-tokens"]) <= 12_000
    sent = chat_requests(upstream, summary=False)[-1].body["messages"]
    check_belongs_and_in_order(messages, sent)
    summaries = [m for m in sent if is_summary(m)]
    requests = chat_requests(upstream, summary=True)
    assert len(summaries) == len(requests) >= 2
    assert not any("could not summarize" in m["content"] for m in summaries)
    later = requests[-1]
    assert "CHANGELOG.md" in later.messages[-1]["content"]  # anchored at the follow-up
    assert summaries[0] in later.messages and follow_up in later.messages
    assert all(r.prompt_tokens is not None and r.prompt_tokens <= 12_000 for r in requests)


# -- 3. calibration is per tenant --------------------------------------------------------------


def _png(width: int, height: int) -> str:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = zlib.compress(b"".join(b"\x00" + b"\x00" * width * 3 for _ in range(height)))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


def test_one_tenants_images_never_move_another_tenants_estimate(
    upstream: TestUpstream, start_proxy: ProxyFactory, tmp_path: Path
) -> None:
    text_only = long_history(3, task="Summarize the invoices.")

    def estimates(proxy: ProxyServer, *, images_between: bool) -> list[int]:
        first = int(send(proxy, text_only, KEY_B).headers["x-summarizer-prompt-tokens"])
        if images_between:
            picture = {
                "type": "image_url",
                "image_url": {"url": _png(1024, 1024), "detail": "high"},
            }
            for n in range(4):
                content = [{"type": "text", "text": f"What is in picture {n}?"}, picture]
                send(proxy, [{"role": "user", "content": content}], KEY_A)
        second = int(send(proxy, text_only, KEY_B).headers["x-summarizer-prompt-tokens"])
        return [first, second]

    alone = estimates(start_proxy(db=tmp_path / "alone.db"), images_between=False)
    shared = estimates(start_proxy(db=tmp_path / "shared.db"), images_between=True)
    assert shared == alone


# -- 4. refusals of requests that fit ------------------------------------------------------------


def _notes(turns: int, words: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You keep notes."}]
    for turn in range(turns):
        role = "user" if turn % 2 == 0 else "assistant"
        text = " ".join(f"note{turn}-{i}" for i in range(words))
        messages.append({"role": role, "content": text})
    if messages[-1]["role"] != "user":
        messages.append({"role": "user", "content": "And next?"})
    return messages


@pytest.mark.parametrize(("window", "turns", "words"), [(4_000, 11, 55), (3_072, 4, 250)])
def test_a_small_window_serves_what_fits_instead_of_refusing(
    upstream: TestUpstream, start_proxy: ProxyFactory, window: int, turns: int, words: int
) -> None:
    proxy = start_proxy(context_window=window)
    messages = _notes(turns, words)
    for _ in range(3):
        raw = send(proxy, messages)
        assert raw.status_code == 200
        assert int(raw.headers["x-summarizer-prompt-tokens"]) <= window
        sent = chat_requests(upstream, summary=False)[-1].body["messages"]
        check_belongs_and_in_order(messages, sent)
        messages = [*messages, {"role": "assistant", "content": "Noted. " * 40}]
        messages.append({"role": "user", "content": "Another note: " + "detail " * 60})
    assert chat_requests(upstream, summary=True), "a summary was written, not a refusal"


def test_only_what_cannot_fit_the_window_is_refused_and_the_error_says_what(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    proxy = start_proxy(context_window=4_000)
    messages = _notes(3, 40)
    messages.append({"role": "user", "content": "paste " * 3_500})
    c = openai.OpenAI(base_url=proxy.base_url, api_key=KEY_A, max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model=MODEL, messages=messages)
    error = info.value.body
    assert isinstance(error, dict) and error["code"] == "context_length_exceeded"
    assert "latest user message" in error["message"] and "4,000-token window" in error["message"]


# -- 17. one compaction per session across processes --------------------------------------------


def test_two_proxies_on_one_store_summarize_a_session_once(
    upstream: TestUpstream, tmp_path: Path
) -> None:
    settings = Settings(
        upstream=upstream.base_url,
        port=0,
        db=tmp_path / "shared.db",
        context_window=16_000,
        prepare_ratio=None,  # each replica would draft on its own (docs/operating.md)
    )
    upstream.inject(Fault(kind="delay", seconds=1.0, match="summary"))
    messages = long_history(7)
    # Each with its own SQLite connection and in-process locks, as two processes would have.
    with (
        ProxyServer(settings, store=SQLiteStore(tmp_path / "shared.db")) as one,
        ProxyServer(settings, store=SQLiteStore(tmp_path / "shared.db")) as two,
    ):
        results: list[str] = []
        errors: list[BaseException] = []

        def go(proxy: ProxyServer) -> None:
            try:
                results.append(
                    send(proxy, messages, tools=TOOLS).headers["x-summarizer-checkpoint"]
                )
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(p,)) for p in (one, two, one, two)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert errors == []
    assert len(chat_requests(upstream, summary=True)) == 1
    assert len(set(results)) == 1 and results[0]
    agent = [r.body["messages"] for r in chat_requests(upstream, summary=False)]
    assert len(agent) == 4 and all(m == agent[0] for m in agent)


def test_interleaved_conversations_of_one_session_drafting_ahead_never_mix(
    upstream: TestUpstream, start_proxy: ProxyFactory
) -> None:
    """Two conversations with the same system prompt and task (one derived session: parallel
    attempts at one task), interleaved request by request through compactions drafted ahead of
    time: each gets only its own context, and neither's drafts are dropped by the other."""
    from .test_ahead import ahead_counts

    proxy = start_proxy(prepare_ratio=0.6)
    names = ("alpha", "bravo")
    sessions = set()
    compacted = 0
    for turns in range(4, 16):
        for name in names:
            conversation = [
                {**m, "content": f"[{name}] {m['content']}"} if m["role"] == "tool" else m
                for m in long_history(turns)[:-1]  # an agent appends: a tool output last
            ]
            raw = send(proxy, conversation, tools=TOOLS)
            sessions.add(raw.headers["x-summarizer-session"])
            compacted += raw.headers["x-summarizer-compacted"] == "true"
            sent = chat_requests(upstream, summary=False)[-1].body["messages"]
            other = names[1 - names.index(name)]
            assert f"[{other}]" not in str(sent), f"{name} turn {turns} got {other}'s context"
            check_belongs_and_in_order(conversation, sent)
    assert len(sessions) == 1 and compacted >= 4
    counts = ahead_counts(proxy)
    assert counts.get("adopted", 0) >= 2, counts
    assert "stale" not in counts and "evicted" not in counts, counts


# -- 18c. a pin rule keeps the newest matches ------------------------------------------------------


def test_the_readmes_pin_rule_never_fills_the_window(upstream: TestUpstream) -> None:
    llm = openai.OpenAI(base_url=upstream.base_url, api_key="k", max_retries=0)
    context = ContextManager(client=llm, context_window=8_000, pin=[PinRule(tool="read_plan")])
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You follow the plan."},
        {"role": "user", "content": "Ship the release."},
    ]
    for turn in range(30):
        plan = f"PLAN v{turn}: " + " ".join(f"step{turn}-{i}" for i in range(250))
        history += tool_turn(f"p{turn}", "read_plan", "{}", plan)
        prepared = context.prepare(history, model=MODEL)
        assert prepared.report.estimated_tokens <= 8_000
    sent = prepared.messages
    assert any("PLAN v29:" in str(m.get("content")) for m in sent)
    assert not any("PLAN v10:" in str(m.get("content")) for m in sent)
