"""The compaction controls through the library, with the real openai SDK against the test
upstream: compact now with instructions, compaction off, and a trigger in tokens."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from context_summarizer import ContextManager
from context_summarizer.stores import MemoryStore
from context_summarizer.testing import RoutingResponder, TestUpstream, echo_responder

from .test_controls_proxy import MODEL, history, last_user_text, summary_requests


@pytest.fixture
def upstream() -> Iterator[TestUpstream]:
    responder = RoutingResponder(echo_responder)
    with TestUpstream(context_window=128_000, responder=responder) as server:
        yield server


def manager(upstream: TestUpstream, **config: object) -> ContextManager:
    client = openai.OpenAI(base_url=upstream.base_url, api_key="sk-test", max_retries=0)
    settings: dict[str, object] = {"context_window": 64_000, **config}
    return ContextManager(client=client, store=MemoryStore(), **settings)  # type: ignore[arg-type]


def test_force_manual_compacts_now_with_the_calls_instructions(upstream: TestUpstream) -> None:
    context = manager(upstream, summary_instructions="Write in English.")
    messages = history(6)
    assert not context.prepare(messages, model=MODEL).compacted  # far below the trigger
    prepared = context.prepare(
        messages, model=MODEL, force="manual", instructions="Keep TKT-9 verbatim."
    )
    assert prepared.compacted
    assert len(prepared.messages) < len(messages)
    instruction = last_user_text(summary_requests(upstream)[0].body)
    assert instruction.index("Write in English.") < instruction.index("Keep TKT-9 verbatim.")


def test_compaction_off_sends_the_messages_as_given(upstream: TestUpstream) -> None:
    context = manager(upstream, compact=False, context_window=8_000)
    messages = history(12)  # over an 8k window's trigger
    prepared = context.prepare(messages, model=MODEL)
    assert not prepared.compacted and not prepared.rewritten
    assert prepared.messages == messages
    assert summary_requests(upstream) == []


def test_a_trigger_in_tokens(upstream: TestUpstream) -> None:
    messages = history(16)
    size = manager(upstream).prepare(messages, model=MODEL).report.estimated_tokens
    prepared = manager(upstream, trigger_tokens=size * 2 // 3).prepare(messages, model=MODEL)
    assert prepared.compacted
    assert prepared.report.estimated_tokens <= size // 3
