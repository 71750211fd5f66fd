"""The prefix-chain cache: incremental hashing and validation of growing conversations."""

from __future__ import annotations

from typing import Any

import pytest

from context_summarizer import ContextManager
from context_summarizer.core.caches import ChainCache
from context_summarizer.core.errors import InvalidConversation
from context_summarizer.core.messages import canonical_json, prefix_chain


def conversation(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for i in range(n):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"})
    return messages


def test_a_growing_conversation_checks_only_what_is_new() -> None:
    cache = ChainCache()
    starts: list[int] = []
    messages = conversation(5)
    cache.digests_and_chain(messages, check=starts.append)
    longer = [*messages, {"role": "user", "content": "next"}]
    digests, chain = cache.digests_and_chain(longer, check=starts.append)
    assert starts == [0, 6]
    assert chain == prefix_chain(longer)
    assert len(digests) == 7


def test_an_edited_prefix_is_checked_from_the_first_change() -> None:
    cache = ChainCache()
    starts: list[int] = []
    messages = conversation(5)
    cache.digests_and_chain(messages, check=starts.append)
    edited = [dict(m) for m in messages]
    edited[3]["content"] = "changed"
    _, chain = cache.digests_and_chain(edited, check=starts.append)
    assert starts == [0, 3]
    assert chain == prefix_chain(edited)


def test_a_conversation_that_fails_its_check_is_not_remembered() -> None:
    cache = ChainCache()
    messages = conversation(3)

    def reject(start: int) -> None:
        raise ValueError("no")

    with pytest.raises(ValueError):
        cache.digests_and_chain(messages, check=reject)
    starts: list[int] = []
    cache.digests_and_chain(messages, check=starts.append)
    assert starts == [0]


def test_an_invalid_message_after_a_valid_prefix_is_still_rejected() -> None:
    manager = ContextManager(context_window=100_000)
    messages = conversation(4)
    manager.prepare(messages, model="gpt-4o")
    bad = [*messages, {"role": "tool", "content": "no id"}]
    with pytest.raises(InvalidConversation) as caught:
        manager.prepare(bad, model="gpt-4o")
    assert caught.value.param == "messages[5].tool_call_id"
    # Rejected once, rejected again: the bad conversation was not cached as valid.
    with pytest.raises(InvalidConversation):
        manager.prepare([*bad, {"role": "user", "content": "more"}], model="gpt-4o")


def test_conversations_are_evicted_oldest_first_past_the_byte_bound() -> None:
    one = len(canonical_json(conversation(40)[1]).encode())
    cache = ChainCache(max_bytes=100 * one)
    tasks = [[{"role": "system", "content": f"task {k}"}, *conversation(40)[1:]] for k in range(5)]
    for messages in tasks:
        _, chain = cache.digests_and_chain(messages)
        assert chain == prefix_chain(messages)  # eviction never changes an answer
    assert 0 < cache.bytes_held <= 100 * one
    assert len(cache) < 5
    starts: list[int] = []
    cache.digests_and_chain(tasks[-1], check=starts.append)
    assert starts == [len(tasks[-1])]  # the newest is still held
    cache.digests_and_chain(tasks[0], check=starts.append)
    assert starts[-1] == 0  # the oldest was evicted: checked and hashed again


def test_a_conversation_larger_than_the_bound_is_still_held_while_in_use() -> None:
    cache = ChainCache(max_bytes=10)
    messages = conversation(6)
    cache.digests_and_chain(messages)
    starts: list[int] = []
    cache.digests_and_chain([*messages, {"role": "user", "content": "more"}], check=starts.append)
    assert starts == [len(messages)]
    assert len(cache) == 1
